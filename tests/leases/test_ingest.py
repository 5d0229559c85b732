from __future__ import annotations

from datetime import UTC, datetime

import pytest

from leases.ingest import LeaseIngestor, sync_candidates
from leases.models import KubeCluster, Lease, LeaseCandidate, LeaseTransition
from leases.parse import parse_candidate

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster() -> KubeCluster:
    return KubeCluster.objects.create(name="demo", kubeconfig="secret-kubeconfig")


def observe(
    holder: str,
    transitions: int | None = 0,
    *,
    name: str = "operator-leader",
    namespace: str = "operators",
    renew: str = "2026-11-29T07:00:00.000000Z",
) -> dict[str, object]:
    return {
        "metadata": {"namespace": namespace, "name": name, "resourceVersion": "1"},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "renewTime": renew,
            "leaseTransitions": transitions,
        },
    }


def test_first_sight_writes_the_lease_and_no_transition(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(observe("pod-a"))
    result = ingestor.flush()
    lease = Lease.objects.get()
    assert (result.leases_written, result.transitions_written) == (1, 0)
    assert lease.holder == "pod-a"
    assert lease.expires_at == datetime(2026, 11, 29, 7, 0, 15, tzinfo=UTC)
    assert not LeaseTransition.objects.exists()


def test_renewals_are_coalesced_into_one_row_write(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    for second in range(50):
        ingestor.observe(observe("pod-a", renew=f"2026-11-29T07:00:{second:02d}.000000Z"))
    result = ingestor.flush()
    assert result.events == 50
    assert result.leases_written == 1
    assert Lease.objects.get().renew_time == datetime(2026, 11, 29, 7, 0, 49, tzinfo=UTC)
    assert not LeaseTransition.objects.exists()


def test_holder_change_records_one_transition(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(observe("pod-a", 3))
    ingestor.flush()
    ingestor.observe(observe("pod-b", 4))
    ingestor.observe(observe("pod-b", 4))
    ingestor.flush()
    transition = LeaseTransition.objects.get()
    assert (transition.from_holder, transition.to_holder) == ("pod-a", "pod-b")
    assert (transition.lease_transitions, transition.missed) == (4, 0)


def test_changes_inside_one_batch_are_all_recorded(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(observe("pod-a", 1))
    ingestor.flush()
    ingestor.observe(observe("pod-b", 2))
    ingestor.observe(observe("pod-c", 3))
    ingestor.observe(observe("pod-a", 4))
    ingestor.flush()
    assert list(LeaseTransition.objects.values_list("from_holder", "to_holder")) == [
        ("pod-a", "pod-b"),
        ("pod-b", "pod-c"),
        ("pod-c", "pod-a"),
    ]


def test_a_new_lease_that_changes_holder_in_its_first_batch_keeps_the_transition(
    cluster: KubeCluster,
) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(observe("pod-a", 0))
    ingestor.observe(observe("pod-b", 1))
    ingestor.flush()
    assert LeaseTransition.objects.get().lease == Lease.objects.get()


def test_jump_in_lease_transitions_marks_missed_changes(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(observe("pod-a", 2))
    ingestor.flush()
    ingestor.observe(observe("pod-d", 6))
    ingestor.flush()
    assert LeaseTransition.objects.get().missed == 3


def test_unseen_round_trip_back_to_the_same_holder_is_marked(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(observe("pod-a", 2))
    ingestor.flush()
    ingestor.observe(observe("pod-a", 4))  # A -> B -> A while nobody watched
    ingestor.flush()
    transition = LeaseTransition.objects.get()
    assert (transition.from_holder, transition.to_holder, transition.missed) == (
        "pod-a",
        "pod-a",
        2,
    )


def test_release_is_a_transition_to_nobody(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(observe("pod-a", 2))
    ingestor.flush()
    ingestor.observe(observe("", 2))
    ingestor.flush()
    transition = LeaseTransition.objects.get()
    assert (transition.to_holder, transition.missed) == ("", 0)


def test_deletion_marks_the_lease_and_keeps_its_history(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(observe("pod-a", 0))
    ingestor.flush()
    ingestor.observe(observe("pod-b", 1))
    ingestor.flush()
    ingestor.observe_deleted(("operators", "operator-leader"))
    result = ingestor.flush()
    lease = Lease.objects.get()
    assert result.deletions_written == 1
    assert lease.deleted_at is not None
    assert lease.transitions.count() == 1


def test_a_deleted_lease_that_comes_back_is_live_again(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(observe("pod-a"))
    ingestor.flush()
    ingestor.observe_deleted(("operators", "operator-leader"))
    ingestor.flush()
    ingestor.observe(observe("pod-a"))
    ingestor.flush()
    assert Lease.objects.get().deleted_at is None


def test_reconcile_marks_leases_missing_from_a_relist_as_deleted(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    ingestor.observe(observe("node-1", name="node-1", namespace="kube-node-lease"))
    ingestor.observe(observe("node-2", name="node-2", namespace="kube-node-lease"))
    ingestor.flush()
    gone = ingestor.reconcile({("kube-node-lease", "node-1")})
    ingestor.flush()
    assert gone == 1
    assert list(Lease.objects.live().values_list("name", flat=True)) == ["node-1"]


def test_a_restarted_ingestor_writes_no_duplicate_transition(cluster: KubeCluster) -> None:
    first = LeaseIngestor(cluster.id)
    first.observe(observe("pod-a", 0))
    first.flush()
    first.observe(observe("pod-b", 1))
    first.flush()
    # The process dies; a new watcher relists and sees the same state, then a change.
    second = LeaseIngestor(cluster.id)
    second.observe(observe("pod-b", 1))
    second.flush()
    assert LeaseTransition.objects.count() == 1
    second.observe(observe("pod-c", 2))
    second.flush()
    assert LeaseTransition.objects.count() == 2


def test_a_change_unflushed_by_a_dead_watcher_is_recorded_by_the_next(cluster: KubeCluster) -> None:
    first = LeaseIngestor(cluster.id)
    first.observe(observe("pod-a", 0))
    first.flush()
    first.observe(observe("pod-b", 1))  # seen, but the process dies before the flush
    second = LeaseIngestor(cluster.id)
    second.observe(observe("pod-b", 1))
    second.flush()
    transition = LeaseTransition.objects.get()
    assert (transition.from_holder, transition.to_holder) == ("pod-a", "pod-b")


def test_objects_that_are_not_leases_are_refused(cluster: KubeCluster) -> None:
    ingestor = LeaseIngestor(cluster.id)
    assert not ingestor.observe({"metadata": {"name": "no-namespace"}})
    assert not ingestor.observe({"spec": {}})
    assert ingestor.flush().leases_written == 0


def test_leases_of_two_clusters_do_not_mix(cluster: KubeCluster) -> None:
    other = KubeCluster.objects.create(name="other")
    LeaseIngestor(cluster.id).observe(observe("pod-a"))
    ingestor = LeaseIngestor(other.id)
    ingestor.observe(observe("pod-z"))
    ingestor.flush()
    assert list(Lease.objects.values_list("cluster__name", "holder")) == [("other", "pod-z")]


def test_candidates_are_synced_and_missing_ones_marked_deleted(cluster: KubeCluster) -> None:
    def candidate(name: str) -> object:
        return parse_candidate(
            {
                "metadata": {"namespace": "kube-system", "name": name},
                "spec": {"leaseName": "kube-scheduler", "binaryVersion": "1.33.0"},
            }
        )

    sync_candidates(cluster.id, [candidate("a"), candidate("b")])  # type: ignore[list-item]
    sync_candidates(cluster.id, [candidate("b")])  # type: ignore[list-item]
    live = LeaseCandidate.objects.filter(deleted_at__isnull=True).values_list("name", flat=True)
    assert list(live) == ["b"]
    assert LeaseCandidate.objects.count() == 2
