"""Lease pages: the table, one lease with its holder history, and the watchers' status."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from dashboard.htmx import render_page, shared_partial
from leases.forms import LeaseFilterForm, read_filters
from leases.presenters.lease_detail import lease_detail
from leases.presenters.lease_table import lease_table
from leases.presenters.watchers import cluster_statuses, count_present_nodes, watch_fleet
from leases.queries import namespaces

# The Leases table's region: what its refreshes and its sort and page links ask for.
TABLE_REGION = "lease-table"


def lease_list(request: HttpRequest) -> HttpResponse:
    return shared_partial(
        request, TABLE_REGION, settings.LEASE_TABLE_CACHE_SECONDS, lambda: _lease_list(request)
    )


def _lease_list(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    filters, cursor = read_filters(request.GET)
    table = lease_table(filters, now, cursor=cursor)
    context: dict[str, Any] = {
        "filters": filters,
        "table": table,
        "flap_rule": ngettext(
            "%(changes)d or more holder change in %(window)s",
            "%(changes)d or more holder changes in %(window)s",
            table.flap_changes,
        )
        % {"changes": table.flap_changes, "window": table.flap_window},
    }
    if not (request.htmx and request.htmx.target == TABLE_REGION):
        # Only the full page has the filter bar: its widgets, errors and namespace suggestions.
        form = LeaseFilterForm(request.GET)
        form.is_valid()  # invalid parameters are shown as errors; the valid ones still apply
        context.update(form=form, namespaces=namespaces())
    return render_page(request, "leases/lease_list.html", context)


def lease_page(request: HttpRequest, cluster: str, namespace: str, name: str) -> HttpResponse:
    detail = lease_detail(cluster, namespace, name, timezone.now())
    if detail is None:
        raise Http404(_("No such lease"))
    return render_page(
        request,
        "leases/lease_detail.html",
        {"detail": detail, "lease": detail.lease},
    )


def cluster_list(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    clusters = cluster_statuses(now)
    count_present_nodes(clusters)
    return render_page(
        request,
        "leases/clusters.html",
        {
            "clusters": clusters,
            "fleet": watch_fleet(clusters, now),
            "stale_seconds": settings.WATCH_STALE_SECONDS,
        },
    )
