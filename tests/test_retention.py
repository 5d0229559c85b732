"""History retention (dashboard/retention.py): a month of a flapping fleet keeps flat tables,
availability and the pages read the pruned data exactly as before, and the deletes are
batched, bounded in time, idempotent and safe to run twice at once.

The month is written through the real writers: the Lease and Node ingestors, the watch's
coverage rows, the NKS snapshot store; incidents, their timeline and notifications with the
model code the evaluator uses. Each simulated day ends with the beat task's own function.
"""

from __future__ import annotations

import re
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.db import connection, connections
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from alerts.models import (
    DeliveryState,
    Incident,
    IncidentEvent,
    IncidentState,
    Notification,
    NotificationKind,
    Rule,
    Severity,
)
from dashboard import retention
from dashboard.retention import PLANS, prune, prune_history
from dashboard.tasks import prune_history as prune_history_task
from leases.availability import WINDOWS, Availability, lease_availability
from leases.ingest import LeaseIngestor
from leases.models import (
    KubeCluster,
    Lease,
    LeaseHolderSpan,
    LeaseTransition,
    Node,
    NodeReadyChange,
    WatchCoverage,
)
from leases.node_ingest import NodeIngestor
from leases.watch_coverage import Coverage
from nks import client as nks_client
from nks.models import EventState, HealthSample, NksCluster, NksEvent
from nks.presenters.cluster_detail import EVENTS_SHOWN
from nks.snapshot_store import upsert_events
from tests.alerts.factories import make_account, make_nks_cluster, make_nodegroup, make_resize
from tests.conftest import run_django
from tests.leases.factories import known_until

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 10, 1, 0, 0, tzinfo=UTC)
DAYS = 30
RETENTION_DAYS = 8  # the minimum the settings accept: the hardest case for availability
TICK = timedelta(minutes=30)
FLAPPING = ("flappy-a", "flappy-b")
NIGHTLY = "nightly"  # released 23:00-24:00 every day: one leaderless hour a day
STEADY = "steady"  # one holder all month: its only change and span must survive
ELECTIONS = (*FLAPPING, NIGHTLY, STEADY)

HISTORY_TABLES = {
    "transitions": LeaseTransition,
    "spans": LeaseHolderSpan,
    "coverage": WatchCoverage,
    "ready_changes": NodeReadyChange,
    "nks_events": NksEvent,
    "health_samples": HealthSample,
    "incidents": Incident,
    "incident_events": IncidentEvent,
    "notifications": Notification,
}


@pytest.fixture
def retention_settings(settings: Any) -> Any:
    settings.HISTORY_RETENTION_DAYS = RETENTION_DAYS
    settings.INCIDENT_RETENTION_DAYS = RETENTION_DAYS
    settings.NKS_HEALTH_HISTORY_DAYS = 7
    settings.HISTORY_PRUNE_BATCH = 200
    settings.HISTORY_PRUNE_BUDGET_SECONDS = 60
    # The simulation proves the watch every half hour, a live watcher every second: each
    # proof must continue the coverage row, as the real ones do.
    settings.WATCH_STALE_SECONDS = 3600
    return settings


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def counts() -> dict[str, int]:
    return {name: model.objects.count() for name, model in HISTORY_TABLES.items()}


def figures(leases: list[Lease], now: datetime) -> dict[str, dict[str, Availability]]:
    return {lease.name: lease_availability(lease, now) for lease in leases}


@dataclass
class Fleet:
    """One watched cluster whose elections flap every half hour, a node whose Ready flips
    every two hours, an NKS cluster polled with its events, and a day's incidents."""

    cluster: KubeCluster
    nks_cluster: NksCluster
    leases: LeaseIngestor
    nodes: NodeIngestor
    coverage: Coverage
    holders: dict[str, str] = field(default_factory=dict)
    transitions: dict[str, int] = field(default_factory=dict)
    versions: int = 0
    ready: bool = True
    since: dict[str, datetime] = field(default_factory=dict)
    acquired: dict[str, datetime] = field(default_factory=dict)
    events: int = 0

    @classmethod
    def start(cls) -> Fleet:
        cluster = KubeCluster.objects.create(name="prod", kubeconfig="kubeconfig", enabled=True)
        known_until(cluster, timezone.now())
        fleet = cls(
            cluster=cluster,
            nks_cluster=make_nks_cluster(make_account(), "prod-nks", uuid=str(uuid.uuid4())),
            leases=LeaseIngestor(cluster.pk),
            nodes=NodeIngestor(cluster.pk),
            coverage=Coverage(cluster.pk),
        )
        fleet.coverage.connected()
        return fleet

    def lease(self, name: str, holder: str, now: datetime, acquired: datetime) -> dict[str, Any]:
        self.versions += 1
        spec: dict[str, Any] = {
            "holderIdentity": holder,
            "leaseDurationSeconds": 3600,
            "leaseTransitions": self.transitions.get(name, 0),
            "renewTime": stamp(now),
        }
        if holder:
            spec["acquireTime"] = stamp(acquired)
        return {
            "metadata": {
                "namespace": "apps",
                "name": name,
                "uid": f"uid-{name}",
                "resourceVersion": str(self.versions),
                "creationTimestamp": stamp(T0),
            },
            "spec": spec,
        }

    def hold(self, name: str, holder: str, now: datetime) -> None:
        """A renewal, or a change of holder when `holder` differs."""
        if self.holders.get(name, holder) != holder:
            self.transitions[name] = self.transitions.get(name, 0) + 1
        if name not in self.holders or self.holders[name] != holder:
            self.holders[name] = holder
            self.acquired[name] = now
        self.leases.observe(self.lease(name, holder, now, self.acquired[name]))

    def node(self, name: str, ready: bool, now: datetime) -> dict[str, Any]:
        """A kubelet's status post: its Ready condition, changed at `since[name]`."""
        self.versions += 1
        return {
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "uid": f"uid-{name}",
                "resourceVersion": str(self.versions),
                "creationTimestamp": stamp(T0),
                "labels": {"magnum.openstack.org/nodegroup": "pool-a"},
            },
            "spec": {"providerID": f"openstack:///{name}-uuid"},
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if ready else "False",
                        "lastHeartbeatTime": stamp(now),
                        "lastTransitionTime": stamp(self.since.get(name, T0)),
                        "reason": "KubeletReady" if ready else "KubeletNotReady",
                        "message": "",
                    }
                ]
            },
        }

    def tick(self, now: datetime) -> None:
        """Half an hour of the fleet: the elections, the nodes, the watch's proof."""
        slot = int((now - T0) / TICK)
        for name in FLAPPING:
            self.hold(name, f"{name}-pod-{slot % 2}", now)
        if now.hour == 23 and now.minute == 0:
            self.hold(NIGHTLY, "", now)
        elif not (now.hour == 23 and now.minute == 30):
            day = (now - T0).days
            self.hold(NIGHTLY, f"{NIGHTLY}-pod-{day % 2}", now)
        self.hold(STEADY, f"{STEADY}-pod-0", now)
        self.leases.flush()
        if now.minute == 0 and now.hour % 2 == 0:
            self.ready = not self.ready
            self.since["worker-0"] = now
        self.nodes.observe(self.node("worker-0", self.ready, now))
        self.nodes.observe(self.node("worker-1", True, now))
        self.nodes.flush()
        known_until(self.cluster, now)
        self.coverage.seen(now)

    def restart_watcher(self, clock: time_machine.Coordinates, now: datetime) -> None:
        """A deploy: the watch stops, and a new watcher connects a few seconds later."""
        self.coverage.stopped()
        clock.move_to(now + timedelta(seconds=5))
        self.coverage = Coverage(self.cluster.pk)
        self.coverage.connected()

    def nks_day(self, now: datetime) -> None:
        """A day of polls: 24 health samples and four NKS operations."""
        for hour in range(24):
            HealthSample.objects.create(
                cluster=self.nks_cluster,
                taken_at=now + timedelta(hours=hour),
                health="healthy",
                freshness="fresh",
            )
        listed = []
        for number in range(4):
            self.events += 1
            created = now + timedelta(hours=6 * number)
            listed.append(
                (
                    self.nks_cluster.pk,
                    nks_client.ClusterEvent(
                        id=self.events,
                        uuid=f"event-{self.events}",
                        cluster_uuid=self.nks_cluster.uuid,
                        cluster_name=self.nks_cluster.name,
                        resource_uuid=None,
                        resource_name="pool-a",
                        resource_type="nodegroup",
                        type="NODEGROUP_UPDATE",
                        raw_state="SUCCESS",
                        state=EventState.SUCCESS,
                        contents=None,
                        details=None,
                        created_at=created,
                        updated_at=created + timedelta(minutes=3),
                    ),
                )
            )
        upsert_events(listed, {}, now)


def incident(key: str, opened: datetime, resolved: datetime | None) -> Incident:
    row = Incident.objects.create(
        rule=Rule.LEASE_FLAPPING,
        key=f"{Rule.LEASE_FLAPPING}:{key}",
        state=IncidentState.RESOLVED if resolved else IncidentState.FIRING,
        severity=Severity.WARNING,
        cluster="prod",
        title=f"{key}: flapping",
        since=opened,
        opened_at=opened,
        last_seen_at=resolved or opened,
        resolved_at=resolved,
        resolution="holder changes stopped" if resolved else "",
    )
    IncidentEvent.objects.create(incident=row, at=opened, kind=IncidentEvent.Kind.OPENED)
    IncidentEvent.objects.create(incident=row, at=opened, kind=IncidentEvent.Kind.MAIL)
    if resolved:
        IncidentEvent.objects.create(incident=row, at=resolved, kind=IncidentEvent.Kind.RESOLVED)
    return row


def notify(kind: str, at: datetime, *incidents: Incident, state: str = DeliveryState.SENT) -> None:
    notification = Notification.objects.create(
        kind=kind,
        group="prod",
        recipients=["oncall@example.org"],
        subject="[prod] flapping",
        body_text="...",
        body_html="<p>...</p>",
        state=state,
        created_at=at,
        next_attempt_at=at,
        sent_at=at if state == DeliveryState.SENT else None,
    )
    notification.incidents.add(*incidents)


def incidents_of_day(day: int, now: datetime) -> None:
    """One incident opened and resolved each day, announced and resolved by mail."""
    opened, resolved = now + timedelta(hours=2), now + timedelta(hours=3)
    row = incident(f"prod/apps/flappy-{day}", opened, resolved)
    notify(NotificationKind.OPENED, opened, row)
    notify(NotificationKind.RESOLVED, resolved, row)


def simulate_month() -> dict[str, Any]:
    """The whole month; what each day left behind is recorded for the checks."""
    record: dict[str, Any] = {"counts": [], "pruned": [], "exact": []}
    with time_machine.travel(T0, tick=False) as clock:
        fleet = Fleet.start()
        # Kept all month: open since the first day, announced in one mail with the first
        # day's resolved incident (so that mail stays while its incidents go).
        still_open = incident("prod/apps/always", T0 + timedelta(hours=1), None)
        first = incident("prod/apps/first", T0 + timedelta(hours=1), T0 + timedelta(hours=4))
        notify(NotificationKind.OPENED, T0 + timedelta(hours=1), still_open, first)
        # Resolved on the first day, but its resolve mail is still waiting to be sent.
        waiting = incident("prod/apps/waiting", T0 + timedelta(hours=1), T0 + timedelta(hours=5))
        notify(NotificationKind.RESOLVED, T0 + timedelta(hours=5), waiting, state="pending")
        record.update(still_open=still_open.pk, first=first.pk, waiting=waiting.pk)
        for day in range(DAYS):
            start = T0 + timedelta(days=day)
            fleet.nks_day(start)
            incidents_of_day(day, start)
            for step in range(48):
                now = start + step * TICK
                clock.move_to(now)
                if step == 24:
                    fleet.restart_watcher(clock, now)
                fleet.tick(now)
            end = start + timedelta(days=1) - timedelta(minutes=1)
            clock.move_to(end)
            known_until(fleet.cluster, end)
            fleet.coverage.seen(end)
            elections = list(Lease.objects.filter(name__in=ELECTIONS).order_by("name"))
            before = figures(elections, end)
            prior = counts()
            prune_history_task()  # the beat task, at the end of the day
            after = counts()
            record["exact"].append(before == figures(elections, end))
            record["pruned"].append({k: prior[k] - after[k] for k in prior})
            record["counts"].append(after)
        record["fleet"] = fleet
        record["now"] = timezone.now()
        print_month(record["counts"])
    return record


def print_month(days: list[dict[str, int]]) -> None:
    names = list(HISTORY_TABLES)
    print(f"\nRows after each day's prune (retention {RETENTION_DAYS} days):")
    print("day " + " ".join(f"{name:>15}" for name in names))
    for day, row in enumerate(days, start=1):
        print(f"{day:>3} " + " ".join(f"{row[name]:>15}" for name in names))


def check_a_month_of_a_flapping_fleet_keeps_every_table_flat(month: dict[str, Any]) -> None:
    days = month["counts"]
    # Once the window has filled (a day's slack for where the cutoff falls), every day
    # leaves the same number of rows: a day's writes in, a day's writes out.
    settled = days[RETENTION_DAYS + 1 :]
    for name in HISTORY_TABLES:
        values = {row[name] for row in settled}
        assert len(values) == 1, (name, [row[name] for row in days])
    last = days[-1]
    # 48 changes a day for each flapping lease and 2 a day for the nightly one: about
    # eight days' worth stays, not thirty.
    assert last["transitions"] < 0.35 * (DAYS * (2 * 48 + 2))
    assert sum(day["transitions"] for day in month["pruned"]) > 0
    assert last["health_samples"] == 7 * 24  # NKS_HEALTH_HISTORY_DAYS of hourly samples


def check_availability_is_the_same_before_and_after_each_prune(month: dict[str, Any]) -> None:
    assert all(month["exact"]), month["exact"]
    now = month["now"]
    leases = {lease.name: lease for lease in Lease.objects.filter(name__in=ELECTIONS)}
    steady = lease_availability(leases[STEADY], now)
    # Held all month by one holder whose first and only span began on the first day.
    assert steady["7d"].ratio == pytest.approx(1.0)
    assert steady["7d"].gaps == 0
    # Watched for the whole week but for 5 s at each daily restart.
    assert steady["7d"].observed_seconds == pytest.approx(
        WINDOWS["7d"].total_seconds() - 7 * 5, abs=60
    )
    nightly = lease_availability(leases[NIGHTLY], now)
    # The window opens inside one night's gap and ends inside tonight's: 6 whole ones between.
    assert nightly["7d"].gaps == 8
    assert nightly["7d"].ratio == pytest.approx(23 / 24, abs=0.01)
    for name in FLAPPING:
        figures_7d = lease_availability(leases[name], now)["7d"]
        assert figures_7d.ratio == pytest.approx(1.0) and figures_7d.gaps == 0
        assert figures_7d.median_takeover_seconds == 0.0


def check_what_tells_the_present_is_kept_however_old(month: dict[str, Any]) -> None:
    steady = Lease.objects.get(name=STEADY)
    assert LeaseTransition.objects.filter(lease=steady).count() <= 1
    assert LeaseHolderSpan.objects.filter(lease=steady, ended_at__isnull=True).count() == 1
    assert LeaseHolderSpan.objects.get(lease=steady).started_at == T0
    steady_node = Node.objects.get(name="worker-1")
    assert NodeReadyChange.objects.filter(node=steady_node).count() == 1
    newest = WatchCoverage.objects.order_by("-started_at").first()
    assert newest is not None and newest.pk == month["fleet"].coverage.row_id


def check_open_incidents_and_undelivered_mail_survive_and_resolved_ones_go(
    month: dict[str, Any],
) -> None:
    still_open = Incident.objects.get(pk=month["still_open"])
    assert still_open.events.count() == 2
    # The mail that told of it and of a pruned incident stays, linked to it alone.
    (mail,) = still_open.notifications.all()
    assert list(mail.incidents.values_list("pk", flat=True)) == [still_open.pk]
    assert not Incident.objects.filter(pk=month["first"]).exists()
    waiting = Incident.objects.get(pk=month["waiting"])
    assert waiting.notifications.get().state == DeliveryState.PENDING
    oldest = Incident.objects.resolved().exclude(pk=waiting.pk).order_by("resolved_at").first()
    assert oldest is not None
    assert oldest.resolved_at >= month["now"] - timedelta(days=RETENTION_DAYS + 1)
    # Nothing points at a deleted incident, and no notification is about nothing.
    through = Notification.incidents.through
    assert not through.objects.exclude(incident_id__in=Incident.objects.values("pk")).exists()
    assert not Notification.objects.filter(incidents__isnull=True).exists()
    assert not IncidentEvent.objects.exclude(incident_id__in=Incident.objects.values("pk"))


def check_the_pages_read_the_pruned_month(month: dict[str, Any], user: Any) -> None:
    client = Client()
    client.force_login(user)
    fleet = month["fleet"]
    with time_machine.travel(month["now"], tick=False):
        pages = {
            "/": None,
            f"/leases/prod/apps/{STEADY}/": f"{STEADY}-pod-0",
            f"/leases/prod/apps/{FLAPPING[0]}/": f"{FLAPPING[0]}-pod-",
            "/leases/clusters/prod/nodes/worker-0/": "worker-0",
            f"/clusters/{fleet.nks_cluster.uuid}/": "prod-nks",
            "/alerts/": "always",
            f"/alerts/{month['still_open']}/": "always",
        }
        for url, text in pages.items():
            response = client.get(url)
            assert response.status_code == 200, url
            if text:
                assert text in response.content.decode(), url


def check_a_second_run_deletes_nothing_more(month: dict[str, Any]) -> None:
    before = counts()
    result = prune_history(month["now"])
    assert result.complete and result.total == 0
    assert counts() == before


def test_a_month_of_a_flapping_fleet(retention_settings: Any, django_user_model: Any) -> None:
    """Written once (20 s), checked for each promise in turn."""
    month = simulate_month()
    check_a_month_of_a_flapping_fleet_keeps_every_table_flat(month)
    check_availability_is_the_same_before_and_after_each_prune(month)
    check_what_tells_the_present_is_kept_however_old(month)
    check_open_incidents_and_undelivered_mail_survive_and_resolved_ones_go(month)
    check_the_pages_read_the_pruned_month(month, django_user_model.objects.create_user("erin"))
    check_a_second_run_deletes_nothing_more(month)


# --- Batches, budget, concurrency --------------------------------------------------------------


def old_transitions(number: int, now: datetime) -> Lease:
    """`number` holder changes of one lease, all older than the retention, and one new one."""
    cluster = KubeCluster.objects.create(name="old", kubeconfig="kubeconfig")
    lease = Lease.objects.create(
        cluster=cluster, namespace="apps", name="old-leader", lease_class="leader-election"
    )
    old = now - timedelta(days=RETENTION_DAYS + 1)
    LeaseTransition.objects.bulk_create(
        LeaseTransition(
            lease=lease,
            from_holder=f"pod-{index}",
            to_holder=f"pod-{index + 1}",
            observed_at=old + timedelta(seconds=index),
        )
        for index in range(number)
    )
    LeaseTransition.objects.create(lease=lease, to_holder="pod-new", observed_at=now)
    return lease


TRANSITIONS = [plan for plan in PLANS if plan.model is LeaseTransition]


def test_each_delete_takes_at_most_a_batch_of_rows(retention_settings: Any) -> None:
    now = T0
    lease = old_transitions(350, now)
    table = LeaseTransition._meta.db_table
    with CaptureQueriesContext(connection) as queries:
        result = prune(now, batch=100, plans=TRANSITIONS)
    deletes = [
        query["sql"]
        for query in queries.captured_queries
        if query["sql"].startswith("DELETE") and table in query["sql"]
    ]
    assert len(deletes) == 4  # 100 + 100 + 100 + 50
    assert all(sql.count(",") + 1 <= 100 for sql in deletes)
    assert result.deleted == {table: 350} and result.complete
    assert list(lease.transitions.values_list("to_holder", flat=True)) == ["pod-new"]


def test_a_run_stops_at_its_budget_and_the_next_one_continues(retention_settings: Any) -> None:
    now = T0
    old_transitions(300, now)
    stopped = prune(now, batch=100, budget_seconds=0, plans=TRANSITIONS)
    assert not stopped.complete and stopped.total == 0
    assert LeaseTransition.objects.count() == 301
    finished = prune(now, batch=100, plans=TRANSITIONS)
    assert finished.complete and finished.total == 300


def test_a_second_run_while_one_holds_the_lock_does_nothing(retention_settings: Any) -> None:
    now = T0
    old_transitions(10, now)
    holder = retention.retention_lock()
    assert holder.acquire()
    try:
        assert prune_history(now).skipped
        assert LeaseTransition.objects.count() == 11
    finally:
        holder.release()
    assert prune_history(now).total == 10


@pytest.mark.django_db(transaction=True)
def test_two_runs_at_once_delete_each_row_once(retention_settings: Any) -> None:
    """Without the lock (it only saves work), two runs' batches never wait on each other's
    rows or pick the same ones: FOR UPDATE SKIP LOCKED on PostgreSQL."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite runs one writer at a time: the race needs PostgreSQL")
    now = T0
    old_transitions(3000, now)
    results: list[retention.PruneResult] = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def run() -> None:
        try:
            start.wait()
            results.append(prune(now, batch=100, plans=TRANSITIONS))
        except BaseException as error:  # reported below, in the test's thread
            errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert sum(result.total for result in results) == 3000
    assert all(result.complete for result in results)
    assert LeaseTransition.objects.count() == 1


# --- Coverage compaction and availability's edge ---------------------------------------------


def test_a_long_gap_in_continuous_coverage_keeps_its_figures(retention_settings: Any) -> None:
    """A lease released 12 days ago, watched without a break by two overlapping watchers
    (a takeover): the whole week is one leaderless gap, before and after the prune."""
    now = T0 + timedelta(days=20)
    cluster = KubeCluster.objects.create(name="edge", kubeconfig="kubeconfig")
    known_until(cluster, now)
    lease = Lease.objects.create(
        cluster=cluster,
        namespace="apps",
        name="released",
        lease_class="leader-election",
        created_at=T0,
    )
    for start, end in ((0, 2), (2, 6), (6, 8)):
        LeaseHolderSpan.objects.create(
            lease=lease,
            holder=f"pod-{start}",
            started_at=T0 + timedelta(days=start),
            ended_at=T0 + timedelta(days=end),
        )
    # Two stretches that overlap (a takeover) and a third that starts where one ends.
    for start, end in ((0, 5), (4, 11), (11, 20)):
        WatchCoverage.objects.create(
            cluster=cluster,
            started_at=T0 + timedelta(days=start),
            last_seen_at=T0 + timedelta(days=end),
        )
    with time_machine.travel(now, tick=False):
        before = lease_availability(lease, now)
        result = prune_history(now)
        after = lease_availability(lease, now)
    assert result.deleted[WatchCoverage._meta.db_table] == 2
    assert result.deleted[LeaseHolderSpan._meta.db_table] == 2
    assert after == before
    assert before["7d"].gaps == 1 and before["7d"].ratio == 0.0
    # The stretches were joined into the one that reaches now; the span before the window
    # is the one kept.
    assert list(WatchCoverage.objects.values_list("started_at", "last_seen_at")) == [(T0, now)]
    assert list(LeaseHolderSpan.objects.values_list("holder", flat=True)) == ["pod-6"]


# --- NKS events ----------------------------------------------------------------------------


def test_a_quiet_cluster_keeps_its_page_of_events_and_resizes_keep_theirs(
    retention_settings: Any,
) -> None:
    now = T0 + timedelta(days=100)
    cluster = make_nks_cluster(make_account(), "quiet", uuid=str(uuid.uuid4()))
    old = now - timedelta(days=60)
    events = [
        NksEvent.objects.create(
            cluster=cluster,
            uuid=f"quiet-{number}",
            type="NODEGROUP_UPDATE",
            state=EventState.SUCCESS,
            nks_created_at=old + timedelta(hours=number),
            first_seen_at=old + timedelta(hours=number),
        )
        for number in range(EVENTS_SHOWN + 5)
    ]
    # The oldest one is what a resize request of ours followed: what the dashboard did.
    resize = make_resize(make_nodegroup(cluster), event=events[0])
    result = prune(now, plans=[plan for plan in PLANS if plan.model is NksEvent])
    assert result.deleted == {NksEvent._meta.db_table: 4}
    kept = set(NksEvent.objects.values_list("uuid", flat=True))
    assert kept == {event.uuid for event in events[5:]} | {"quiet-0"}
    resize.refresh_from_db()
    assert resize.event_id == events[0].pk


# --- Settings ------------------------------------------------------------------------------


def test_the_minimum_retention_outlasts_every_window_availability_reads() -> None:
    from django.conf import settings

    assert timedelta(days=settings.HISTORY_RETENTION_MIN_DAYS) > max(WINDOWS.values())


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"HISTORY_RETENTION_DAYS": "7"}, "HISTORY_RETENTION_DAYS=7 is below the minimum of 8"),
        ({"INCIDENT_RETENTION_DAYS": "6"}, "INCIDENT_RETENTION_DAYS=6 is below the minimum of 7"),
        (
            {"ALERT_RETRY_HOURS": "240", "INCIDENT_RETENTION_DAYS": "10"},
            "INCIDENT_RETENTION_DAYS=10 is below the minimum of 11",
        ),
        ({"HISTORY_PRUNE_BATCH": "10"}, "HISTORY_PRUNE_BATCH=10 is below the minimum of 100"),
    ],
)
def test_retention_settings_too_short_for_their_readers_are_refused(
    env: dict[str, str], message: str
) -> None:
    result = run_django("", env=env)
    assert result.returncode != 0
    assert message in result.stderr


# --- /metrics ------------------------------------------------------------------------------


def test_metrics_count_the_rows_each_table_lost_and_whether_the_last_run_finished(
    retention_settings: Any, client: Client
) -> None:
    from django.core.cache import caches

    caches["default"].delete_many(
        [retention.LAST_RUN_KEY] + [retention.DELETED_KEY + table for table in retention._TABLES]
    )
    now = timezone.now()
    lease = old_transitions(10, now)
    prune_history(now)
    LeaseTransition.objects.bulk_create(
        LeaseTransition(lease=lease, observed_at=now - timedelta(days=20)) for _ in range(3)
    )
    prune_history(now)
    text = client.get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    assert 'dashboard_history_pruned_rows_total{table="leases_leasetransition"} 13.0' in text
    assert 'dashboard_history_pruned_rows_total{table="alerts_incident"} 0.0' in text
    assert "dashboard_history_prune_complete 1.0" in text
    last_run = re.search(r"^dashboard_history_prune_last_run_timestamp_seconds (\S+)$", text, re.M)
    assert last_run is not None and float(last_run.group(1)) == pytest.approx(now.timestamp())
