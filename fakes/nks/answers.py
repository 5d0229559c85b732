"""The fake NKS's answers in the guide's shapes: clusters, nodegroups, events, health and
kubeconfigs, computed from the state when a request looks (so health ages with the clock)."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from typing import Any

from fakes.nks.model import (
    COMPUTED,
    FakeCluster,
    FakeEvent,
    FakeNodegroup,
    iso_time,
    node_status_word,
    stable_uuid,
)


class JsonAnswers:
    """Rendering for FakeNksState, which supplies the attributes declared here."""

    lock: threading.RLock
    tenant_id: str
    username: str
    public_url: str
    kube_server_url: str | None
    clusters: dict[str, FakeCluster]
    remove_after_list: set[str]
    now: Callable[[], float]  # the state's clock (seconds), so health ages as time passes

    # ---- health ------------------------------------------------------------------------

    def health(self, cluster: FakeCluster) -> tuple[Any, Any]:
        with self.lock:
            now = self.now()
            interval = cluster.health_refresh_interval
            refreshed = now - (now % interval) if interval > 0 else now
            if cluster.health_stops_at is not None:
                refreshed = min(refreshed, cluster.health_stops_at)
            age = now - refreshed
            stale_word: str | None = None
            if age >= cluster.rotten_after:
                freshness, stale_word = "ROTTEN", "ROTTEN_DATA"
            elif age >= cluster.stale_after:
                freshness, stale_word = "STALE", "STALED_DATA"
            else:
                freshness = cluster.fresh_health_status

            groups: dict[str, tuple[str, str]] = {}
            total_ready = total_not_ready = 0
            for group in cluster.workers:
                ready = sum(1 for node in group.nodes if node.ready)
                not_ready = group.node_count - ready
                total_ready += ready
                total_not_ready += not_ready
                groups[group.name] = (
                    stale_word or node_status_word(ready, not_ready),
                    f"{ready}:{not_ready}",
                )
            node_status = stale_word or node_status_word(total_ready, total_not_ready)
            api_status = stale_word or ("NORMAL" if cluster.api_working else "K8S_API_NOT_WORKING")
            api = "OK" if cluster.api_working else "NOT_OK"

            reason: dict[str, Any]
            if cluster.health_style == "nested":
                reason = {
                    "timestamp": iso_time(refreshed, zulu=True),
                    "cluster": {"api_status": api_status, "node_status": node_status},
                    "api": api,
                    "nodegroup": {"node_status": {name: g[0] for name, g in groups.items()}},
                    "nodegroup-stats": {name: g[1] for name, g in groups.items()},
                }
            elif cluster.health_style == "per-node":
                reason = {
                    "timestamp": iso_time(refreshed),
                    "api": api.lower(),
                    "cluster.api_status": api_status,
                    "cluster.node_status": node_status,
                }
                for group in cluster.workers:
                    for node in group.nodes:
                        reason[f"{node.name}.Ready"] = "True" if node.ready else "False"
            else:
                reason = {
                    "timestamp": iso_time(refreshed),
                    "cluster.api_status": api_status,
                    "cluster.node_status": node_status,
                    "api": api,
                }
                for name, (status, stats) in groups.items():
                    reason[f"nodegroup.node_status.{name}"] = status
                    reason[f"nodegroup-stats.{name}"] = stats

            status_value = (
                freshness
                if cluster.health_status_override is COMPUTED
                else cluster.health_status_override
            )
            reason_value = (
                reason
                if cluster.health_reason_override is COMPUTED
                else cluster.health_reason_override
            )
            return status_value, reason_value

    # ---- representations (the guide's shapes) -----------------------------------------

    def _links(self, path: str) -> list[dict[str, str]]:
        return [
            {"href": f"{self.public_url}/v1/{path}", "rel": "self"},
            {"href": f"{self.public_url}/{path}", "rel": "bookmark"},
        ]

    def cluster_json(self, cluster: FakeCluster, *, detail: bool) -> dict[str, Any]:
        with self.lock:
            health_status, reason = self.health(cluster)
            if not detail and cluster.list_reason_as_string and isinstance(reason, dict):
                reason = json.dumps(reason)
            labels = dict(cluster.labels)
            if not detail:
                labels.pop("platform_version", None)
                labels.pop("kube_version_status", None)
            data: dict[str, Any] = {
                "cluster_template_id": "b4503d97-6012-499d-a31a-5200f94a7890",
                "create_timeout": 60,
                "docker_volume_size": None,
                "flavor_id": cluster.flavor_id,
                "health_status": health_status,
                "health_status_reason": reason,
                "keypair": cluster.keypair,
                "labels": labels,
                "links": self._links(f"clusters/{cluster.uuid}"),
                "name": cluster.name,
                "node_count": sum(group.node_count for group in cluster.workers),
                "stack_id": cluster.stack_id,
                "status": cluster.status,
                "status_reason": cluster.status_reason,
                "uuid": cluster.uuid,
            }
            if detail:
                data.update(
                    {
                        "api_address": self.api_address(cluster),
                        "coe_version": labels.get("kube_tag"),
                        "container_version": "1.12.6",
                        "created_at": iso_time(cluster.created_at),
                        "fixed_network": cluster.fixed_network,
                        "fixed_subnet": cluster.fixed_subnet,
                        "floating_ip_enabled": False,
                        "node_addresses": [
                            node.address for group in cluster.workers for node in group.nodes
                        ],
                        "project_id": cluster.project_id or self.tenant_id,
                        "updated_at": iso_time(cluster.updated_at),
                        "user_id": stable_uuid("user", self.username).replace("-", ""),
                    }
                )
            data.update(cluster.detail_overrides if detail else cluster.list_overrides)
            return data

    def cluster_list_json(self) -> dict[str, Any]:
        with self.lock:
            answer = {
                "clusters": [
                    self.cluster_json(cluster, detail=False) for cluster in self.clusters.values()
                ]
            }
            # Fault injection: the cluster is listed, then deleted before anyone looks closer.
            for uuid in self.remove_after_list:
                self.clusters.pop(uuid, None)
            self.remove_after_list.clear()
            return answer

    def nodegroup_json(
        self, cluster: FakeCluster, group: FakeNodegroup, *, detail: bool
    ) -> dict[str, Any]:
        with self.lock:

            def count(value: int | None) -> Any:
                if value is None or detail or not group.counts_as_strings:
                    return value
                return str(value)

            data: dict[str, Any] = {
                "flavor_id": group.flavor_id,
                "image_id": group.image_id,
                "is_default": group.is_default,
                "max_node_count": count(group.max_node_count),
                "min_node_count": count(group.min_node_count),
                "name": group.name,
                "node_count": count(group.node_count),
                "role": group.role,
                "stack_id": group.stack_id,
                "status": group.status,
                "uuid": group.uuid,
            }
            if detail:
                data.update(
                    {
                        "cluster_id": cluster.uuid,
                        "created_at": iso_time(group.created_at),
                        "docker_volume_size": None,
                        "id": group.serial,
                        "labels": dict(group.labels),
                        "links": self._links(f"clusters/{cluster.uuid}/nodegroups/{group.uuid}"),
                        # The guide's shape: addresses only. The nodes' names and instance
                        # UUIDs stay in the state (FakeNode), where the fake Kubernetes API
                        # reads them to serve matching Nodes; NKS itself never lists them.
                        "node_addresses": [node.address for node in group.nodes],
                        "project_id": cluster.project_id or self.tenant_id,
                        "status_reason": group.status_reason,
                        "updated_at": iso_time(group.updated_at),
                        "version": None,
                    }
                )
            data.update(group.detail_overrides if detail else group.list_overrides)
            return data

    def event_json(self, event: FakeEvent) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": event.id,
            "uuid": event.uuid,
            "project_id": self.tenant_id,
            "cluster_uuid": event.cluster_uuid,
            "cluster_name": event.cluster_name,
            "resource_uuid": event.resource_uuid,
            "resource_name": event.resource_name,
            "resource_type": event.resource_type,
            "type": event.type,
            "state": event.state,
            "contents": event.contents,
            "created_at": iso_time(event.created_at),
            "updated_at": iso_time(event.updated_at),
        }
        if event.details is not None:
            data["details"] = event.details
        return data

    def api_address(self, cluster: FakeCluster) -> str:
        """The cluster's API server, as NKS reports it and names it in the kubeconfig."""
        return self.kube_server_url or f"https://{cluster.uuid[:8]}-kr1-k8s.fake-nks.invalid:6443"

    def kubeconfig_for(self, cluster: FakeCluster) -> str:
        if cluster.kubeconfig is not None:
            return cluster.kubeconfig
        server = self.api_address(cluster)
        name = json.dumps(cluster.name)  # a JSON string is a valid double-quoted YAML scalar
        if self.kube_server_url and server.startswith("https://"):
            tls = "    insecure-skip-tls-verify: true\n"
        elif self.kube_server_url:
            tls = ""
        else:
            authority = base64.b64encode(b"fake NKS demo certificate authority").decode()
            tls = f"    certificate-authority-data: {authority}\n"
        return (
            "apiVersion: v1\n"
            "clusters:\n"
            "- cluster:\n"
            f"{tls}"
            f"    server: {server}\n"
            f"  name: {name}\n"
            "contexts:\n"
            "- context:\n"
            f"    cluster: {name}\n"
            "    user: admin\n"
            "  name: default\n"
            "current-context: default\n"
            "kind: Config\n"
            "preferences: {}\n"
            "users:\n"
            "- name: admin\n"
            "  user:\n"
            f"    token: fake-nks-{cluster.uuid[:8]}\n"
        )
