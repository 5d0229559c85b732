"""The fake NKS's routes: the identity service's token endpoint and the API's paths, in the
shapes of the NKS API v2 guide; errors in Magnum's and Keystone's shapes."""

from __future__ import annotations

import http
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from fakes.nks.model import FakeApiError
from fakes.nks.state import FakeNksState

IDENTITY_PREFIX = "/identity"
TOKENS_PATH = f"{IDENTITY_PREFIX}/v2.0/tokens"


def json_bytes(payload: Any) -> bytes:
    return json.dumps(payload, ensure_ascii=False).encode("utf-8")


def magnum_error(status: int, detail: str) -> dict[str, Any]:
    return {
        "errors": [
            {
                "request_id": "",
                "code": "client" if status < 500 else "server",
                "status": status,
                "title": http.HTTPStatus(status).phrase,
                "detail": detail,
                "links": [],
            }
        ]
    }


def keystone_error(status: int, message: str) -> dict[str, Any]:
    return {"error": {"code": status, "title": http.HTTPStatus(status).phrase, "message": message}}


def answer(
    state: FakeNksState, method: str, path: str, raw_body: bytes, headers: Mapping[str, str]
) -> tuple[int, Any, dict[str, str]]:
    """Status, JSON payload and extra headers for one request, as NKS would answer it."""
    state.advance()
    try:
        if path == TOKENS_PATH:
            if method != "POST":
                raise FakeApiError(405, "Use POST to ask for a token.", keystone=True)
            return 200, state.issue_token(_parse_json(raw_body, keystone=True)), {}
        if not path.startswith("/v1/"):
            raise FakeApiError(404, "The resource could not be found.")
        if not state.token_is_valid(headers.get("X-Auth-Token")):
            message = "The request you have made requires authentication."
            return 401, keystone_error(401, message), {"WWW-Authenticate": "Keystone"}
        segments = [unquote(part) for part in path.split("/")[2:]]
        if segments and segments[-1] == "":
            segments.pop()
        return _route_api(state, method, segments, raw_body)
    except FakeApiError as exc:
        if exc.keystone:
            return exc.status, keystone_error(exc.status, exc.detail), {}
        return exc.status, magnum_error(exc.status, exc.detail), {}


def _route_api(
    state: FakeNksState, method: str, segments: list[str], raw_body: bytes
) -> tuple[int, Any, dict[str, str]]:

    def only(allowed: str) -> None:
        if method != allowed:
            raise FakeApiError(405, f"Method {method} is not allowed here; use {allowed}.")

    match segments:
        case ["supports"]:
            only("GET")
            return (
                200,
                {
                    "supported_k8s": dict(state.supported_k8s),
                    "supported_event_type": dict(state.supported_event_types),
                },
                {},
            )
        case ["clusters"]:
            only("GET")
            return 200, state.cluster_list_json(), {}
        case ["clusters", cluster_ref]:
            only("GET")
            with state.lock:
                cluster = state.find_cluster(cluster_ref)
                return 200, state.cluster_json(cluster, detail=True), {}
        case ["clusters", cluster_ref, "config"]:
            only("GET")
            with state.lock:
                return (
                    200,
                    {"config": state.kubeconfig_for(state.find_cluster(cluster_ref))},
                    {},
                )
        case ["clusters", cluster_ref, "actions", "resize"]:
            only("POST")
            cluster_uuid = state.resize(cluster_ref, _parse_json(raw_body, keystone=False))
            return 202, {"uuid": cluster_uuid}, {}
        case ["clusters", cluster_ref, "nodegroups"]:
            only("GET")
            with state.lock:
                cluster = state.find_cluster(cluster_ref)
                groups = [
                    state.nodegroup_json(cluster, group, detail=False)
                    for group in cluster.nodegroups
                ]
                return 200, {"nodegroups": groups}, {}
        case ["clusters", cluster_ref, "nodegroups", group_ref]:
            only("GET")
            with state.lock:
                cluster = state.find_cluster(cluster_ref)
                group = state.find_nodegroup(cluster, group_ref)
                return 200, state.nodegroup_json(cluster, group, detail=True), {}
        case ["clusters", cluster_uuid, "events"]:
            only("GET")
            with state.lock:
                cluster = state.find_cluster_by_uuid(cluster_uuid)
                events = sorted(cluster.events, key=lambda event: event.id)
                return 200, {"events": [state.event_json(event) for event in events]}, {}
        case ["clusters", cluster_uuid, "events", event_uuid]:
            only("GET")
            with state.lock:
                cluster = state.find_cluster_by_uuid(cluster_uuid)
                for event in cluster.events:
                    if event.uuid == event_uuid:
                        return 200, state.event_json(event), {}
            raise FakeApiError(404, f"Event {event_uuid} could not be found.")
        case _:
            raise FakeApiError(404, "The resource could not be found.")


def _parse_json(raw_body: bytes, *, keystone: bool) -> Any:
    try:
        return json.loads(raw_body or b"null")
    except ValueError:
        raise FakeApiError(400, "The request body is not valid JSON.", keystone=keystone) from None
