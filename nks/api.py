"""JSON API for NKS under /api/v1/nks/: cluster health for scripts, and resizes for automation."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from dashboard.api import api_view, json_error, json_response
from dashboard.models import ApiToken
from dashboard.services import can_change_clusters
from nks.forms import ResizeForm
from nks.models import ResizeRequest
from nks.node_picture import nodegroup_nodes
from nks.presenters.api import api_clusters, api_resize_request
from nks.queries import get_nodegroup
from nks.resizes import ResizeConflict, request_resize_from

RESIZE_FIELDS = frozenset({"node_count", "nodes_to_remove", "reason"})


@api_view()
def cluster_list(request: HttpRequest) -> HttpResponse:
    """Every cluster of every account with its health and nodegroups.

    ``health`` is the dashboard's verdict (healthy, degraded, down, unknown): ``unknown``
    whenever NKS's health data is not FRESH or the dashboard's poll of the cluster is stale.
    ``stale`` says the row may be old (the last poll failed for it, or polls stopped).
    """
    return json_response({"results": api_clusters(timezone.now())})


@api_view()
def resize_request(request: HttpRequest, pk: int) -> HttpResponse:
    """One resize request and its state (see nks.models.ResizeRequest for the states)."""
    found = ResizeRequest.objects.select_related("cluster", "event").filter(pk=pk).first()
    if found is None:
        return json_error("no such resize request", 404)
    return json_response(api_resize_request(found))


def _resize_body(request: HttpRequest) -> tuple[dict[str, Any] | None, HttpResponse | None]:
    try:
        body = orjson.loads(request.body or b"null")
    except orjson.JSONDecodeError:
        return None, json_error("the body must be JSON", 400)
    if not isinstance(body, dict):
        return None, json_error(
            'the body must be a JSON object: {"node_count": 3, "nodes_to_remove": [...], '
            '"reason": "..."}',
            400,
        )
    fields: dict[str, list[str]] = {}
    unknown = sorted(set(body) - RESIZE_FIELDS)
    if unknown:
        fields["__all__"] = [f"Unknown fields: {', '.join(unknown)}."]
    count = body.get("node_count")
    if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
        fields["node_count"] = ["Must be a whole number (a JSON integer)."]
    remove = body.get("nodes_to_remove", [])
    if not isinstance(remove, list) or not all(isinstance(item, str) for item in remove):
        fields["nodes_to_remove"] = ["Must be a list of node names or instance UUIDs (strings)."]
    else:
        # A repeated uuid would count twice towards "choose exactly N" and remove one node.
        repeated = [node for node, times in Counter(remove).items() if times > 1]
        if repeated:
            fields["nodes_to_remove"] = [
                f"{', '.join(repeated)} {'is' if len(repeated) == 1 else 'are'} given more "
                "than once."
            ]
    if body.get("reason") is not None and not isinstance(body.get("reason"), str):
        fields["reason"] = ["Must be a string."]
    if fields:
        return None, json_error("invalid resize", 400, fields=fields)
    return body, None


@api_view(methods=("POST",), scope=ApiToken.Scope.WRITE, action="resizing")
def resize(request: HttpRequest, uuid: str, name: str) -> HttpResponse:
    """Ask for a resize: ``{"node_count": 3, "nodes_to_remove": [...], "reason": "..."}``.

    ``nodes_to_remove`` names nodes of the nodegroup by name or instance UUID, as the form
    offers them (Nodes of the watched cluster with the nodegroup's label and a parsable
    providerID); NKS is always sent the UUIDs.

    The same permission (operators), checks and audit as the form, without the typed
    confirmation; a bearer token also needs scope ``write``. Answers 202 with the request's
    id and URLs (follow ``api_url`` until ``in_flight`` is false), 400 with ``fields``
    errors, 403 (no permission, or a read token: ``required_scope``), 404, or 409 when a
    resize of the nodegroup is already in flight (its request is in ``request``).
    """
    if not can_change_clusters(request.user):
        return json_error("resizing nodegroups needs the operators group", 403)
    nodegroup = get_nodegroup(uuid, name)
    if nodegroup is None:
        return json_error("no such nodegroup", 404)
    body, problem = _resize_body(request)
    if problem is not None:
        return problem
    assert body is not None
    data = {
        "node_count": body.get("node_count"),
        "nodes_to_remove": body.get("nodes_to_remove") or [],
        "reason": body.get("reason") or "",
    }
    form = ResizeForm(
        data,
        nodegroup=nodegroup,
        nodes=nodegroup_nodes(nodegroup, timezone.now()),
        require_confirmation=False,
    )
    if not form.is_valid():
        return json_error("invalid resize", 400, fields=form.errors_json())
    try:
        created = request_resize_from(form, user=request.user, source=ResizeRequest.Source.API)
    except ResizeConflict as conflict:
        return json_error(conflict.message, 409, request=api_resize_request(conflict.request))
    body_out = api_resize_request(created)
    body_out["url"] = request.build_absolute_uri(body_out["url"])
    body_out["api_url"] = request.build_absolute_uri(body_out["api_url"])
    return json_response(body_out, status=202, headers={"Location": body_out["api_url"]})
