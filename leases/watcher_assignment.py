"""Clusters spread over the `watch` worker processes: each holds about its share, a dead
worker's clusters are taken by the others as their locks lapse, and a worker that joins is
handed its share by the others without a restart.

Every watch worker (a Celery worker consuming the `watch` queue with a thread pool) runs one
keeper thread (`WorkerKeeper`). Every `KEEPER_TICK_SECONDS` it:

1. records its heartbeat: a `WatchWorker` row, stamped with the database's clock;
2. reads the live workers (a heartbeat younger than `WORKER_TTL_SECONDS`, by the same
   clock) and the enabled clusters: its capacity is ceil(clusters / live workers), never
   more than its pool's threads less one (the queue's heartbeat task needs a thread);
3. hands off the watchers it runs beyond its capacity, as long as another live worker has
   room: that watcher alone is stopped (it flushes, marks the row disconnected and releases
   its lock), the others in the process go on;
4. claims free clusters (nobody holds their lock) up to its capacity: it takes the lock
   itself, then sends the watch task to the queue only it consumes, so a claim is a lock
   held, never a request another worker could also act on.

A worker's own queue goes with it: deleted from the broker as it leaves, or, for one killed,
by the others once they forget its row (an hour without a heartbeat), with the claims sent to
it that it never ran.

The lock (leases/locks.py) still guarantees at most one watcher per cluster; assignment
only decides who tries. Workers claim for themselves, rather than a dispatcher deciding for
them, so a freed cluster waits at most one tick, whether beat runs or not. Each worker
tries the free clusters in its own order (rendezvous hashing on its name), so two workers
with room rarely reach for the same one, and a cluster lands where it landed before when
the same workers are live. Nothing moves while every worker is within its capacity.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, close_old_connections, connection
from django.db.models import BooleanField, Case, When
from django.db.models.functions import Now

from dashboard.locks import ExpiringLock
from leases.locks import watcher_lock, watcher_lock_owners
from leases.models import KubeCluster, WatchWorker

logger = logging.getLogger(__name__)

KEEPER_TICK_SECONDS = 2.0
# A worker not heard of for this long is gone: well under the lock's TTL (20 s), so by the
# time a killed worker's locks lapse the others already count without it.
WORKER_TTL_SECONDS = 10
# A claim whose task has not started by then is given back (the message was lost, or the
# pool is full): the lock is released for whoever has room.
CLAIM_TIMEOUT_SECONDS = 10.0
# Rows of workers gone this long are deleted; younger ones are shown as gone.
FORGET_WORKER_AFTER = timedelta(hours=1)
QUEUE_PREFIX = "watch."
# One thread of the pool stays free for the queue's heartbeat task (dashboard.tasks).
RESERVED_THREADS = 1


def worker_name() -> str:
    """This process as a watch worker: the start of `services.watcher_identity()`."""
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_worker(owner: str) -> str:
    """The worker part of a lock owner ("host:pid:random" -> "host:pid")."""
    return owner.rsplit(":", 1)[0] if owner.count(":") >= 2 else owner


def worker_queue(name: str) -> str:
    # Queue names become file names on the embedded broker: letters, digits, . _ - only.
    return QUEUE_PREFIX + re.sub(r"[^A-Za-z0-9._-]", "-", name)


def capacity(clusters: int, workers: int, concurrency: int | None = None) -> int:
    """The most clusters one worker should hold: its share rounded up, within its pool."""
    share = math.ceil(clusters / max(workers, 1))
    if concurrency is None:
        return share
    return max(0, min(share, concurrency - RESERVED_THREADS))


def preference(worker: str, cluster_id: int) -> bytes:
    """Rendezvous hashing: how much `worker` prefers `cluster_id` (higher first)."""
    return hashlib.blake2b(f"{worker}/{cluster_id}".encode(), digest_size=8).digest()


def live_workers() -> list[WatchWorker]:
    return list(
        WatchWorker.objects.filter(
            heartbeat_at__gte=Now() - timedelta(seconds=WORKER_TTL_SECONDS)
        ).order_by("name")
    )


def record_heartbeat(
    name: str, *, queue: str, concurrency: int, clusters: int, capacity: int
) -> bool:
    """This worker is alive and holds `clusters` (one UPDATE; an INSERT the first time).
    True when the row had to be made: the first time, or after the others forgot it."""
    values = {
        "queue": queue,
        "concurrency": concurrency,
        "clusters": clusters,
        "capacity": capacity,
        "heartbeat_at": Now(),
    }
    if WatchWorker.objects.filter(name=name).update(**values):
        return False
    WatchWorker.objects.update_or_create(
        name=name, defaults=values, create_defaults={**values, "started_at": Now()}
    )
    return True


def forget_worker(name: str) -> None:
    """A worker that stops cleanly leaves at once: the others count without it right away."""
    WatchWorker.objects.filter(name=name).delete()


def forget_gone_workers(delete: Callable[[list[str]], None] | None = None) -> list[str]:
    """Forget the workers gone for FORGET_WORKER_AFTER, and delete their own queues from
    the broker with `delete` (`delete_worker_queues`; None: the rows only): a killed worker
    leaves its queue's binding and whatever was sent to it (a claim it never ran), which
    nothing else removes.

    Not at the takeover: a worker missing its heartbeats for WORKER_TTL_SECONDS may only be
    stalled (a database outage stops every heartbeat), and deleting the queue of a worker
    that is still there would leave it unreachable. An hour's silence is a worker gone; one
    that comes back all the same finds its row forgotten and declares its queue again
    (`WorkerKeeper`). The queues go first: if the broker does not answer, the rows stay and
    the next round tries again. A queue another row names (a new process under the same
    name) is kept. Returns the queues deleted."""
    gone = list(
        WatchWorker.objects.filter(heartbeat_at__lt=Now() - FORGET_WORKER_AFTER).values_list(
            "name", "queue"
        )
    )
    if not gone:
        return []
    names = [name for name, _ in gone]
    kept = set(WatchWorker.objects.exclude(name__in=names).values_list("queue", flat=True))
    queues = sorted({queue for _, queue in gone if queue and queue not in kept})
    if queues and delete is not None:
        delete(queues)
    WatchWorker.objects.filter(
        name__in=names, heartbeat_at__lt=Now() - FORGET_WORKER_AFTER
    ).delete()
    return queues


def _worker_queue_bindings(name: str) -> list[Any]:
    """A worker's queue as it is bound: by its keeper (`select_add`: the default exchange)
    and by a sender in another process that does not know it (Celery's missing-queue
    default: an exchange of the queue's own name)."""
    from kombu import Exchange, Queue

    from dashboard.celery import app

    return [
        Queue(name, app.amqp.queues.default_exchange, routing_key=name),
        Queue(name, Exchange(name), routing_key=name),
    ]


def delete_worker_queues(names: list[str]) -> None:
    """Delete these workers' queues from the broker: their bindings and their messages."""
    from dashboard.celery import app

    with app.connection_for_write() as conn:
        channel = conn.default_channel
        for name in names:
            for queue in _worker_queue_bindings(name):
                bound = queue(channel)
                # Declared here first: a channel deletes only the bindings it knows.
                bound.declare()
                bound.purge()
                bound.delete()
            logger.info("watch workers: deleted the queue %s of a worker gone", name)


def declare_worker_queue(name: str) -> None:
    """Bind this worker's queue again (after the others forgot the worker and deleted it)."""
    from dashboard.celery import app

    # The keeper's own (consumed, `select_add`); the same binding if it is not known here.
    queue = app.amqp.queues.get(name) or _worker_queue_bindings(name)[0]
    with app.connection_for_write() as conn:
        queue(conn.default_channel).declare()


class LocalWatchers:
    """The watchers this process runs, and the clusters it claimed whose task has not
    started yet. Shared by the keeper thread and the pool's task threads."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._running: dict[int, threading.Event] = {}
        self._claims: dict[int, tuple[ExpiringLock, float]] = {}

    def add_claim(self, cluster_id: int, lock: ExpiringLock) -> None:
        with self._mutex:
            self._claims[cluster_id] = (lock, time.monotonic())

    def take_claim(self, cluster_id: int) -> ExpiringLock | None:
        """The lock the keeper took for this cluster, handed to the task that runs it."""
        with self._mutex:
            claim = self._claims.pop(cluster_id, None)
        return claim[0] if claim is not None else None

    def expired_claims(self, older_than: float) -> list[ExpiringLock]:
        with self._mutex:
            expired = [cid for cid, (_, at) in self._claims.items() if at < older_than]
            return [self._claims.pop(cid)[0] for cid in expired]

    def started(self, cluster_id: int, stop: threading.Event) -> None:
        with self._mutex:
            self._running[cluster_id] = stop

    def finished(self, cluster_id: int, stop: threading.Event) -> None:
        with self._mutex:
            if self._running.get(cluster_id) is stop:
                del self._running[cluster_id]

    def running(self) -> set[int]:
        with self._mutex:
            return set(self._running)

    def held(self) -> set[int]:
        with self._mutex:
            return set(self._running) | set(self._claims)

    def hand_off(self, cluster_id: int) -> bool:
        """Stop this one watcher (it flushes and releases its lock on the way out)."""
        with self._mutex:
            stop = self._running.get(cluster_id)
        if stop is None:
            return False
        stop.set()
        return True


LOCAL = LocalWatchers()


@dataclass
class WorkerKeeper:
    """One watch worker's share of the clusters (see the module doc)."""

    name: str
    queue: str
    concurrency: int
    # Starts the watcher of a claimed cluster in this worker (sends the task to `queue`).
    start: Callable[[int], None]
    local: LocalWatchers = LOCAL
    tick_seconds: float = KEEPER_TICK_SECONDS
    # Binds `queue` on the broker again, when this worker's row had been forgotten (its
    # queue then deleted by the others, `forget_gone_workers`); None: nothing to bind.
    declare: Callable[[], None] | None = None
    # Deletes workers' queues from the broker (`delete_worker_queues`): those of workers
    # gone, and this one's own as it leaves. None: the broker is left as it is.
    delete_queues: Callable[[list[str]], None] | None = None

    def __post_init__(self) -> None:
        self.capacity: int | None = None  # unknown until the first tick has read the fleet
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._trouble = False
        self._next_forget = 0.0
        self._heartbeats = 0

    def begin(self) -> None:
        self._thread = threading.Thread(target=self._run, name="watch-keeper", daemon=True)
        self._thread.start()

    def end(self) -> None:
        """The worker is shutting down: leave the fleet first, so the others count without
        this worker when its watchers release their locks a moment later."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        # Claims whose task will not run now: their clusters are free for the others.
        for lock in self.local.expired_claims(math.inf):
            lock.release()
        try:
            forget_worker(self.name)
        except DatabaseError:
            logger.warning("watch worker %s: could not leave the fleet", self.name)
        finally:
            connection.close()
        if self.delete_queues is not None:
            # Nothing is sent to it from now on (its row is gone, its claims released):
            # its queue would stay on the broker with nobody to read it.
            try:
                self.delete_queues([self.queue])
            except Exception as exc:  # the broker's errors: the queue stays, as before
                logger.warning("watch worker %s: could not delete its queue (%s)", self.name, exc)

    def may_take(self) -> bool:
        """Whether a watch task not claimed by this keeper may run here (ensure_watchers',
        or one sent by hand): only while this worker is under its capacity."""
        return self.capacity is None or len(self.local.held()) < self.capacity

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                self.tick()
                self._stop.wait(max(0.0, self.tick_seconds - (time.monotonic() - started)))
        finally:
            connection.close()

    def tick(self) -> None:
        """One round; an outage of the database or the lock's store is waited out (the
        watchers keep going meanwhile), and logged once."""
        try:
            self._tick()
        except Exception as exc:  # the database's or the cache's errors, or a bug here
            if not self._trouble:
                self._trouble = True
                logger.warning(
                    "watch worker %s: cannot keep its share (%s: %s); retrying",
                    self.name,
                    type(exc).__name__,
                    str(exc).splitlines()[0][:200] if str(exc) else "",
                )
            close_old_connections()
            return
        if self._trouble:
            self._trouble = False
            logger.info("watch worker %s: keeping its share again", self.name)

    def _tick(self) -> None:
        for lock in self.local.expired_claims(time.monotonic() - CLAIM_TIMEOUT_SECONDS):
            logger.warning("watch worker %s: claim of cluster %s lapsed", self.name, lock.name)
            lock.release()
        held = self.local.held()
        made = record_heartbeat(
            self.name,
            queue=self.queue,
            concurrency=self.concurrency,
            clusters=len(held),
            capacity=self.capacity or 0,
        )
        if made and self.declare is not None and self._heartbeats:
            # Not at the first heartbeat (the worker declared its queue as it started): the
            # row was forgotten meanwhile, and with it the queue may have been deleted.
            logger.warning(
                "watch worker %s: its row was forgotten; binding its queue again", self.name
            )
            self.declare()
        self._heartbeats += 1
        workers = live_workers()
        clusters = list(KubeCluster.objects.filter(enabled=True).values_list("id", flat=True))
        count = max(1, len(workers))
        self.capacity = capacity(len(clusters), count, self.concurrency)
        excess = len(held) - self.capacity
        if excess > 0:
            self._hand_off(excess, workers, len(clusters))
        elif excess < 0:
            self._claim(-excess, clusters, held)
        if time.monotonic() >= self._next_forget:
            self._next_forget = time.monotonic() + 600
            forget_gone_workers(self.delete_queues)

    def _hand_off(self, excess: int, workers: list[WatchWorker], clusters: int) -> None:
        # Only what another live worker has room for: a cluster handed to nobody would go
        # unwatched (their pools may be smaller than their share).
        room = sum(
            max(0, capacity(clusters, len(workers), worker.concurrency) - worker.clusters)
            for worker in workers
            if worker.name != self.name
        )
        running = sorted(self.local.running(), key=lambda cid: preference(self.name, cid))
        for cluster_id in running[: min(excess, room)]:
            if self.local.hand_off(cluster_id):
                logger.info(
                    "watch worker %s: handing cluster %s off (%d over its share of %d)",
                    self.name,
                    cluster_id,
                    excess,
                    self.capacity,
                )

    def _claim(self, room: int, clusters: Iterable[int], held: set[int]) -> None:
        candidates = [cid for cid in clusters if cid not in held]
        owners = watcher_lock_owners(candidates)
        free = sorted(
            (cid for cid in candidates if cid not in owners),
            key=lambda cid: preference(self.name, cid),
            reverse=True,
        )
        for cluster_id in free:
            if room <= 0:
                break
            lock = watcher_lock(cluster_id, f"{self.name}:{uuid.uuid4().hex[:8]}")
            if not lock.acquire():
                continue  # another worker was quicker
            self.local.add_claim(cluster_id, lock)
            try:
                self.start(cluster_id)
            except Exception:
                self.local.take_claim(cluster_id)
                lock.release()
                raise
            room -= 1
            logger.info("watch worker %s: claimed cluster %s", self.name, cluster_id)


# The keeper of this process, when it is a watch worker (dashboard.celery starts it).
KEEPER: WorkerKeeper | None = None


def may_take_unclaimed() -> bool:
    return KEEPER is None or KEEPER.may_take()


def join_fleet(worker: Any) -> WorkerKeeper | None:
    """At a Celery worker's start (`celeryd_after_setup`): a worker that consumes the
    `watch` queue with threads also consumes a queue of its own and gets a keeper (started
    once the worker is ready). Other workers, and prefork ones (whose tasks run in other
    processes, out of the keeper's sight), are left as they are."""
    global KEEPER
    from dashboard.celery import WATCH_QUEUE

    queues = worker.app.amqp.queues
    pool = getattr(worker.pool_cls, "__module__", str(worker.pool_cls))
    if WATCH_QUEUE not in queues.consume_from or "thread" not in pool:
        return None
    name = worker_name()
    queue = worker_queue(name)
    queues.select_add(queue)

    def start(cluster_id: int) -> None:
        from leases.tasks import watch_cluster

        watch_cluster.apply_async(args=(cluster_id,), queue=queue)

    KEEPER = WorkerKeeper(
        name=name,
        queue=queue,
        concurrency=int(worker.concurrency or 1),
        start=start,
        declare=lambda: declare_worker_queue(queue),
        delete_queues=delete_worker_queues,
    )
    logger.info("watch worker %s: consuming %s beside %s", name, queue, WATCH_QUEUE)
    return KEEPER


def start_keeping() -> None:
    if KEEPER is not None:
        KEEPER.begin()


def leave_fleet() -> None:
    if KEEPER is not None:
        KEEPER.end()


@dataclass(frozen=True, slots=True)
class FleetWorker:
    """A watch worker as the pages and /metrics show it."""

    name: str
    live: bool
    # Clusters whose lock this worker holds now (ids), from the lock's store.
    clusters: tuple[int, ...]
    capacity: int
    concurrency: int
    heartbeat_at: datetime
    started_at: datetime


@dataclass(frozen=True, slots=True)
class Fleet:
    """Who watches what: every worker heard of within the hour (live ones first) and the
    worker holding each enabled cluster's lock now."""

    workers: tuple[FleetWorker, ...]
    # Cluster id -> the worker part of its lock owner; clusters nobody watches are absent.
    watcher_of: dict[int, str]
    enabled: tuple[int, ...]

    @property
    def live(self) -> tuple[FleetWorker, ...]:
        return tuple(worker for worker in self.workers if worker.live)

    @property
    def share(self) -> int:
        return capacity(len(self.enabled), len(self.live)) if self.live else 0

    @property
    def unwatched(self) -> tuple[int, ...]:
        return tuple(cid for cid in self.enabled if cid not in self.watcher_of)


def fleet() -> Fleet:
    """Two queries and one round trip to the lock's store, whatever the number of clusters'
    leases: read at scrape time and by the watchers page."""
    enabled = tuple(KubeCluster.objects.filter(enabled=True).values_list("id", flat=True))
    watcher_of = {cid: owner_worker(owner) for cid, owner in watcher_lock_owners(enabled).items()}
    rows = WatchWorker.objects.filter(heartbeat_at__gte=Now() - FORGET_WORKER_AFTER).annotate(
        live=Case(
            When(heartbeat_at__gte=Now() - timedelta(seconds=WORKER_TTL_SECONDS), then=True),
            default=False,
            output_field=BooleanField(),
        )
    )
    held: dict[str, list[int]] = {}
    for cid, worker in sorted(watcher_of.items()):
        held.setdefault(worker, []).append(cid)
    workers = sorted(
        (
            FleetWorker(
                name=row.name,
                live=bool(row.live),
                clusters=tuple(held.get(row.name, ())),
                capacity=row.capacity,
                concurrency=row.concurrency,
                heartbeat_at=row.heartbeat_at,
                started_at=row.started_at,
            )
            for row in rows
        ),
        key=lambda worker: (not worker.live, worker.name),
    )
    return Fleet(workers=tuple(workers), watcher_of=watcher_of, enabled=enabled)
