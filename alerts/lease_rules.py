"""Rules over Kubernetes Leases and their watchers (see `alerts.conditions` for the contract)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import cache
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.db.models import Q, QuerySet
from django.urls import reverse
from django.utils.translation import gettext_noop

from alerts.conditions import (
    MAX_ITEMS,
    Condition,
    Message,
    RuleContext,
    RuleOutcome,
    duration_fact,
    fact,
    holder_fact,
    item_list,
    time_fact,
)
from alerts.due_leases import DUE_CHUNK
from alerts.models import AlertRule, Rule
from dashboard.flapping import FlapPolicy
from dashboard.links import lease_url
from leases.flapping import change_counts
from leases.freshness import stale_after
from leases.models import KubeCluster, Lease, LeaseClass

# Lease classes whose expiry means a leader is gone. API server identity leases expire
# whenever an API server is replaced, which is routine.
LEADER_CLASSES = (LeaseClass.CONTROL_PLANE, LeaseClass.LEADER_ELECTION)

# Resolution notes several lease rules share.
CLUSTER_REMOVED = Message.gettext_noop("the cluster was removed from the dashboard")
CLUSTER_DISABLED = Message.gettext_noop(
    "the cluster was disabled: its leases are no longer watched"
)


def rows_by_id(rows: QuerySet[Lease, Any], ids: Sequence[int]) -> list[Any]:
    """`rows` narrowed to the leases `ids`, read by primary key a chunk at a time.

    Give `rows` no condition that an index of the lease table serves (class, cluster,
    namespace, group): the planner may then find the rows that way instead, a cheaper plan
    for it whenever the ids are many against those rows, and read every healthy lease of the
    class or cluster to filter them out. Check those in Python. By primary key alone, it
    reads the leases named and no other."""
    found: list[Any] = []
    for start in range(0, len(ids), DUE_CHUNK):
        found.extend(rows.filter(pk__in=ids[start : start + DUE_CHUNK]))
    return found


def kube_clusters() -> dict[int, KubeCluster]:
    return {cluster.pk: cluster for cluster in KubeCluster.objects.defer("kubeconfig")}


def stale_kube_cluster_names(now: datetime) -> set[str]:
    """Enabled clusters whose watcher is not writing: their lease data is not current."""
    return {cluster.name for cluster in kube_clusters().values() if cluster.is_stale(now)}


def vouched(cluster: KubeCluster, due: datetime, duration: int, now: datetime) -> bool:
    """The cluster's data vouches that a lease was still not renewed at its alert's `due`
    moment: the data is known past it (its as-of moment), and the holder has had one whole
    lease duration of observed time to renew (an expiry during a stall or an outage, when no
    holder could renew, is judged only a lease duration after observation resumed).

    No rule judges a moment the dashboard did not observe.
    """
    as_of, since = cluster.leases_as_of, cluster.leases_observed_since
    if as_of is None:
        return False
    if since is not None:
        due = max(due, since + timedelta(seconds=duration))
    return due <= min(now, as_of)


def _lease_parts(key: str) -> tuple[str, str]:
    """(namespace, name) from `<rule>:<cluster>/<namespace>/<name>`."""
    _, _, where = key.partition(":")
    _, _, lease = where.partition("/")
    namespace, _, name = lease.partition("/")
    return namespace, name


def holder_note(renewed: bool, lease: Lease) -> Message:
    """Who renewed or took over a lease, for a resolution note: leader-k8s's node id with its
    fencing token (a new token at every acquisition says nothing alone), else the
    holderIdentity."""
    if lease.token and lease.identity and lease.identity != lease.token:
        if renewed:
            return Message.gettext_noop(
                "renewed by %(holder)s (token %(token)s)", holder=lease.identity, token=lease.token
            )
        return Message.gettext_noop(
            "taken over by %(holder)s (token %(token)s)", holder=lease.identity, token=lease.token
        )
    holder = lease.identity or lease.holder
    if renewed:
        return Message.gettext_noop("renewed by %(holder)s", holder=holder)
    return Message.gettext_noop("taken over by %(holder)s", holder=holder)


# --- lease_expired ---------------------------------------------------------------------------


def lease_expired(ctx: RuleContext) -> RuleOutcome:
    """A leader-election or control-plane lease with a holder expired longer than its grace.

    Grace: the rule's ``grace_seconds``, or by default one more ``leaseDurationSeconds`` of
    the lease (other candidates could have taken it over by then, and none did). Resolves
    when the lease is renewed (by anyone), released, or deleted.
    """
    now, outcome = ctx.now, RuleOutcome()
    fixed_grace = ctx.config.grace_seconds
    if fixed_grace is None:
        fixed_grace = settings.ALERT_LEASE_GRACE_SECONDS
    clusters = kube_clusters()
    prefix = reverse("leases:index")
    query = (
        Lease.objects.live()
        .filter(expires_at__lte=now)
        .exclude(holder="")
        .values(
            "cluster_id",
            "namespace",
            "name",
            "holder",
            "identity",
            "token",
            "renew_time",
            "expires_at",
            "lease_duration_seconds",
            "lease_class",
        )
    )
    # The due leaders alone: the evaluation's due leases say which (alerts.due_leases).
    leaders = [due.id for due in ctx.due_leases().due(now) if due.lease_class in LEADER_CLASSES]
    for row in rows_by_id(query, leaders):
        owner = clusters.get(row["cluster_id"])
        if owner is None or not owner.enabled or row["lease_class"] not in LEADER_CLASSES:
            continue
        cluster = owner.name
        if cluster in ctx.stale_kube_clusters:
            continue
        duration = row["lease_duration_seconds"] or 0
        grace = timedelta(seconds=duration if fixed_grace is None else fixed_grace)
        expires_at: datetime = row["expires_at"]
        where = f"{row['namespace']}/{row['name']}"
        key = f"{Rule.LEASE_EXPIRED}:{cluster}/{where}"
        if not vouched(owner, expires_at + grace, duration, now):
            if key in ctx.unresolved:
                outcome.freeze(key)  # not known yet either way: neither opened nor resolved
            continue
        outcome.add(
            Condition(
                key=key,
                title=Message.gettext_noop("%(lease)s lease expired", lease=where),
                cluster=cluster,
                since=expires_at,
                hold=grace,
                link=lease_url(prefix, cluster, row["namespace"], row["name"]),
                details={
                    "facts": [
                        fact(gettext_noop("Lease"), where),
                        # The leases part's catalog translates the class's label.
                        fact(
                            gettext_noop("Class"),
                            Message(str(LeaseClass(row["lease_class"]).label)),
                        ),
                        holder_fact(
                            gettext_noop("Holder (last renewed by)"),
                            row["identity"] or row["holder"],
                            row["token"],
                        ),
                        time_fact(gettext_noop("Last renewed"), row["renew_time"]),
                        fact(
                            gettext_noop("Lease duration"),
                            Message.gettext_noop("%(seconds)s s", seconds=duration),
                        ),
                        time_fact(gettext_noop("Expired at"), expires_at),
                        duration_fact(gettext_noop("Grace before alerting"), grace),
                    ],
                    "holder": row["holder"],
                },
            )
        )
    ctx.freeze_clusters(outcome, ctx.stale_kube_clusters)
    by_name = {cluster.name: cluster for cluster in clusters.values()}
    for incident in ctx.ending(outcome):
        cluster = by_name.get(incident.cluster)
        namespace, name = _lease_parts(incident.key)
        lease = (
            Lease.objects.filter(cluster=cluster, namespace=namespace, name=name).first()
            if cluster is not None
            else None
        )
        note: Message
        if cluster is None:
            note = CLUSTER_REMOVED
        elif not cluster.enabled:
            note = CLUSTER_DISABLED
        elif lease is None or lease.deleted_at is not None:
            note = Message.gettext_noop("the lease was deleted")
        elif not lease.holder:
            note = Message.gettext_noop("the lease was released (no holder)")
        else:
            note = holder_note(lease.holder == incident.details.get("holder"), lease)
        outcome.notes[incident.key] = note
    return outcome


# --- lease_flapping --------------------------------------------------------------------------


def _lease_flapping_values() -> QuerySet[AlertRule, tuple[int | None, int | None]]:
    return AlertRule.objects.filter(rule=Rule.LEASE_FLAPPING).values_list(
        "threshold", "window_seconds"
    )


def lease_flapping_policy() -> FlapPolicy:
    """The flapping policy in force: the lease_flapping rule's admin values, else the settings.

    Registered with `dashboard.flapping` so the Leases pages judge flapping as this rule does.
    Read per call (one indexed row) so an admin's change shows on the next request.
    """
    row = _lease_flapping_values().first()
    if row is None:
        return FlapPolicy.configured()
    return FlapPolicy.configured(*row)


@cache
def lease_flapping_policy_query() -> tuple[str, tuple[object, ...]]:
    """`lease_flapping_policy`'s read as SQL, compiled once: the Leases table folds it into
    its clusters' statement, so the admin's values are read on every refresh at no round trip
    of their own (never kept between requests, so page and rule always agree)."""
    sql, params = _lease_flapping_values()[:1].query.sql_with_params()
    return sql, tuple(params)


_FLAP_FIELDS = ("id", "cluster_id", "namespace", "name", "holder", "identity", "token")


def _flapping_candidates(
    ctx: RuleContext,
    changes: dict[int, dict[str, Any]],
    policy: FlapPolicy,
    clusters: dict[int, KubeCluster],
) -> list[dict[str, Any]]:
    """The leases `lease_flapping` judges: those with `policy.changes` or more holder changes
    in the window, and those of its open incidents that still had a change in it (the
    hysteresis). A lease that changed hands once or twice, a routine handover, is not read:
    what an evaluation reads does not grow with healthy elections."""
    live = Lease.objects.live().filter(cluster__enabled=True)
    flapping = [lease_id for lease_id, row in changes.items() if policy.is_flapping(row["changes"])]
    found = list(live.filter(pk__in=flapping).values(*_FLAP_FIELDS))
    names = {cluster.name: pk for pk, cluster in clusters.items()}
    seen = {(lease["cluster_id"], lease["namespace"], lease["name"]) for lease in found}
    # The open incidents not among them, by natural key (the unique index): one OR term per
    # cluster and namespace, however many incidents.
    wanted: dict[tuple[int, str], list[str]] = defaultdict(list)
    for key, incident in ctx.unresolved.items():
        cluster_id = names.get(incident.cluster)
        namespace, name = _lease_parts(key)
        if cluster_id is not None and (cluster_id, namespace, name) not in seen:
            wanted[(cluster_id, namespace)].append(name)
    if wanted:
        where = Q(pk__isnull=True)  # never true: the OR's identity
        for (cluster_id, namespace), lease_names in wanted.items():
            where |= Q(cluster_id=cluster_id, namespace=namespace, name__in=lease_names)
        found += [
            lease for lease in live.filter(where).values(*_FLAP_FIELDS) if lease["id"] in changes
        ]
    return found


def lease_flapping(ctx: RuleContext) -> RuleOutcome:
    """``threshold`` or more holder changes within ``window_seconds``: one incident per lease.

    The Leases page's definition of flapping: the same policy (`lease_flapping_policy`, what
    the page reads too) and the same query (`leases.flapping.change_counts`). With
    hysteresis: an open incident stays open while any change happened within the window and
    resolves only after a whole window without one, so it neither re-opens on every change
    nor flickers when the count dips under the threshold between changes.
    """
    now, outcome = ctx.now, RuleOutcome()
    # ctx.config holds the rule's admin row, as `lease_flapping_policy` reads it.
    policy = FlapPolicy.configured(ctx.config.threshold, ctx.config.window_seconds)
    threshold, window = policy.changes, policy.window
    clusters = kube_clusters()
    changes = {
        row["lease_id"]: row
        # The window's transitions alone (their time index), then the leases they name by
        # primary key: joined in one statement, the planner may scan every lease to hash it.
        for row in change_counts(now, policy)
    }
    prefix = reverse("leases:index")
    for lease in _flapping_candidates(ctx, changes, policy, clusters):
        cluster = clusters[lease["cluster_id"]].name
        if cluster in ctx.stale_kube_clusters:
            continue
        where = f"{lease['namespace']}/{lease['name']}"
        key = f"{Rule.LEASE_FLAPPING}:{cluster}/{where}"
        row = changes[lease["id"]]
        if not policy.is_flapping(row["changes"]) and key not in ctx.unresolved:
            continue
        outcome.add(
            Condition(
                key=key,
                title=Message.gettext_noop("%(lease)s lease is flapping", lease=where),
                cluster=cluster,
                since=row["first"],
                link=lease_url(prefix, cluster, lease["namespace"], lease["name"]),
                details={
                    "facts": [
                        fact(gettext_noop("Lease"), where),
                        fact(
                            gettext_noop("Holder changes"),
                            Message.gettext_noop(
                                "%(changes)s in the last %(window)s",
                                changes=row["changes"],
                                window=window,
                            ),
                        ),
                        holder_fact(
                            gettext_noop("Current holder"),
                            lease["identity"] or lease["holder"],
                            lease["token"],
                        )
                        if lease["identity"] or lease["holder"] or lease["token"]
                        else fact(
                            gettext_noop("Current holder"),
                            Message.gettext_noop("nobody (released)"),
                        ),
                        time_fact(gettext_noop("Last change"), row["last"]),
                        fact(
                            gettext_noop("Rule"),
                            Message.gettext_noop(
                                "opens at %(threshold)s changes within %(window)s; resolves "
                                "after %(window)s without a change",
                                threshold=threshold,
                                window=window,
                            ),
                        ),
                    ],
                },
            )
        )
    ctx.freeze_clusters(outcome, ctx.stale_kube_clusters)
    for incident in ctx.ending(outcome):
        outcome.notes[incident.key] = Message.gettext_noop(
            "no holder change for %(window)s", window=window
        )
    return outcome


# --- node_heartbeats_expired -----------------------------------------------------------------


def node_heartbeats_expired(ctx: RuleContext) -> RuleOutcome:
    """Node leases expired (longer than the grace): one incident per cluster, not per node.

    The incident lists the nodes and is updated as nodes stop and resume heart-beating, so a
    storm of 500 expiring node leases is one incident and one e-mail. ``threshold`` is the
    least number of nodes that opens it (default 1).
    """
    now, outcome = ctx.now, RuleOutcome()
    grace = timedelta(
        seconds=settings.ALERT_NODE_GRACE_SECONDS
        if ctx.config.grace_seconds is None
        else ctx.config.grace_seconds
    )
    minimum = ctx.config.threshold or 1
    # The evaluation's due leases hold every column judged here, and the clusters read just
    # before them: the node leases are not read again (alerts.due_leases).
    due = ctx.due_leases().at(now - grace)
    clusters = due.clusters()
    expired: dict[int, list[tuple[str, datetime]]] = defaultdict(list)
    durations: dict[tuple[int, str], int] = {}
    for lease in sorted(due.due(now - grace), key=lambda lease: (lease.cluster_id, lease.name)):
        owner = clusters.get(lease.cluster_id)
        if (
            owner is None
            or not owner.enabled
            or lease.lease_class != LeaseClass.NODE_HEARTBEAT
            or not lease.holder
            or lease.expires_at is None
            or lease.expires_at > now - grace
        ):
            continue
        expired[lease.cluster_id].append((lease.name, lease.expires_at))
        durations[(lease.cluster_id, lease.name)] = lease.lease_duration_seconds or 0
    prefix = reverse("leases:index")
    for cluster_id, all_nodes in expired.items():
        owner = clusters[cluster_id]
        cluster = owner.name
        if cluster in ctx.stale_kube_clusters or owner.leases_as_of is None:
            continue
        # Only expiries the data vouches for: past its as-of moment, a renewal may be late.
        nodes = [
            (name, expires_at)
            for name, expires_at in all_nodes
            if vouched(owner, expires_at + grace, durations[(cluster_id, name)], now)
        ]
        if len(nodes) < minimum:
            key = f"{Rule.NODE_HEARTBEATS_EXPIRED}:{cluster}"
            if key in ctx.unresolved and len(all_nodes) >= minimum:
                outcome.freeze(key)  # the others' renewals may be on their way: no verdict
            continue
        first = min(expires_at for _, expires_at in nodes)
        count = len(nodes)
        query = urlencode(
            {"cluster": cluster, "state": "expired", "class": LeaseClass.NODE_HEARTBEAT.value}
        )
        outcome.add(
            Condition(
                key=f"{Rule.NODE_HEARTBEATS_EXPIRED}:{cluster}",
                title=Message.ngettext(
                    "%(count)s node stopped heart-beating",
                    "%(count)s nodes stopped heart-beating",
                    count,
                    count=count,
                ),
                cluster=cluster,
                since=first,
                hold=grace,
                link=f"{prefix}?{query}",
                details={
                    "facts": [
                        fact(gettext_noop("Nodes not heart-beating"), count),
                        time_fact(gettext_noop("First node lease expired at"), first),
                        duration_fact(gettext_noop("Grace past expiry"), grace),
                    ],
                    **item_list(
                        gettext_noop("Nodes whose lease in kube-node-lease expired"),
                        [name for name, _ in nodes[:MAX_ITEMS]],
                    ),
                    "items_total": count,
                },
            )
        )
    ctx.freeze_clusters(outcome, ctx.stale_kube_clusters)
    names = {cluster.name for cluster in clusters.values()}
    for incident in ctx.ending(outcome):
        outcome.notes[incident.key] = (
            Message.gettext_noop("every node is heart-beating again")
            if incident.cluster in names
            else CLUSTER_REMOVED
        )
    return outcome


# --- source_stale: Lease watchers ------------------------------------------------------------

WATCH_PREFIX = f"{Rule.SOURCE_STALE}:watch:"


def watchers_stale(ctx: RuleContext, outcome: RuleOutcome, threshold: timedelta) -> None:
    """An enabled cluster whose watcher has written nothing (or is not connected) too long."""
    now = ctx.now
    link = reverse("leases:clusters")
    names = set()
    for cluster in kube_clusters().values():
        names.add(cluster.name)
        if not cluster.enabled or not cluster.is_stale(now):
            continue
        since: datetime | None
        state: Message
        if cluster.leases_as_of is None:
            since = cluster.created_at
            state = Message.gettext_noop("its watcher has never written any data")
        elif now - cluster.leases_as_of > stale_after():
            # The last moment the data is known to match the API server: a frozen server
            # keeps its streams open, so an open watch says nothing.
            since = cluster.leases_as_of
            state = Message.gettext_noop(
                "the API server has not confirmed the data since (not answering, or the "
                "watch stream stuck)"
            )
        else:
            # Not connected while its flush loop still runs: the stream is down and being
            # retried. When that started is not recorded, so the first evaluation counts.
            since = None
            state = Message.gettext_noop("its watcher is not connected to the API server")
        outcome.add(
            Condition(
                key=f"{WATCH_PREFIX}{cluster.name}",
                title=Message.gettext_noop("lease watcher is not receiving data"),
                cluster=cluster.name,
                since=since,
                hold=threshold,
                link=link,
                details={
                    "facts": [
                        fact(
                            gettext_noop("Source"),
                            Message.gettext_noop(
                                "Lease watcher of cluster %(cluster)s", cluster=cluster.name
                            ),
                        ),
                        fact(gettext_noop("State"), state),
                        fact(
                            gettext_noop("Connected"),
                            Message.gettext_noop("yes")
                            if cluster.connected
                            else Message.gettext_noop("no"),
                        ),
                        time_fact(gettext_noop("Data known as of"), cluster.leases_as_of),
                        time_fact(gettext_noop("Last watch event"), cluster.last_event_at),
                        fact(
                            gettext_noop("Last error"),
                            cluster.last_error or Message.gettext_noop("none recorded"),
                        ),
                        fact(
                            gettext_noop("Meanwhile"),
                            Message.gettext_noop(
                                "lease alerts of this cluster are neither opened nor resolved"
                            ),
                        ),
                    ],
                },
            )
        )
    for incident in ctx.ending(outcome):
        if not incident.key.startswith(WATCH_PREFIX):
            continue
        if incident.cluster not in names:
            note = CLUSTER_REMOVED
        elif not KubeCluster.objects.filter(name=incident.cluster, enabled=True).exists():
            note = Message.gettext_noop("the cluster was disabled: it is no longer watched")
        else:
            note = Message.gettext_noop("the watcher is writing current data again")
        outcome.notes[incident.key] = note
