"""Nodes in the fake's store, written the way the cluster's own actors write them.

The kubelet registers its Node and posts its status (Ready, the pressure conditions, the
addresses, nodeInfo); `kubectl cordon` sets spec.unschedulable; the node lifecycle controller
marks a silent node's conditions Unknown and taints it. Tests and scenarios call these
helpers in-process; a client sees the results as ordinary ADDED / MODIFIED / DELETED events.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import orjson

from fakes.kube import errors
from fakes.kube.kubelet import (
    KUBELET_CONDITIONS,
    NOT_READY_MESSAGE,
    NOT_READY_REASON,
    UNKNOWN_MESSAGE,
    UNKNOWN_REASON,
    Moment,
)
from fakes.kube.node_schema import (
    NOT_READY_TAINT,
    clean_node_spec,
    clean_node_status,
    format_node_time,
)
from fakes.kube.resources import NODES, validate_name, validate_spec
from fakes.kube.storage import StoreBase, StoredObject, with_kind

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"


class NodeOperations(StoreBase):
    """Create, change and delete Nodes directly (thread-safe), as tests and scenarios do."""

    def now(self) -> float:
        """The store's clock (epoch seconds): what a write without `at` stamps."""
        return self._clock()

    def apply_node(
        self,
        name: str,
        *,
        spec: Mapping[str, Any] | None = None,
        status: Mapping[str, Any] | None = None,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        created_at: float | datetime | None = None,
    ) -> dict[str, Any]:
        """Create the Node or replace what is given (ADDED / MODIFIED; no event if unchanged).

        None keeps the current spec, status, labels or annotations. Times accept RFC 3339
        strings, aware datetimes or epoch seconds.
        """
        with self._lock:
            old = self._objects[NODES.plural].get(("", name))
            new_spec = (
                clean_node_spec(dict(spec), "v1", python_values=True)
                if spec is not None
                else (old["spec"] if old else {})
            )
            new_status = (
                clean_node_status(dict(status), "v1", python_values=True)
                if status is not None
                else (old["status"] if old else clean_node_status({}, "v1"))
            )
            problems = [
                *validate_name(name),
                *validate_spec(NODES, new_spec, old["spec"] if old else None),
            ]
            if problems:
                raise errors.invalid(NODES.kind, name, problems, NODES.group)
            previous = old["metadata"] if old else {}
            client_metadata: dict[str, Any] = {}
            for key, given in (("labels", labels), ("annotations", annotations)):
                if given is None:
                    if key in previous:
                        client_metadata[key] = previous[key]
                elif given:
                    client_metadata[key] = dict(given)
            if old is None:
                created = created_at.timestamp() if isinstance(created_at, datetime) else created_at
                obj = self._new_object_locked(
                    NODES,
                    "",
                    name,
                    client_metadata,
                    new_spec,
                    created_at=created,
                    status=new_status,
                )
            else:
                obj = self._replace_object_locked(NODES, old, client_metadata, new_spec, new_status)
            return _copy(obj)

    def get_node(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            obj = self._objects[NODES.plural].get(("", name))
            return None if obj is None else _copy(obj)

    def list_nodes(self) -> list[dict[str, Any]]:
        with self._lock:
            objects = self._objects[NODES.plural]
            chosen = [objects[key] for key in self._keys_locked(NODES)]
        return [_copy(obj) for obj in chosen]

    def delete_node(self, name: str) -> bool:
        """Delete (DELETED event); False when there was nothing to delete."""
        with self._lock:
            obj = self._objects[NODES.plural].get(("", name))
            if obj is None:
                return False
            self._delete_object_locked(NODES, obj)
            return True

    # --- what the cluster's actors do -----------------------------------------------------

    def _change_node(
        self,
        name: str,
        *,
        spec: Callable[[dict[str, Any]], None] | None = None,
        status: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Change a copy of the Node's spec and/or status and write it; 404 if missing."""
        with self._lock:
            old = self._objects[NODES.plural].get(("", name))
            if old is None:
                raise errors.not_found(NODES.plural, name, NODES.group)
            new_spec = orjson.loads(orjson.dumps(old["spec"]))
            new_status = orjson.loads(orjson.dumps(old["status"]))
            if spec is not None:
                spec(new_spec)
                new_spec = clean_node_spec(new_spec, "v1", python_values=True)
            if status is not None:
                status(new_status)
                new_status = clean_node_status(new_status, "v1", python_values=True)
            problems = validate_spec(NODES, new_spec, old["spec"])
            if problems:
                raise errors.invalid(NODES.kind, name, problems, NODES.group)
            kept = {k: v for k, v in old["metadata"].items() if k in ("labels", "annotations")}
            return _copy(self._replace_object_locked(NODES, old, kept, new_spec, new_status))

    def set_node_condition(
        self,
        name: str,
        condition_type: str,
        status: str,
        *,
        reason: str = "",
        message: str = "",
        at: Moment | None = None,
        heartbeat: bool = True,
    ) -> dict[str, Any]:
        """Post one condition; lastTransitionTime moves only when the status changes, as the
        kubelet and node controller write it. `heartbeat` False keeps lastHeartbeatTime (the
        node controller's writes for a silent node)."""
        stamp = format_node_time(self._clock() if at is None else at)
        change = _condition_writer((condition_type,), status, reason, message, stamp, heartbeat)
        return self._change_node(name, status=change)

    def set_node_ready(
        self,
        name: str,
        ready: str | bool,
        *,
        reason: str | None = None,
        message: str | None = None,
        at: Moment | None = None,
    ) -> dict[str, Any]:
        """Flip Ready in one status write: True or False as the kubelet posts it, "Unknown"
        as the node lifecycle controller writes it for a kubelet that stopped posting (every
        kubelet condition Unknown, heartbeats kept). A second write keeps the controller's
        taints in step (unreachable for Unknown, not-ready for False), as it does."""
        status = ("True" if ready else "False") if isinstance(ready, bool) else ready
        if status not in ("True", "False", "Unknown"):
            raise ValueError(f"Ready is True, False or Unknown, not {ready!r}")
        stamp = format_node_time(self._clock() if at is None else at)
        if status == "Unknown":
            change = _condition_writer(
                tuple(kind for kind, *_ in KUBELET_CONDITIONS),
                "Unknown",
                reason or UNKNOWN_REASON,
                message or UNKNOWN_MESSAGE,
                stamp,
                heartbeat=False,
            )
        elif status == "True":
            change = _condition_writer(
                ("Ready",),
                "True",
                reason or "KubeletReady",
                message or "kubelet is posting ready status",
                stamp,
                heartbeat=True,
            )
        else:
            change = _condition_writer(
                ("Ready",),
                "False",
                reason or NOT_READY_REASON,
                message or NOT_READY_MESSAGE,
                stamp,
                heartbeat=True,
            )
        self._change_node(name, status=change)
        wanted = {"Unknown": UNREACHABLE_TAINT, "False": NOT_READY_TAINT}.get(status)

        def retaint(spec: dict[str, Any]) -> None:
            taints = [
                t
                for t in spec.get("taints", [])
                if t.get("key") not in (UNREACHABLE_TAINT, NOT_READY_TAINT) or t["key"] == wanted
            ]
            present = {(t.get("key"), t.get("effect")) for t in taints}
            if wanted is not None:
                for effect in ("NoSchedule", "NoExecute"):
                    if (wanted, effect) not in present:
                        taints.append({"key": wanted, "effect": effect, "timeAdded": stamp})
            spec["taints"] = taints

        return self._change_node(name, spec=retaint)

    def heartbeat_node(self, name: str, at: Moment | None = None) -> dict[str, Any]:
        """A kubelet status post where nothing changed: only lastHeartbeatTime moves."""
        stamp = format_node_time(self._clock() if at is None else at)
        kubelet_owned = {kind for kind, *_ in KUBELET_CONDITIONS}

        def change(node_status: dict[str, Any]) -> None:
            for condition in node_status.get("conditions", []):
                if condition.get("type") in kubelet_owned:
                    condition["lastHeartbeatTime"] = stamp

        return self._change_node(name, status=change)

    def cordon_node(
        self, name: str, cordoned: bool = True, *, at: Moment | None = None
    ) -> dict[str, Any]:
        """`kubectl cordon` (or uncordon): spec.unschedulable and the controller's taint."""
        stamp = format_node_time(self._clock() if at is None else at)

        def change(spec: dict[str, Any]) -> None:
            taints = [t for t in spec.get("taints", []) if t.get("key") != UNSCHEDULABLE_TAINT]
            if cordoned:
                taints.append(
                    {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule", "timeAdded": stamp}
                )
            spec["taints"] = taints
            spec["unschedulable"] = cordoned

        return self._change_node(name, spec=change)


def _condition_writer(
    types: tuple[str, ...], status: str, reason: str, message: str, stamp: str, heartbeat: bool
) -> Callable[[dict[str, Any]], None]:
    def change(node_status: dict[str, Any]) -> None:
        conditions = node_status.setdefault("conditions", [])
        for condition_type in types:
            current = next((c for c in conditions if c.get("type") == condition_type), None)
            if current is None:
                current = {"type": condition_type, "lastHeartbeatTime": stamp}
                conditions.append(current)
            if current.get("status") != status or not current.get("lastTransitionTime"):
                current["lastTransitionTime"] = stamp
            current["status"] = status
            if heartbeat:
                current["lastHeartbeatTime"] = stamp
            current["reason"] = reason
            current["message"] = message

    return change


def _copy(obj: StoredObject) -> dict[str, Any]:
    loaded: dict[str, Any] = orjson.loads(orjson.dumps(with_kind(NODES, obj, "v1")))
    return loaded
