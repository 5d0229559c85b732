"""The demo's leader-k8s elections (fakes/kube/leader_k8s_demo), read over real HTTP with the
official client: a list at the start, then one watch while the scenario lives through fifteen
minutes in one-second steps (ScenarioRunner.advance), so the test takes about a second."""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
from kubernetes import client, config, watch

from fakes.kube import DemoScenario, FakeApiServer, ObjectStore, ScenarioRunner, make_scenario

T0 = 1_800_000_000.0
WATCHED_SECONDS = 900
TOKEN = re.compile(r"^b4k-[1-9A-HJ-NP-Za-km-z]{22}$")
MANAGED_BY = "leader.bluetape4k.io/managed-by"
NODE_ID = "leader.bluetape4k.io/node-id"
AUDIT_ID = "leader.bluetape4k.io/audit-leader-id"
RECONCILER = ("operators", "reconciler")
FOREIGN = ("operators", "report-export")
SLOTS = [("jobs", f"batch-workers-slot-{slot}") for slot in range(3)]
DRAINED = [("jobs", f"nightly-export-slot-{slot}") for slot in range(2)]
LEADER_K8S = [RECONCILER, FOREIGN, *SLOTS, *DRAINED]


@dataclass(frozen=True)
class Seen:
    """One watch event of a leader-k8s lease, as the official client decoded it."""

    type: str
    namespace: str
    name: str
    resource_version: int
    holder: str | None
    transitions: int | None
    acquired: datetime | None
    renewed: datetime | None
    duration: int | None
    annotations: dict[str, str]

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    @property
    def at(self) -> float:
        """Scenario seconds since the start: every write sets renewTime to its own time."""
        assert self.renewed is not None
        return self.renewed.timestamp() - T0

    @property
    def expires(self) -> float:
        assert self.duration is not None
        return self.at + self.duration


def _seen(event_type: str, lease: client.V1Lease) -> Seen:
    spec = lease.spec
    return Seen(
        event_type,
        lease.metadata.namespace,
        lease.metadata.name,
        int(lease.metadata.resource_version),
        spec.holder_identity,
        spec.lease_transitions,
        spec.acquire_time,
        spec.renew_time,
        spec.lease_duration_seconds,
        dict(lease.metadata.annotations or {}),
    )


@dataclass
class Observed:
    initial: dict[tuple[str, str], client.V1Lease]
    events: list[Seen]

    def of(self, key: tuple[str, str]) -> list[Seen]:
        return [event for event in self.events if event.key == key]

    def holders(self, key: tuple[str, str]) -> list[tuple[float, str | None]]:
        """(time, holder) each time the holder changed, from the initial list on."""
        changes = [(0.0, self.initial[key].spec.holder_identity)]
        for event in self.of(key):
            if event.holder != changes[-1][1]:
                changes.append((event.at, event.holder))
        return changes


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    store = ObjectStore()
    runner = ScenarioRunner(store, make_scenario("demo"), start_time=T0)
    runner.advance(0)
    server = FakeApiServer(store=store, bookmark_interval=0.05).start()
    configuration = client.Configuration()
    kubeconfig = server.write_kubeconfig(Path(tmp_path_factory.mktemp("kube")) / "config")
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    api_client = client.ApiClient(configuration)
    try:
        api = client.CoordinationV1Api(api_client)
        listing = api.list_lease_for_all_namespaces()
        initial = {
            (lease.metadata.namespace, lease.metadata.name): lease for lease in listing.items
        }
        events: list[Seen] = []
        failures: list[BaseException] = []
        target: list[int] = []  # set once the scenario has run: the store's last version
        stream = watch.Watch()

        def consume() -> None:
            try:
                for event in stream.stream(
                    api.list_lease_for_all_namespaces,
                    resource_version=listing.metadata.resource_version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=60,
                ):
                    if event["type"] != "BOOKMARK":
                        lease = event["object"]
                        if (lease.metadata.namespace, lease.metadata.name) in LEADER_K8S:
                            events.append(_seen(event["type"], lease))
                    if target and int(stream.resource_version) >= target[0]:
                        stream.stop()
            except BaseException as error:  # reported by the fixture, not lost in the thread
                failures.append(error)

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        for _ in range(WATCHED_SECONDS):
            runner.advance(1)
        target.append(store.resource_version)
        reader.join(timeout=30)
        assert not reader.is_alive(), "the watch never caught up with the scenario"
        assert not failures, failures
        yield Observed(initial, events)
    finally:
        api_client.close()
        server.stop()


def test_the_demo_lists_leader_k8s_leases_with_tokens_and_the_librarys_annotations(
    observed: Observed,
) -> None:
    for key in LEADER_K8S:
        lease = observed.initial[key]
        annotations = lease.metadata.annotations
        assert TOKEN.match(lease.spec.holder_identity), key
        assert annotations[MANAGED_BY] == "bluetape4k-leader-k8s"
        # LeaderNodeId.Default is host:pid; in a pod, the pod's name and the JVM's pid.
        assert re.fullmatch(
            rf"{key[1].rsplit('-slot-', 1)[0]}-[a-z0-9]{{10}}-[a-z0-9]{{5}}:1", annotations[NODE_ID]
        ), annotations[NODE_ID]
        assert lease.spec.lease_duration_seconds == 30
        assert lease.spec.renew_time.timestamp() > T0 - 10
    # Without a LeaderSlot the audit id defaults to the token; group slots carry a leader id.
    reconciler = observed.initial[RECONCILER]
    assert reconciler.metadata.annotations[AUDIT_ID] == reconciler.spec.holder_identity
    for key in SLOTS:
        audit_id = observed.initial[key].metadata.annotations[AUDIT_ID]
        assert audit_id.startswith("batch-workers-")
        assert not TOKEN.match(audit_id)


def test_the_group_is_three_slots_named_lock_slot_index_held_by_three_pods(
    observed: Observed,
) -> None:
    group = sorted(
        name
        for namespace, name in observed.initial
        if namespace == "jobs" and name.startswith("batch-workers")
    )
    node_ids = {observed.initial[key].metadata.annotations[NODE_ID] for key in SLOTS}
    tokens = {observed.initial[key].spec.holder_identity for key in SLOTS}

    assert group == ["batch-workers-slot-0", "batch-workers-slot-1", "batch-workers-slot-2"]
    assert len(node_ids) == 3
    assert len(tokens) == 3


def test_every_write_is_a_watch_event_with_a_newer_resource_version(observed: Observed) -> None:
    versions = [event.resource_version for event in observed.events]

    assert {event.type for event in observed.events} == {"MODIFIED"}
    assert versions == sorted(versions)
    assert len(set(versions)) == len(versions)
    for key in LEADER_K8S:
        assert observed.of(key), f"no events for {key}"


def test_slots_0_and_1_keep_their_tokens_and_renew_every_ten_seconds(observed: Observed) -> None:
    for key in SLOTS[:2]:
        events = observed.of(key)
        renewals = [event.at for event in events]

        assert {event.holder for event in events} == {observed.initial[key].spec.holder_identity}
        assert max(b - a for a, b in itertools.pairwise(renewals)) == 10
        assert len(events) >= WATCHED_SECONDS // 10 - 1


def test_slot_2_is_released_within_a_minute_and_taken_again_by_a_new_token(
    observed: Observed,
) -> None:
    holders = observed.holders(SLOTS[2])
    first_token = holders[0][1]
    released_at, nobody = holders[1]
    retaken_at, retaken_by = holders[2]
    retake = next(event for event in observed.of(SLOTS[2]) if event.holder == retaken_by)
    release = next(event for event in observed.of(SLOTS[2]) if event.holder is None)

    assert released_at < 60
    assert nobody is None
    assert 60 <= retaken_at - released_at <= 120
    assert retaken_by != first_token
    assert TOKEN.match(retaken_by or "")
    # Taking a released lease: the library keeps the previous acquireTime and count.
    assert retake.acquired == release.acquired
    assert retake.transitions == release.transitions


def test_slot_2_expires_when_its_pod_crashes_and_a_new_pod_takes_it_over(
    observed: Observed,
) -> None:
    events = observed.of(SLOTS[2])
    takeovers = [
        (before, after)
        for before, after in itertools.pairwise(events)
        if before.holder and after.holder and before.holder != after.holder
    ]

    assert takeovers, "the slot was never taken over after an expiry"
    before, after = takeovers[0]
    assert after.at - before.expires >= 60  # unheld (expired) for a minute
    assert after.at < 6 * 60
    assert after.transitions == (before.transitions or 0) + 1
    assert after.acquired == after.renewed
    assert after.annotations[NODE_ID] != before.annotations[NODE_ID]


def test_slot_2_goes_unheld_again_and_again(observed: Observed) -> None:
    holders = observed.holders(SLOTS[2])
    tokens = [holder for _, holder in holders if holder]

    assert sum(1 for _, holder in holders if holder is None) >= 2
    assert len(tokens) == len(set(tokens))  # every acquisition brings a fresh token


def test_the_drained_group_has_no_slot_held_for_two_minutes_then_new_pods_take_both(
    observed: Observed,
) -> None:
    slots = [observed.of(key) for key in DRAINED]
    # The last renewal of each evicted worker, and its replacement's first write.
    last = [
        next(b for b, a in itertools.pairwise(events) if a.holder != b.holder) for events in slots
    ]
    taken = [
        next(a for b, a in itertools.pairwise(events) if a.holder != b.holder) for events in slots
    ]
    unstaffed_from = max(event.expires for event in last)
    staffed_again = min(event.at for event in taken)

    assert unstaffed_from < 150
    assert staffed_again - unstaffed_from >= 120
    for before, after in zip(last, taken, strict=True):
        assert TOKEN.match(after.holder or "")
        assert after.holder != before.holder
        assert after.transitions == (before.transitions or 0) + 1
        assert after.acquired == after.renewed
        assert after.annotations[NODE_ID] != before.annotations[NODE_ID]


def test_the_reconciler_is_taken_over_by_other_pods_with_new_tokens(observed: Observed) -> None:
    events = observed.of(RECONCILER)
    holders = observed.holders(RECONCILER)
    first_takeover = next(event for event in events if event.holder == holders[1][1])
    node_ids = {event.annotations[NODE_ID] for event in events}

    assert holders[1][0] < 60
    assert first_takeover.transitions == observed.initial[RECONCILER].spec.lease_transitions + 1
    assert first_takeover.acquired == first_takeover.renewed
    assert len({holder for _, holder in holders}) >= 4
    assert all(TOKEN.match(holder or "") for _, holder in holders)
    assert len(node_ids) >= 4
    # A takeover writes the new holder's node id with its token, on every write.
    for event in events:
        assert event.annotations[AUDIT_ID] == event.holder


def test_a_token_comes_back_exactly_once_written_by_the_pod_that_held_it(
    observed: Observed,
) -> None:
    reuses = []
    for key in LEADER_K8S:
        seen: set[str] = set()
        previous: str | None = None
        for at, holder in observed.holders(key):
            if holder and holder in seen and holder != previous:
                reuses.append((key, at, holder))
            if holder:
                seen.add(holder)
            previous = holder

    assert len(reuses) == 1
    [(key, at, token)] = reuses
    assert key == RECONCILER
    assert 100 <= at <= 150
    stale = next(event for event in observed.of(key) if event.holder == token)
    assert stale.annotations[NODE_ID] == observed.initial[key].metadata.annotations[NODE_ID]
    # The stale pod wrote back its cached view: the old acquireTime and count.
    assert stale.acquired == observed.initial[key].spec.acquire_time
    assert stale.transitions == observed.initial[key].spec.lease_transitions


def test_report_export_is_taken_over_by_a_foreign_writer_that_keeps_the_annotations(
    observed: Observed,
) -> None:
    holders = observed.holders(FOREIGN)
    foreign = [event for event in observed.of(FOREIGN) if event.holder and event.at > 60]

    assert [holder is None for _, holder in holders[:3]] == [False, True, False]
    assert holders[2][0] < 90
    assert not TOKEN.match(holders[2][1] or "")
    assert foreign[0].annotations[MANAGED_BY] == "bluetape4k-leader-k8s"
    assert {event.duration for event in foreign} == {15}
    assert foreign[-1].at > WATCHED_SECONDS - 3  # client-go renews every 2 s


class _DemoWithoutElections(DemoScenario):
    def _leader_elections(self, now: float) -> None:
        pass


def test_the_elections_leave_the_rest_of_the_demo_as_it_was() -> None:
    def other_leases(scenario: DemoScenario) -> list[tuple[str, str, object, object]]:
        store = ObjectStore()
        runner = ScenarioRunner(store, scenario, start_time=T0)
        for _ in range(30):
            runner.advance(10)
        return [
            (
                lease["metadata"]["namespace"],
                lease["metadata"]["name"],
                lease["metadata"].get("labels"),
                lease["spec"],
            )
            for lease in store.list_leases()
            if lease["metadata"]["namespace"] not in {"operators", "jobs"}
        ]

    with_elections = other_leases(DemoScenario(seed=7))

    assert with_elections == other_leases(_DemoWithoutElections(seed=7))
    assert len(with_elections) > 50
