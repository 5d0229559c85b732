"""Discovery and /version answers, in the shapes of discovery_coordination_v1.txt."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from fakes.kube.resources import GROUP, ResourceType

# What the real apiserver lists for leases (and leasecandidates), even where this fake
# answers some of them with 405: discovery mirrors the real server, not the fake.
_LEASE_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def discovery_document(
    path: str,
    *,
    served: Mapping[str, list[ResourceType]],
    core: Sequence[ResourceType] = (),
    kubernetes_version: str,
    server_address: str,
) -> dict[str, Any] | None:
    """The answer to a discovery path (/version, /api, /apis, ...), or None if it is not one."""
    major, minor = kubernetes_version.lstrip("v").split(".")[:2]
    group_versions = [
        {"groupVersion": f"{GROUP}/{version}", "version": version} for version in served
    ]
    group = {
        "name": GROUP,
        "versions": group_versions,
        "preferredVersion": group_versions[0],
    }
    if path == "/version":
        return {
            "major": major,
            "minor": minor,
            "gitVersion": kubernetes_version,
            "gitCommit": hashlib.sha1(
                kubernetes_version.encode(), usedforsecurity=False
            ).hexdigest(),
            "gitTreeState": "clean",
            "buildDate": "2025-08-12T09:27:46Z",
            "goVersion": "go1.24.5",
            "compiler": "gc",
            "platform": "linux/amd64",
        }
    if path == "/api":
        # Without Nodes the core group is not offered at all: an empty core resource list
        # makes discovery clients (kubectl api-resources) report an error.
        return {
            "kind": "APIVersions",
            "versions": ["v1"] if core else [],
            "serverAddressByClientCIDRs": [
                {
                    "clientCIDR": "0.0.0.0/0",
                    "serverAddress": server_address,
                }
            ],
        }
    if path == "/api/v1" and core:
        return {
            "kind": "APIResourceList",
            "groupVersion": "v1",
            "resources": [entry for resource in core for entry in _core_entries(resource)],
        }
    if path == "/apis":
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]}
    if path == f"/apis/{GROUP}":
        return {"kind": "APIGroup", "apiVersion": "v1", **group}
    prefix = f"/apis/{GROUP}/"
    if path.startswith(prefix) and path[len(prefix) :] in served:
        version = path[len(prefix) :]
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{GROUP}/{version}",
            "resources": [
                {
                    "name": resource.plural,
                    "singularName": resource.singular,
                    "namespaced": True,
                    "kind": resource.kind,
                    "verbs": list(_LEASE_VERBS),
                    "storageVersionHash": resource.storage_version_hash,
                }
                for resource in served[version]
            ],
        }
    return None


def _core_entries(resource: ResourceType) -> list[dict[str, Any]]:
    """A core kind and its status subresource, as /api/v1 lists them."""
    entry: dict[str, Any] = {
        "name": resource.plural,
        "singularName": resource.singular,
        "namespaced": resource.namespaced,
        "kind": resource.kind,
        "verbs": list(_LEASE_VERBS),
    }
    if resource.short_names:
        entry["shortNames"] = list(resource.short_names)
    entry["storageVersionHash"] = resource.storage_version_hash
    entries = [entry]
    if resource.has_status:
        entries.append(
            {
                "name": f"{resource.plural}/status",
                "singularName": "",
                "namespaced": resource.namespaced,
                "kind": resource.kind,
                "verbs": ["get", "patch", "update"],
            }
        )
    return entries
