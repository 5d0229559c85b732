"""The node page: one Kubernetes Node of a watched cluster, with its heartbeat Lease."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.translation import gettext as _

from dashboard.htmx import render_page
from leases.presenters.node_detail import node_detail


def node_page(request: HttpRequest, cluster: str, name: str) -> HttpResponse:
    detail = node_detail(cluster, name, timezone.now())
    if detail is None:
        raise Http404(_("No such node"))
    return render_page(request, "leases/node_detail.html", {"detail": detail, "node": detail.node})
