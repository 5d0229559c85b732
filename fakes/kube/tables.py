"""Server-side printing (`meta.k8s.io/v1` Table), which `kubectl get` asks for.

With it `kubectl get leases -A` shows the HOLDER column as against a real cluster; without
it kubectl would fall back to NAME and AGE only.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from fakes.kube.resources import ResourceType, human_duration
from fakes.kube.store import StoredObject, with_kind

_DESCRIPTIONS = {
    "Name": "Name must be unique within a namespace.",
    "Age": "CreationTimestamp is a timestamp representing the server time when this object was "
    "created.",
    "Holder": "holderIdentity contains the identity of the holder of a current lease.",
    "LeaseName": "LeaseName is the name of the lease for which this candidate is contending.",
    "BinaryVersion": "BinaryVersion is the binary version.",
    "EmulationVersion": "EmulationVersion is the emulation version.",
}


def wants_table(accept: str) -> bool:
    """kubectl sends `application/json;as=Table;v=v1;g=meta.k8s.io, application/json`."""
    return any("as=Table" in clause and "g=meta.k8s.io" in clause for clause in accept.split(","))


def _age(creation_timestamp: str, now: float) -> str:
    created = datetime.fromisoformat(creation_timestamp).timestamp()
    return human_duration(now - created)


def _row(
    resource: ResourceType, obj: StoredObject, version: str, include_object: str, now: float
) -> dict[str, Any]:
    cells: list[Any] = []
    for column, spec_field in resource.table_columns:
        if column == "Name":
            cells.append(obj["metadata"]["name"])
        elif column == "Age":
            cells.append(_age(obj["metadata"]["creationTimestamp"], now))
        else:
            cells.append(obj["spec"].get(spec_field, ""))
    row: dict[str, Any] = {"cells": cells}
    if include_object == "Object":
        row["object"] = with_kind(resource, obj, version)
    elif include_object != "None":
        row["object"] = {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj["metadata"],
        }
    return row


def table(
    resource: ResourceType,
    objects: Iterable[StoredObject],
    *,
    version: str,
    now: float,
    list_metadata: dict[str, Any],
    include_object: str = "Metadata",
) -> dict[str, Any]:
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata,
        "columnDefinitions": [
            {
                "name": column,
                "type": "string",
                "format": "name" if column == "Name" else "",
                "description": _DESCRIPTIONS[column],
                "priority": 0,
            }
            for column, _ in resource.table_columns
        ],
        "rows": [_row(resource, obj, version, include_object, now) for obj in objects],
    }
