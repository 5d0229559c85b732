"""NKS pages: clusters, one cluster, one nodegroup (with the resize form), resize requests."""

from __future__ import annotations

import functools
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils import timezone
from django.utils.functional import SimpleLazyObject
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.utils.translation import gettext
from django.views.decorators.http import require_http_methods

from dashboard.htmx import render_page
from dashboard.services import can_change_clusters
from nks.forms import NODES_OFFERED, ResizeFilterForm, ResizeForm, ResizeTargetForm
from nks.models import NksNodegroup, ResizeRequest
from nks.node_picture import NodegroupNodePage, NodegroupNodes, nodegroup_node_page, nodegroup_nodes
from nks.presenters.cluster_detail import cluster_detail
from nks.presenters.clusters import clusters_page, poll_interval_text
from nks.presenters.nodegroup_detail import (
    ALL_NODES,
    ALL_NODES_PARAMETER,
    NODES_SHOWN,
    latest_resize_row,
    nodegroup_detail,
    progress_version,
)
from nks.presenters.resize_audit import resize_audit
from nks.presenters.resize_detail import resize_detail
from nks.presenters.resize_form import error_summary, nodes_described_by
from nks.presenters.resizes import ResizeRow
from nks.queries import get_cluster, get_nodegroup
from nks.refused_resizes import QUERY_PARAMETER as REFUSED_QUERY_PARAMETER
from nks.refused_resizes import keep_refused_resize, refused_resize_form
from nks.resizes import ResizeConflict, request_resize_from
from nks.services import LeaseSourceError, watch_cluster_leases

# A resize in flight is followed faster than the pages' PAGE_REFRESH_SECONDS (from the
# page_refresh context processor): the engineer who asked for it is watching it land.
PROGRESS_REFRESH_SECONDS = 2


def cluster_list(request: HttpRequest) -> HttpResponse:
    return render_page(
        request,
        "nks/cluster_list.html",
        {
            "page": clusters_page(timezone.now()),
            "poll_interval": poll_interval_text(),
        },
    )


def cluster_page(request: HttpRequest, uuid: str) -> HttpResponse:
    detail = cluster_detail(uuid, timezone.now())
    if detail is None:
        raise Http404("No such NKS cluster")
    return render_page(
        request,
        "nks/cluster_detail.html",
        {
            "detail": detail,
            "can_change": can_change_clusters(request.user),
        },
    )


# A form URL answers GET too: a reload, a bookmark or the address bar after a POST lands on
# the page the form lives on, never on the browser's "HTTP ERROR 405".
@require_http_methods(["GET", "HEAD", "POST"])
def watch_leases(request: HttpRequest, uuid: str) -> HttpResponse:
    if request.method != "POST":
        return redirect("nks:cluster", uuid=uuid)
    if not can_change_clusters(request.user):
        raise PermissionDenied("Adding a Lease source needs the operators group.")
    cluster = get_cluster(uuid)
    if cluster is None:
        raise Http404("No such NKS cluster")
    # The nodegroup page offers the same button: back there, where the engineer was resizing.
    back = url_has_allowed_host_and_scheme(
        request.POST.get("next", ""), allowed_hosts={request.get_host()}
    )
    try:
        source = watch_cluster_leases(cluster.pk)
    except LeaseSourceError as error:
        messages.error(request, str(error))
    else:
        if source.created:
            messages.success(
                request,
                gettext(
                    "%(cluster)s is now watched for Leases and Nodes as %(source)s; a watch "
                    "worker connects within seconds."
                )
                % {"cluster": cluster.name, "source": source.kube_cluster.name},
            )
        else:
            messages.info(
                request,
                gettext("%(cluster)s is already watched for Leases and Nodes as %(source)s.")
                % {"cluster": cluster.name, "source": source.kube_cluster},
            )
    if back and request.POST["next"].startswith("/"):
        return redirect(request.POST["next"])
    return redirect("nks:cluster", uuid=uuid)


def _nodegroup_or_404(uuid: str, name: str) -> NksNodegroup:
    nodegroup = get_nodegroup(uuid, name)
    if nodegroup is None:
        raise Http404("No such nodegroup")
    return nodegroup


def _render_nodegroup(
    request: HttpRequest,
    nodegroup: NksNodegroup,
    form: ResizeForm | None,
    *,
    nodes: NodegroupNodes | NodegroupNodePage | None,
    conflict: ResizeRequest | None = None,
) -> HttpResponse:
    now = timezone.now()

    @functools.cache
    def progress() -> ResizeRow | None:
        return latest_resize_row(nodegroup, now)

    page_url = reverse("nks:nodegroup", args=[nodegroup.cluster.uuid, nodegroup.name])
    # ?nodes=all: the Nodes table lists every member, and its refresh keeps doing so.
    every_node = request.GET.get(ALL_NODES_PARAMETER) == ALL_NODES
    context: dict[str, Any] = {
        # Lazy: the 2-second progress refresh renders only its region.
        "detail": SimpleLazyObject(
            lambda: nodegroup_detail(
                nodegroup, now, nodes, every_node=every_node, page_url=page_url
            )
        ),
        "progress": SimpleLazyObject(progress),
        "progress_version": SimpleLazyObject(lambda: progress_version(progress())),
        "nodegroup": nodegroup,
        "cluster": nodegroup.cluster,
        "form": form,
        "conflict": conflict,
        "error_summary": error_summary(form, conflict=conflict is not None),
        "nodes_described_by": nodes_described_by(form) if form is not None else "",
        # The refreshing regions and the watch button's way back use the page's URL without
        # its query: after a refused resize the page is shown at ?refused=<token>, and the
        # refreshes have no use for it.
        "page_url": page_url,
        "nodes_refresh_url": f"{page_url}?{urlencode({ALL_NODES_PARAMETER: ALL_NODES})}"
        if every_node
        else page_url,
        "can_change": can_change_clusters(request.user),
        "progress_seconds": PROGRESS_REFRESH_SECONDS,
    }
    return render_page(request, "nks/nodegroup_detail.html", context)


def nodegroup_page(request: HttpRequest, uuid: str, name: str) -> HttpResponse:
    nodegroup = _nodegroup_or_404(uuid, name)
    # The progress box refreshes every 2 s and shows no node: it reads none.
    wants_nodes = not request.htmx or request.htmx.target != "resize-progress"
    seen = request.GET.get("seen") if not wants_nodes else None
    if seen and seen == progress_version(latest_resize_row(nodegroup, timezone.now())):
        # Nothing changed: no content, which htmx leaves unswapped, so the live region
        # around the box is not re-read every 2 s.
        return HttpResponse(status=204)
    form = None
    conflict = None
    with_form = can_change_clusters(request.user) and not request.htmx
    if not wants_nodes:
        return _render_nodegroup(request, nodegroup, form, nodes=None)
    refused_token = request.GET.get(REFUSED_QUERY_PARAMETER) if with_form else None
    if not refused_token and request.GET.get(ALL_NODES_PARAMETER) != ALL_NODES:
        # The table's page, the counts and the unbound form's first removable nodes: a
        # 500-node nodegroup's page reads no NodeLine per member.
        # ?node_count=N (a link, or a reload) pre-selects the nodes a scale-in to N removes.
        target = ResizeTargetForm(request.GET).target() if with_form else None
        current = nodegroup.node_count
        removing = current - target if target and current and target < current else 0
        page = nodegroup_node_page(
            nodegroup,
            timezone.now(),
            NODES_SHOWN,
            offered=max(NODES_OFFERED, removing) if with_form else 0,
        )
        if with_form:
            form = ResizeForm(nodegroup=nodegroup, nodes=page, target=target)
        return _render_nodegroup(request, nodegroup, form, nodes=page)
    # Back from a refused resize the form is validated against every member, and ?nodes=all
    # shows every one.
    nodes = nodegroup_nodes(nodegroup, timezone.now())
    if with_form:
        # Back from a refused resize: the form as typed, with the errors it has now.
        refused = refused_resize_form(
            request.session, request.GET.get(REFUSED_QUERY_PARAMETER), nodegroup, nodes
        )
        if refused is not None:
            form, conflict = refused
        else:
            # ?node_count=N (a link, or a reload) pre-selects the nodes a scale-in to N removes.
            target = ResizeTargetForm(request.GET)
            form = ResizeForm(nodegroup=nodegroup, nodes=nodes, target=target.target())
    return _render_nodegroup(request, nodegroup, form, nodes=nodes, conflict=conflict)


@require_http_methods(["GET", "HEAD", "POST"])
def resize(request: HttpRequest, uuid: str, name: str) -> HttpResponse:
    """Ask for a resize; every answer is a redirect (post/redirect/get).

    A valid form goes to the new request's page. An invalid one, or one refused because a
    resize is in flight, goes back to the nodegroup page with what was typed kept in the
    session (``nks.refused_resizes``): the page shows the form bound, with an error summary
    at its top, at the nodegroup page's own URL, so a reload is a GET that shows the same
    errors and never asks to send the form again. A double-submitted valid form makes one
    resize; the second answer is the page naming the request in flight.
    """
    page = reverse("nks:nodegroup", kwargs={"uuid": uuid, "name": name})
    if request.method != "POST":
        return redirect(f"{page}#resize")
    if not can_change_clusters(request.user):
        raise PermissionDenied("Resizing nodegroups needs the operators group.")
    nodegroup = _nodegroup_or_404(uuid, name)
    nodes = nodegroup_nodes(nodegroup, timezone.now())
    form = ResizeForm(request.POST, nodegroup=nodegroup, nodes=nodes)
    conflict: ResizeRequest | None = None
    if form.is_valid():
        try:
            created = request_resize_from(form, user=request.user)
        except ResizeConflict as refused:
            conflict = refused.request
        else:
            messages.success(
                request,
                gettext(
                    "Resize #%(id)s of %(nodegroup)s (%(from)s → %(to)s nodes) is queued; this "
                    "page follows it."
                )
                % {
                    "id": created.pk,
                    "nodegroup": nodegroup.name,
                    "from": created.from_count,
                    "to": created.to_count,
                },
            )
            return redirect("nks:resize_detail", pk=created.pk)
    token = keep_refused_resize(request.session, nodegroup, request.POST, conflict=conflict)
    query = urlencode({REFUSED_QUERY_PARAMETER: token})
    # 303: the browser GETs the page, whatever method brought it here. No #resize: a URL
    # fragment makes the browser skip autofocus, and the error summary must take focus.
    return HttpResponseRedirect(f"{page}?{query}", status=303)


def resize_page(request: HttpRequest, pk: int) -> HttpResponse:
    resize_request = get_object_or_404(
        ResizeRequest.objects.select_related("cluster", "nodegroup", "event"), pk=pk
    )
    return render_page(
        request,
        "nks/resize_detail.html",
        {
            "detail": resize_detail(resize_request, timezone.now()),
            "progress_seconds": PROGRESS_REFRESH_SECONDS,
        },
    )


def resize_list(request: HttpRequest) -> HttpResponse:
    form = ResizeFilterForm(request.GET)
    form.is_valid()  # an unknown outcome is reported; the other filters still apply
    filters = form.filters()
    return render_page(
        request,
        "nks/resize_list.html",
        {
            "form": form,
            "filters": filters,
            "audit": resize_audit(filters, timezone.now()),
        },
    )
