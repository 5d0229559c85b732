"""Evaluate at the moment a lease's alert becomes due, not on the next periodic tick.

A leader lease's alert is due at ``expires_at + grace`` (see `alerts.lease_rules.lease_expired`),
a cluster's node-heartbeat alert when its ``threshold``-th node lease is expired past the
grace (`alerts.lease_rules.node_heartbeats_expired`): moments known in advance. After every
evaluation, `schedule_next_evaluation` looks up the earliest such moment still to come and
queues one evaluation for it
(a Celery task with an ``eta``). The design needs nothing from the ingest (leases never
imports alerts) and no new process:

* **Why after each evaluation is enough.** A renewal only moves a lease's due moment later. A
  lease whose leader stops renewing at ``r`` is due at ``r + duration + grace``; the periodic
  tick (ALERT_EVAL_SECONDS) runs at least once between ``r`` and then whenever
  ``duration + grace`` exceeds the tick, and that run schedules it. Shorter leases are
  scheduled while still renewing (due within the look-ahead); that run reschedules, and so
  on, a chain at most one run per ``duration + grace``. Leases due later than
  LOOKAHEAD_TICKS ticks ahead are left to a later tick, which will see them again.
* **Renewals cancel.** Only the newest schedule counts: its token is kept in
  ``caches["locks"]`` and a scheduled task whose token is no longer there does nothing. A
  renewal moves the due moment, so the next evaluation replaces the schedule. A schedule that
  fires anyway (nothing evaluated in between) runs an ordinary evaluation, which is
  idempotent: a renewed lease opens nothing and mail is planned from incident rows, so an
  early or extra run never opens early nor mails twice.
* **Grouping.** Mail is grouped per cluster (ALERT_GROUP_SECONDS): the first incident is
  mailed at once, later ones wait for the window. Leaders of one crashed master stop
  together but their dues differ by their renewal periods, so leases of one cluster due
  within COALESCE_SECONDS of the first are evaluated together at the last of them: one mail,
  as a tick that caught them together would have sent.
* **Safety net.** Beat's periodic evaluation is unchanged. A broker outage (queueing fails:
  logged, not raised), a lost task or a killed worker only costs the latency this module
  saves; the next tick evaluates as before.

What opens is unchanged: the rule decides, this module only picks when it is asked.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import caches
from django.utils import timezone

from alerts.due_leases import DueLeases
from alerts.lease_rules import LEADER_CLASSES, rows_by_id
from alerts.models import Incident, Rule
from alerts.rules import load_rule_configs
from dashboard.celery import ALERTS_QUEUE
from leases import freshness
from leases.models import KubeCluster, Lease, LeaseClass

logger = logging.getLogger(__name__)

SCHEDULE_KEY = "alerts-next-evaluation"
TASK_NAME = "alerts.tasks.evaluate_due"
# Dues further ahead than this many ticks wait for a later tick to schedule them.
LOOKAHEAD_TICKS = 2
# Leases of one cluster due within this long of each other are evaluated together, so they
# share one mail instead of the second waiting for the group window (ALERT_GROUP_SECONDS).
# It delays the first alert by as much at worst, within the 2-second goal.
COALESCE_SECONDS = 1.5
# Fire a moment after the due instant: the rule compares `expires_at + grace` with the
# data's as-of moment, which a live watcher moves about once a second; 100 ms more spares
# most dues a recheck.
FIRE_AFTER = timedelta(milliseconds=100)
# A scheduled evaluation that could not run this long after its moment is dropped: by then
# the periodic tick has done its work.
LATE_SECONDS = 5.0
# A due moment that has come while the cluster's data is not yet known that far (its as-of
# moment trails the clock by up to about a probe interval, leases.freshness) is asked again
# when the as-of moment should have passed it, at the same lag, and at least this later:
# the rule judges by the as-of moment, so it could not open yet.
RECHECK_AFTER = timedelta(milliseconds=100)


def _as_of_by_cluster(now: datetime) -> dict[int, tuple[datetime, datetime | None]]:
    """Each enabled cluster's lease data as-of moment and the start of its observed stretch,
    where that data is current."""
    return {
        cluster_id: (moment, since)
        for cluster_id, moment, since in KubeCluster.objects.filter(enabled=True).values_list(
            "id", "leases_as_of", "leases_observed_since"
        )
        if moment is not None and freshness.is_current(moment, now)
    }


def _due_or_recheck(
    due: datetime,
    duration: int,
    cluster_id: int,
    now: datetime,
    horizon: datetime,
    clusters: dict[int, tuple[datetime, datetime | None]],
) -> datetime | None:
    """When to evaluate for this due moment: while ahead, when the data will vouch for it
    (the due moment plus how far the cluster's as-of moment trails the clock now); a
    recheck while it has passed but the data does not vouch for it yet; else nothing
    (evaluated already, or the data is stale and source_stale stands in)."""
    known, since = clusters.get(cluster_id, (None, None))
    if since is not None:
        # An expiry in unobserved time is judged a lease duration after observation resumed
        # (alerts.lease_rules.vouched).
        due = max(due, since + timedelta(seconds=duration))
    if now < due <= horizon:
        return due + (max(timedelta(0), now - known) if known is not None else timedelta(0))
    if due <= now and known is not None and known < due:
        # The as-of moment trails the clock by `now - known`: it passes `due` that much
        # after `due` itself.
        return max(now, due + (now - known)) + RECHECK_AFTER
    return None


def _enabled_clusters() -> dict[int, str]:
    """Enabled clusters' names by id: the due leases are read by id alone and their
    clusters checked here (alerts.lease_rules.rows_by_id)."""
    return dict(KubeCluster.objects.filter(enabled=True).values_list("id", "name"))


def _leader_dues(now: datetime, horizon: datetime, due: DueLeases) -> list[tuple[datetime, int]]:
    """(due, cluster id) of each held leader lease whose alert becomes due after `now`."""
    config = load_rule_configs()[Rule.LEASE_EXPIRED]
    if not config.enabled:
        return []
    fixed_grace = config.grace_seconds
    if fixed_grace is None:
        fixed_grace = settings.ALERT_LEASE_GRACE_SECONDS
    rows = (
        Lease.objects.live()
        .filter(expires_at__isnull=False, expires_at__lte=horizon)
        .exclude(holder="")
        .values_list("cluster_id", "expires_at", "lease_duration_seconds", "lease_class")
    )
    dues: list[tuple[datetime, int]] = []
    as_of = _as_of_by_cluster(now)
    enabled = _enabled_clusters()
    leaders = [lease.id for lease in due.due(horizon) if lease.lease_class in LEADER_CLASSES]
    for cluster_id, expires_at, duration, lease_class in rows_by_id(rows, leaders):
        if cluster_id not in enabled or lease_class not in LEADER_CLASSES:
            continue
        grace = (duration or 0) if fixed_grace is None else fixed_grace
        moment = _due_or_recheck(
            expires_at + timedelta(seconds=grace), duration or 0, cluster_id, now, horizon, as_of
        )
        if moment is not None:
            dues.append((moment, cluster_id))
    return dues


def _node_dues(now: datetime, horizon: datetime, due: DueLeases) -> list[tuple[datetime, int]]:
    """(due, cluster id) of each cluster whose node-heartbeat incident opens after `now`.

    That incident is one per cluster and opens once ``threshold`` node leases are expired
    past the grace, so nothing before the ``threshold``-th earliest is due. The first
    evaluation opens the incident, and a cluster whose incident is open gets nothing more
    (the periodic tick adds its later nodes): a master that loses 500 nodes asks for one
    early evaluation, not 500.
    Renewing nodes expire a lease duration ahead (~40 s), beyond the horizon, so in a healthy
    cluster the query finds no row.
    """
    config = load_rule_configs()[Rule.NODE_HEARTBEATS_EXPIRED]
    if not config.enabled:
        return []
    grace = timedelta(
        seconds=settings.ALERT_NODE_GRACE_SECONDS
        if config.grace_seconds is None
        else config.grace_seconds
    )
    minimum = config.threshold or 1
    open_clusters = set(
        Incident.objects.filter(
            rule=Rule.NODE_HEARTBEATS_EXPIRED, resolved_at__isnull=True
        ).values_list("cluster", flat=True)
    )
    judged = {
        cluster_id for cluster_id, name in _enabled_clusters().items() if name not in open_clusters
    }
    rows = (
        Lease.objects.live()
        .filter(expires_at__isnull=False, expires_at__lte=horizon - grace)
        .exclude(holder="")
        .values_list("cluster_id", "expires_at", "lease_duration_seconds", "lease_class")
    )
    seen: dict[int, int] = {}
    dues: list[tuple[datetime, int]] = []
    as_of = _as_of_by_cluster(now)
    nodes = [
        lease.id
        for lease in due.due(horizon - grace)
        if lease.lease_class == LeaseClass.NODE_HEARTBEAT and lease.cluster_id in judged
    ]
    # By cluster, earliest expiry first: the threshold-th of each cluster is the one due.
    for cluster_id, expires_at, duration, lease_class in sorted(
        rows_by_id(rows, nodes), key=lambda row: (row[0], row[1])
    ):
        if cluster_id not in judged or lease_class != LeaseClass.NODE_HEARTBEAT:
            continue
        seen[cluster_id] = seen.get(cluster_id, 0) + 1
        # The threshold-th opens the incident; the ones after it may join it in the same
        # evaluation (next_lease_due coalesces a cluster's dues).
        if seen[cluster_id] < minimum:
            continue
        moment = _due_or_recheck(expires_at + grace, duration or 0, cluster_id, now, horizon, as_of)
        if moment is not None:
            dues.append((moment, cluster_id))
    return dues


def next_lease_due(now: datetime) -> datetime | None:
    """The moment to evaluate at next: the earliest after `now` at which a lease alert becomes
    due (a held leader lease's, or a cluster's node heartbeats'), or the last of its cluster's
    that follow it within COALESCE_SECONDS."""
    horizon = now + timedelta(seconds=LOOKAHEAD_TICKS * settings.ALERT_EVAL_SECONDS)
    # One read of the leases due by the horizon for both (alerts.due_leases).
    due = DueLeases(horizon)
    dues = _leader_dues(now, horizon, due) + _node_dues(now, horizon, due)
    if not dues:
        return None
    first, cluster_id = min(dues)
    # One mail per cluster and group window: leases of the first one's cluster due shortly
    # after it (leaders on one crashed master) are evaluated together with it.
    return max(
        due
        for due, other in dues
        if other == cluster_id and due <= first + timedelta(seconds=COALESCE_SECONDS)
    )


def schedule_next_evaluation(now: datetime | None = None) -> datetime | None:
    """Queue one evaluation for the next lease due (replacing any earlier schedule); returns
    the moment it will run at, or None when nothing is due soon or queueing failed."""
    from alerts.tasks import evaluate_due

    if evaluate_due.app.conf.task_always_eager:
        return None  # tasks run where they are sent: an eta means nothing there
    moment = now or timezone.now()
    due = next_lease_due(moment)
    if due is None:
        return None
    cache = caches["locks"]
    current = cache.get(SCHEDULE_KEY)
    if isinstance(current, dict) and current.get("due") == due.timestamp():
        return due  # already queued for this very moment
    token = uuid.uuid4().hex
    fire_at = due + FIRE_AFTER
    timeout = max(1, int((fire_at - moment).total_seconds() + LATE_SECONDS + 1))
    # Write the token before queueing: a fast worker must find it.
    cache.set(SCHEDULE_KEY, {"token": token, "due": due.timestamp()}, timeout=timeout)
    try:
        # One connection attempt and no publish retries: kombu would otherwise retry
        # forever, and during a broker outage the evaluation must not stall on the broker.
        with evaluate_due.app.pool.acquire(block=True, timeout=1) as connection:
            connection.ensure_connection(max_retries=1, interval_start=0, interval_step=0)
            evaluate_due.apply_async(
                (token,),
                eta=fire_at,
                expires=fire_at + timedelta(seconds=LATE_SECONDS),
                queue=ALERTS_QUEUE,  # never behind a slow poll
                connection=connection,
                retry=False,
            )
    except Exception:
        logger.warning("alerts: could not schedule the evaluation due at %s", due, exc_info=True)
        cache.delete(SCHEDULE_KEY)
        return None
    return due


def is_current(token: str) -> bool:
    """Whether `token` is the newest schedule (a later one supersedes it)."""
    current = caches["locks"].get(SCHEDULE_KEY)
    return isinstance(current, dict) and current.get("token") == token
