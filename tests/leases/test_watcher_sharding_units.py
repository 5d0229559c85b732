"""The share of each watch worker, decided from the heartbeat rows and the lock's store (no
Celery here: the keeper is handed what starts a watcher), and how the watchers page and
/metrics show which worker watches which cluster. The processes themselves are
test_watcher_sharding.py."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db.models.functions import Now
from django.test import Client

from leases import watcher_assignment
from leases.locks import watcher_lock, watcher_lock_owners
from leases.models import WatchWorker
from leases.services import route_unwatched, run_watcher
from leases.watcher_assignment import (
    LocalWatchers,
    WorkerKeeper,
    capacity,
    owner_worker,
    worker_queue,
)
from tests.leases.factories import make_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def private_locks(settings: Any) -> None:
    """Locks of this test's own: cluster ids repeat from test to test, Redis keys do not
    go away with the test database."""
    settings.CACHES = {
        **settings.CACHES,
        "locks": {**settings.CACHES["locks"], "KEY_PREFIX": f"shard-{uuid.uuid4().hex}"},
    }


def live_worker(name: str, clusters: int = 0, concurrency: int = 20) -> WatchWorker:
    return WatchWorker.objects.create(
        name=name,
        queue=worker_queue(name),
        concurrency=concurrency,
        clusters=clusters,
        capacity=0,
        started_at=Now(),
        heartbeat_at=Now(),
    )


def keeper(name: str, local: LocalWatchers, started: list[int], concurrency: int = 20) -> Any:
    return WorkerKeeper(
        name=name,
        queue=worker_queue(name),
        concurrency=concurrency,
        start=started.append,
        local=local,
    )


def test_capacity_is_the_share_rounded_up_within_the_pool() -> None:
    assert capacity(50, 2) == 25
    assert capacity(50, 3) == 17
    assert capacity(50, 3, concurrency=10) == 9  # one thread kept for the queue's heartbeat
    assert capacity(7, 0) == 7
    assert capacity(0, 4) == 0


def test_names_queues_and_owners_line_up() -> None:
    assert owner_worker("pod-7:42:ab12cd34") == "pod-7:42"
    assert worker_queue("pod-7:42") == "watch.pod-7-42"


def test_a_keeper_claims_its_share_of_free_clusters_by_taking_their_locks() -> None:
    ids = [make_cluster(f"prod-{n}").pk for n in range(5)]
    live_worker("other:2")
    local, started = LocalWatchers(), []
    worker = keeper("me:1", local, started)

    worker.tick()

    assert worker.capacity == 3  # ceil(5 / 2)
    assert len(started) == 3 and set(started) <= set(ids)
    owners = watcher_lock_owners(ids)
    assert {owner_worker(owners[cid]) for cid in started} == {"me:1"}
    assert local.held() == set(started)
    assert WatchWorker.objects.get(name="me:1").clusters == 0  # reported before claiming
    worker.tick()
    assert len(started) == 3, "nothing more beyond its share"
    assert WatchWorker.objects.get(name="me:1").clusters == 3


def test_a_claimed_cluster_runs_with_the_keepers_lock_and_a_busy_one_is_left_alone() -> None:
    cluster = make_cluster("prod")
    other = watcher_lock(cluster.pk, "other:2:aaaa")
    assert other.acquire()
    local, started = LocalWatchers(), []
    keeper("me:1", local, started).tick()
    assert started == [], "a held lock is not claimed"
    other.release()
    keeper("me:1", local, started).tick()
    assert started == [cluster.pk]
    lock = local.take_claim(cluster.pk)
    assert lock is not None and lock.held
    assert watcher_lock_owners([cluster.pk])[cluster.pk] == lock.owner


def test_a_keeper_over_its_share_hands_off_only_what_others_have_room_for() -> None:
    ids = [make_cluster(f"prod-{n}").pk for n in range(6)]
    local, started = LocalWatchers(), []
    stops = {cid: threading.Event() for cid in ids}
    for cid in ids:
        local.started(cid, stops[cid])
    live_worker("full:2", clusters=3)  # share 3 of 6: no room
    worker = keeper("me:1", local, started)
    worker.tick()
    assert worker.capacity == 3
    assert not any(stop.is_set() for stop in stops.values()), "nobody to hand off to"

    live_worker("new:3", clusters=0)  # joins: share 2, room for 2
    worker.tick()
    assert worker.capacity == 2
    handed = [cid for cid, stop in stops.items() if stop.is_set()]
    assert len(handed) == 2, "only its excess of two goes, in the others' room"
    assert started == []


def test_a_claim_for_a_disabled_cluster_is_released_not_run() -> None:
    cluster = make_cluster("prod", enabled=False)
    lock = watcher_lock(cluster.pk, "me:1:abcd")
    assert lock.acquire()
    watcher_assignment.LOCAL.add_claim(cluster.pk, lock)
    assert run_watcher(cluster.pk) is False
    assert watcher_lock_owners([cluster.pk]) == {}, "the claim's lock is released"
    assert watcher_assignment.LOCAL.held() == set()


def test_a_watch_task_not_claimed_is_refused_by_a_worker_at_its_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = make_cluster("prod")
    live_worker("other:2", clusters=1)
    local, started = LocalWatchers(), []
    worker = keeper("me:1", local, started)
    local.started(999, threading.Event())  # a watcher it runs already: its share of 1
    worker.tick()
    assert worker.capacity == 1 and started == []
    # The keeper join_fleet gives a watch worker (leases.tasks, at the worker's start).
    monkeypatch.setattr(watcher_assignment, "KEEPER", worker)
    monkeypatch.setattr(watcher_assignment, "LOCAL", local)
    assert run_watcher(cluster.pk) is False
    assert watcher_lock_owners([cluster.pk]) == {}, "it did not even take the lock"


def test_beat_routes_unwatched_clusters_to_the_workers_with_room() -> None:
    ids = [make_cluster(f"prod-{n}").pk for n in range(4)]
    assert route_unwatched(ids) == [(cid, None) for cid in ids]  # no worker: the shared queue
    live_worker("a:1", clusters=2)
    live_worker("b:2", clusters=0)
    routes = route_unwatched(ids[2:])
    assert [queue for _, queue in routes] == [worker_queue("b:2")] * 2


def test_the_watchers_page_and_metrics_show_which_worker_watches_which_cluster(
    engineer_client: Client, client: Client
) -> None:
    prod = make_cluster("prod")
    make_cluster("staging")
    live_worker("pod-a:11", clusters=1)
    WatchWorker.objects.create(
        name="pod-b:12",
        queue=worker_queue("pod-b:12"),
        started_at=Now(),
        heartbeat_at=Now() - timedelta(minutes=5),
    )
    assert watcher_lock(prod.pk, "pod-a:11:beef").acquire()

    text = engineer_client.get("/leases/clusters/").content.decode()

    row = text.split(">prod</a>", 1)[1].split("</tr>", 1)[0]
    assert 'data-watch-worker="prod"' in row and "by worker pod-a:11" in row
    assert 'data-watch-worker="staging"' not in text
    workers = text.split('id="watch-workers"', 1)[1]
    live = workers.split('data-watch-worker-row="pod-a:11"', 1)[1].split("</tr>", 1)[0]
    assert "live" in live and 'data-worker-clusters="pod-a:11">1<' in live and "prod" in live
    gone = workers.split('data-watch-worker-row="pod-b:12"', 1)[1].split("</tr>", 1)[0]
    assert "gone" in gone
    assert "Not watched by any worker right now: staging" in " ".join(workers.split())
    assert "1 live watch worker;" in workers

    metrics = client.get("/metrics", REMOTE_ADDR="127.0.0.1").content.decode()
    assert "lease_dashboard_watch_assignment_metrics_up 1.0" in metrics
    assert "lease_dashboard_watch_workers 1.0" in metrics
    assert 'lease_dashboard_watch_cluster_worker{cluster="prod",worker="pod-a:11"} 1.0' in metrics
    assert 'lease_dashboard_watch_worker_clusters{worker="pod-a:11"} 1.0' in metrics
    assert "lease_dashboard_watch_clusters_unwatched 1.0" in metrics
    assert 'worker="pod-b:12"' not in metrics, "a gone worker has no series"


# --- what a worker gone leaves on the broker ------------------------------------------------


def bound_queues(channel: Any, exchange: str) -> set[str]:
    return {queue for _, _, queue in channel.get_table(exchange)}


def test_a_worker_gone_for_an_hour_is_forgotten_with_its_queue(private_broker: None) -> None:
    from dashboard.celery import app
    from leases.tasks import watch_cluster

    gone, live = "gone-host:41", "live-host:42"
    for name in (gone, live):
        queue = worker_queue(name)
        with app.connection_for_write() as conn:
            # As the worker bound it when it started (Celery's select_add) ...
            keepers_queues = app.amqp.Queues([])
            keepers_queues.select_add(queue)
            keepers_queues[queue](conn.default_channel).declare()
        # ... and a claim sent to it that it never ran (sent as beat sends one).
        watch_cluster.apply_async(args=(999,), queue=queue)
    long_ago = Now() - watcher_assignment.FORGET_WORKER_AFTER - timedelta(minutes=1)
    WatchWorker.objects.create(
        name=gone, queue=worker_queue(gone), started_at=long_ago, heartbeat_at=long_ago
    )
    WatchWorker.objects.create(
        name=live, queue=worker_queue(live), started_at=Now(), heartbeat_at=Now()
    )

    deleted = watcher_assignment.forget_gone_workers(watcher_assignment.delete_worker_queues)

    assert deleted == [worker_queue(gone)]
    assert list(WatchWorker.objects.values_list("name", flat=True)) == [live]
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        assert channel._size(worker_queue(gone)) == 0
        assert channel._size(worker_queue(live)) == 1
        default = app.amqp.queues.default_exchange.name
        assert worker_queue(gone) not in bound_queues(channel, default)
        assert worker_queue(gone) not in bound_queues(channel, worker_queue(gone))
        assert worker_queue(live) in bound_queues(channel, default)


def test_a_keeper_whose_row_was_forgotten_binds_its_queue_again() -> None:
    declared: list[str] = []
    one = WorkerKeeper(
        name="host:1",
        queue=worker_queue("host:1"),
        concurrency=4,
        start=lambda cluster_id: None,
        local=LocalWatchers(),
        declare=lambda: declared.append("host:1"),
    )
    one.tick()
    one.tick()
    assert declared == []  # bound as the worker started, and its row is there
    WatchWorker.objects.filter(name="host:1").delete()  # the others forgot it
    one.tick()
    assert declared == ["host:1"]
    assert WatchWorker.objects.filter(name="host:1").exists()
