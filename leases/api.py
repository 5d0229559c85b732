"""JSON API for Leases under /api/v1/: for scripts, Grafana and on-call tooling."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from dashboard.api import api_view, json_error, json_response
from leases.api_presenters import api_lease_detail, api_lease_page
from leases.cursors import API_DEFAULT_SORT
from leases.forms import LeaseFilterForm


@api_view()
def lease_list(request: HttpRequest) -> HttpResponse:
    """Leases, 500 a page, ordered by cluster, namespace and name (or `sort`, as on the page).

    Filters: `cluster`, `namespace` (exact), `class` (node_heartbeat, control_plane,
    apiserver_identity, leader_election), `state` (held, expired, released; computed from
    the clock at request time), `q` (name or holder contains, case-insensitive),
    `flapping=true` (as the Leases page judges it: 3+ holder changes in 10 minutes unless an
    admin set the lease_flapping rule's threshold or window). Deleted leases are left out
    unless `deleted=true`, which includes them (each with `"deleted": true`).

    `next` is the URL of the following page, or null on the last page. Pages are cut by
    the last row's sort values (a keyset cursor, `after`), not by an offset: in the default
    order, whose values never change, following `next` walks every lease once even while
    leases are added or deleted. Unknown parameter values answer 400 with the offending
    fields.

    Each lease keeps `holder`, the raw holderIdentity, and says who really leads:
    `identity` (leader-k8s's node id / audit id, else the holder), `library` (leader_k8s,
    coordinated, plain), `token` (leader-k8s's fencing token, else ""), `group`
    (`{name, slot}` of a leader-k8s slot lease, else null), `foreign_writer` (a leader-k8s
    lease whose holder is no token) and `fencing_reused_at` (when an old token came back).
    """
    # Cluster order, not the page's problems first: its values never change, so a script
    # following `next` sees every lease once.
    form = LeaseFilterForm(request.GET, default_sort=API_DEFAULT_SORT)
    if not form.is_valid():
        return json_error("invalid filter", 400, fields=form.errors.get_json_data())
    filters = form.filters()
    results, cursor = api_lease_page(filters, timezone.now(), form.cursor())
    next_url = None
    if cursor is not None:
        next_url = request.build_absolute_uri(
            f"{request.path}?{filters.query_string(after=cursor)}"
        )
    return json_response({"results": results, "next": next_url})


@api_view()
def lease_detail(request: HttpRequest, cluster: str, namespace: str, name: str) -> HttpResponse:
    """One lease, also when deleted (`"deleted": true`), with `history` and `candidates`.

    `history` holds the holder changes the dashboard saw, oldest first: at most the newest
    1,000, and the `X-History-Truncated: true` header says when older ones were left out.
    `missed` counts changes that happened while nobody watched (leaseTransitions jumped);
    `fencing_reused` marks a change to a token that had held the lease before another one.

    `availability` (leader-election and control-plane leases; null for others) holds, per
    window (`1h`, `24h`, `7d`, ending now): `ratio`, the share of observed time with a valid
    holder (null when the watcher observed none of it), `observed_seconds`,
    `available_seconds`, `gaps` (leaderless stretches), `longest_gap_seconds` (time the
    watcher did not observe is never counted) and `median_takeover_seconds` (null: no
    takeover in the window).
    """
    found = api_lease_detail(cluster, namespace, name, timezone.now())
    if found is None:
        return json_error("no such lease", 404)
    body, truncated = found
    return json_response(body, headers={"X-History-Truncated": "true"} if truncated else None)
