"""The watcher of one cluster: its Leases and its Nodes, one lock, one worker, one
database connection.

One reader thread per resource (leases.watch_loop: list, watch, resume, relist on 410,
backoff), one probe thread (leases.watch_probe: is the server answering, is each stream
current?) and one housekeeping thread. The caller of `run` reads Leases; a second thread
reads Nodes. The housekeeping thread flushes both ingestors twice a second and writes their
status and as-of moments in one UPDATE, renews the lock, refreshes LeaseCandidates and
notices when the watcher must stop (lock lost, cluster disabled, worker shutting down); it
ends blocked reads by closing the streams. A resource that fails (a 403 on nodes, say)
backs off alone: the other keeps being read.

The housekeeping thread is the only one that talks to the database while the cluster is
watched (leases.watch_database): the readers hand it their few calls, and the caller gives
up the connection it set the watcher up with. A watched cluster holds one connection, so a
small PostgreSQL (100 connections) serves 50 clusters and more.

The housekeeping thread outlives its own dependencies: a database or Redis outage is
logged once and waited out (every call is retried on the next tick), never an uncaught
exception that would leave the readers' streams open with nobody to stop them.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
import traceback
from typing import Any

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection
from django.db.models import F

from dashboard.encryption import secret_problem
from dashboard.locks import ExpiringLock
from leases import kube
from leases.egress_status import server_trusted
from leases.ingest import LeaseIngestor, sync_candidates
from leases.models import KubeCluster
from leases.node_ingest import NodeIngestor
from leases.node_parse import node_name_of
from leases.parse import lease_identity, parse_candidate
from leases.watch_database import DatabaseOwner, OwnedStatus
from leases.watch_loop import (
    STREAM_PROVED_SECONDS,
    Backoff,
    ResourceReader,
    WatchedResource,
    WatchExpired,
    unexpected_error_text,
)
from leases.watch_probe import ServerProbe
from leases.watch_status import (
    Added,
    LeaseStatus,
    NodeStatus,
    ResourceStatus,
    write_flush_status,
)

__all__ = ["SHUTDOWN", "Backoff", "LeaseWatcher", "WatchExpired", "unexpected_error_text"]

logger = logging.getLogger(__name__)

# Set when the worker process shuts down: every watcher in it stops and releases its lock.
SHUTDOWN = threading.Event()

WATCH_TIMEOUT_SECONDS = 290
FLUSH_INTERVAL_SECONDS = 0.5
LOCK_RENEW_INTERVAL_SECONDS = 2.0
CANDIDATES_INTERVAL_SECONDS = 15.0
SETTINGS_CHECK_INTERVAL_SECONDS = 5.0
# The housekeeping thread waits for the next flush in slices this long: work a reader hands
# it ends a wait at once, and a stop set from outside (a handoff, a signal) is seen within one.
STOP_CHECK_SECONDS = 0.1
# While the lock's store does not answer, renewals are tried at every tick: once it is
# back, the lock is regained before another worker's start request can take it.


def _freeze_long_lived_objects() -> None:
    """Take what the process holds now out of the cyclic collector's full passes.

    A watcher runs as long as its worker: Django, the Kubernetes SDK and the known state
    (about 200,000 objects) stay alive as long as it does, yet every full collection walks
    them all. Measured at 1,500 events/s: about 130 ms per full collection, one every 10-20
    s, over a core share of about 3 %. Garbage cycles present now are collected first, so
    nothing unreachable is kept; objects freed later by reference counting are freed as
    before, and `run` unfreezes when it ends, so cycles that became garbage meanwhile are
    collected then.
    """
    gc.collect()
    gc.freeze()


def _lease_key(obj: Any) -> tuple[str, str] | None:
    identity = lease_identity(obj)
    return identity.key if identity is not None else None


class LeaseWatcher:
    """Watches one cluster's Leases and Nodes while its lock is held (see module doc)."""

    def __init__(
        self,
        cluster_id: int,
        *,
        owner: str,
        lock: ExpiringLock | None = None,
        stop: threading.Event | None = None,
        watch_timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
        flush_interval: float = FLUSH_INTERVAL_SECONDS,
        candidates_interval: float = CANDIDATES_INTERVAL_SECONDS,
        backoff: Backoff | None = None,
        stream_proved_seconds: float = STREAM_PROVED_SECONDS,
        probe_interval: float | None = None,
    ) -> None:
        self.cluster_id = cluster_id
        self.owner = owner
        self.lock = lock
        self.stop = stop or threading.Event()
        self.watch_timeout_seconds = watch_timeout_seconds
        self.flush_interval = flush_interval
        self.candidates_interval = candidates_interval
        self.backoff = backoff or Backoff()
        self.stream_proved_seconds = stream_proved_seconds
        self.probe = ServerProbe(
            cluster_id,
            readers=lambda: (self.leases, self.nodes),
            api=lambda: self._api,
            stop=self.stop,
            interval=settings.WATCH_PROBE_SECONDS if probe_interval is None else probe_interval,
        )
        # Since when the lock's store has not answered (time.monotonic()), None: it does.
        self._lock_trouble_since: float | None = None
        # Since when the database has failed the housekeeping's own reads, None: it works.
        self._database_trouble_since: float | None = None
        self._api: object | None = None
        self._api_lock = threading.Lock()
        # The housekeeping thread runs every database call while the cluster is watched.
        self.database = DatabaseOwner()
        # Set by `run` once the readers have ended: the housekeeping thread then writes the
        # last flush and status, and gives up the connection.
        self._readers_done = threading.Event()
        self.lease_status = LeaseStatus(cluster_id, owner)
        self.node_status = NodeStatus(cluster_id, owner)
        self.leases: ResourceReader | None = None
        self.nodes: ResourceReader | None = None
        # Why LeaseCandidates are missing ("forbidden", "not_served", "error", ""), None
        # before the first look: a change is logged once, not at every refresh.
        self._candidates_problem: str | None = None
        self._candidates_cut = 0  # how many the latest list left out, logged when it changes

    # What tests and the benchmark read of the Lease watch.
    @property
    def malformed_lines(self) -> int:
        return self.leases.malformed_lines if self.leases else 0

    @property
    def unknown_events(self) -> int:
        return self.leases.unknown_events if self.leases else 0

    @property
    def max_lag_seconds(self) -> float:
        return self.lease_status.max_lag_seconds

    @max_lag_seconds.setter
    def max_lag_seconds(self, value: float) -> None:
        self.lease_status.max_lag_seconds = value

    def run(self, seconds: float | None = None) -> None:
        """Watch until stopped (or for `seconds`); never raises for cluster-side problems."""
        timer = None
        if seconds is not None:
            timer = threading.Timer(seconds, self._request_stop)
            timer.daemon = True
            timer.start()
        self.leases = self._reader(
            WatchedResource(
                plural="leases",
                list_pages=kube.iter_all_leases,
                open_watch=kube.open_lease_watch,
                key_of=_lease_key,
                ingestor=LeaseIngestor(self.cluster_id),
                status=OwnedStatus(self.lease_status, self.database),
            ),
            self.backoff,
        )
        self.nodes = self._reader(
            WatchedResource(
                plural="nodes",
                list_pages=kube.iter_all_nodes,
                open_watch=kube.open_node_watch,
                key_of=node_name_of,
                ingestor=NodeIngestor(self.cluster_id),
                status=OwnedStatus(self.node_status, self.database),
                reconnect_on=frozenset({"auth", "tls", "config"}),
            ),
            self.backoff.fresh(),
        )
        KubeCluster.objects.filter(pk=self.cluster_id).update(watcher_id=self.owner[:200])
        _freeze_long_lived_objects()
        if not connection.in_atomic_block:
            # The set-up is done: from here the housekeeping thread's connection is the
            # cluster's only one (the caller's next query, after `run`, opens it again).
            connection.close()
        housekeeping = threading.Thread(
            target=self._housekeeping, name=f"watch-housekeeping-{self.cluster_id}", daemon=True
        )
        node_reader = threading.Thread(
            target=self._read_in_thread,
            args=(self.nodes,),
            name=f"watch-nodes-{self.cluster_id}",
            daemon=True,
        )
        prober = threading.Thread(
            target=self.probe.run, name=f"watch-probe-{self.cluster_id}", daemon=True
        )
        housekeeping.start()
        # Named before any reader starts: none of their calls may run in their own thread.
        self.database.own(housekeeping)
        node_reader.start()
        prober.start()
        try:
            self.leases.run()
        finally:
            if timer is not None:
                timer.cancel()
            self._request_stop()
            # The housekeeping thread still runs what the readers hand it while they stop.
            node_reader.join(timeout=30)
            prober.join(timeout=30)
            self._readers_done.set()
            # It writes the last flush and the stopped status, then closes its connection.
            housekeeping.join(timeout=30)
            self._close_api()
            # This watcher's own objects (it and its readers refer to each other) become
            # garbage now: frozen, a cycle would never be collected, and a worker that runs
            # watcher after watcher would keep every one's known state.
            gc.unfreeze()

    def _reader(self, resource: WatchedResource, backoff: Backoff) -> ResourceReader:
        return ResourceReader(
            self.cluster_id,
            resource,
            connect=self._connect,
            forget_connection=self._forget_connection,
            stop=self.stop,
            stopping=self._stopping,
            backoff=backoff,
            watch_timeout_seconds=self.watch_timeout_seconds,
            stream_proved_seconds=self.stream_proved_seconds,
            server_answered_at=lambda: self.probe.answered_at,
        )

    @staticmethod
    def _read_in_thread(reader: ResourceReader) -> None:
        try:
            reader.run()
        finally:
            connection.close()  # this thread's own database connection

    def _connect(self) -> object:
        with self._api_lock:
            if self._api is None:
                # The cluster's row is read by the connection's owner; the client is built
                # here, in the reader (it may resolve the server's name).
                self._api = kube.connect(self.database.call(self._cluster_config))
            return self._api

    def _close_api(self) -> None:
        """Close the API client's pooled connections once its readers are done. A watcher
        may stop in a worker that goes on (handed off to another worker, its lock lost):
        its streams' sockets must not stay open until the collector finds them, each one a
        watch the API server still serves."""
        with self._api_lock:
            api, self._api = self._api, None
        close = getattr(api, "close", None)
        if close is None:
            return
        try:
            close()
        except Exception:
            logger.debug(
                "cluster %s: closing the API client failed", self.cluster_id, exc_info=True
            )

    def _forget_connection(self) -> None:
        with self._api_lock:
            self._api = None

    def _cluster_config(self) -> kube.ClusterConfig:
        """How to reach the cluster, from its row (a database call: run by the owner)."""
        cluster = KubeCluster.objects.get(pk=self.cluster_id)
        problem = secret_problem(cluster.kubeconfig)
        if problem is not None:
            # A missing or wrong encryption key: say so on the row and back off like any
            # configuration error; never fall back to the stored text.
            raise kube.KubeError(f"The kubeconfig cannot be read: {problem}", kind="config")
        in_cluster = cluster.source == KubeCluster.Source.IN_CLUSTER
        if not in_cluster:
            # kube.connect refuses an unsafe kubeconfig too; this read keeps the warnings
            # of rows stored before the check existed on the watchers page.
            checked = kube.parse_kubeconfig(cluster.kubeconfig, cluster.context)
            warning = " ".join(checked.warnings)
            if warning != cluster.config_warning:
                KubeCluster.objects.filter(pk=self.cluster_id).update(config_warning=warning)
        return kube.ClusterConfig(
            in_cluster=in_cluster,
            kubeconfig=cluster.kubeconfig,
            context=cluster.context,
            nks_api_address=cluster.nks_api_address,
        )

    # --- the housekeeping thread -------------------------------------------------------
    def _housekeeping(self) -> None:
        next_renew = time.monotonic() + LOCK_RENEW_INTERVAL_SECONDS
        next_candidates = time.monotonic()
        next_settings = time.monotonic() + SETTINGS_CHECK_INTERVAL_SECONDS
        flushed_at = time.monotonic()
        try:
            while True:
                # Under load a flush takes longer than the interval: start the next one at
                # once, so rows wait for at most about two flushes.
                wait = max(0.0, self.flush_interval - (time.monotonic() - flushed_at))
                self.database.wait(min(wait, STOP_CHECK_SECONDS))
                self.database.run_pending()
                if self.stop.is_set() or SHUTDOWN.is_set():
                    self._request_stop()  # blocked reads end now, not at their next event
                    break
                if time.monotonic() - flushed_at < self.flush_interval:
                    continue
                flushed_at = time.monotonic()
                self._flush_and_report()
                now = time.monotonic()
                if self.lock is not None and (now >= next_renew or self._lock_trouble_since):
                    if not self._renew_lock():
                        logger.warning("cluster %s: watcher lock lost; stopping", self.cluster_id)
                        self._request_stop()
                        break
                    next_renew = now + LOCK_RENEW_INTERVAL_SECONDS
                if now >= next_settings:
                    next_settings = now + SETTINGS_CHECK_INTERVAL_SECONDS
                    if not self._still_enabled():
                        logger.info("cluster %s: disabled or removed; stopping", self.cluster_id)
                        self._request_stop()
                        break
                if self._api is not None and now >= next_candidates:
                    next_candidates = now + self.candidates_interval
                    self._refresh_candidates()
        except Exception:
            # Nothing above should raise; if something does, the readers must not be left
            # streaming with nobody to flush or stop them: the watcher stops (its task ends,
            # the lock is released, and a new watcher starts clean).
            logger.exception(
                "cluster %s: the housekeeping thread failed; stopping", self.cluster_id
            )
            self._request_stop()
        finally:
            self._finish()

    def _finish(self) -> None:
        """The owner's last work: what the stopping readers hand over, then the last flush
        and the stopped status, then its connection is closed."""
        try:
            while not self._readers_done.wait(0.02):
                self.database.run_pending()
            self.database.close()
            self._flush_and_report()
            self.lease_status.stopped()
            self.node_status.stopped()
        except Exception:
            logger.exception("cluster %s: the watcher's last writes failed", self.cluster_id)
        finally:
            connection.close()

    def _renew_lock(self) -> bool:
        """Renew (or regain) the lock; False only when another owner has it now.

        While the lock's store does not answer, nobody can take the lock either: keep
        watching and try again at every tick. Once the store answers, the lock is renewed,
        or regained if it expired meanwhile (a Redis restart loses every key), or found to be
        another's: then the watcher stops, closing its streams first.
        """
        assert self.lock is not None
        try:
            kept = self.lock.renew() or self.lock.regain()
        except Exception as exc:  # the store's own errors: redis, or the database cache's
            if self._lock_trouble_since is None:
                self._lock_trouble_since = time.monotonic()
                logger.warning(
                    "cluster %s: the watcher lock cannot be renewed (%s: %s); still watching, "
                    "retrying",
                    self.cluster_id,
                    type(exc).__name__,
                    str(exc).splitlines()[0][:200] if str(exc) else "",
                )
            close_old_connections()
            return True
        if self._lock_trouble_since is not None:
            logger.info(
                "cluster %s: the lock's store answers again after %.0f s; %s",
                self.cluster_id,
                time.monotonic() - self._lock_trouble_since,
                "the lock is kept" if kept else "another worker has the lock",
            )
            self._lock_trouble_since = None
        return kept

    def _still_enabled(self) -> bool:
        """The cluster is still enabled; True while the database cannot say (keep going)."""
        try:
            enabled = KubeCluster.objects.filter(pk=self.cluster_id, enabled=True).exists()
        except DatabaseError as exc:
            close_old_connections()
            if self._database_trouble_since is None:
                self._database_trouble_since = time.monotonic()
                logger.warning(
                    "cluster %s: the database does not answer (%s); still watching, retrying",
                    self.cluster_id,
                    unexpected_error_text(exc),
                )
            return True
        if self._database_trouble_since is not None:
            logger.info(
                "cluster %s: the database answers again after %.0f s",
                self.cluster_id,
                time.monotonic() - self._database_trouble_since,
            )
            self._database_trouble_since = None
        return enabled

    def _flush_and_report(self) -> None:
        """Flush every resource's ingestor; their status lands in one UPDATE."""
        updates: dict[str, Any] = {}
        skipped = 0
        for reader in (self.leases, self.nodes):
            if reader is None:
                continue
            status: ResourceStatus = reader.resource.status
            # Taken before the flush: every event up to this resourceVersion is in the
            # batch being written, so the status never claims more than what is committed.
            committed_version = reader.resource_version
            watching = reader.watching
            as_of = reader.resource.freshness.as_of
            observed_since = reader.resource.freshness.observed_since
            try:
                result = reader.resource.ingestor.flush()
            except DatabaseError as exc:
                close_old_connections()
                # Once per outage, not twice a second: the batch stays and is written at the
                # first flush the database takes.
                if self._database_trouble_since is None:
                    self._database_trouble_since = time.monotonic()
                    logger.warning(
                        "cluster %s: could not write %s (%s); will retry",
                        self.cluster_id,
                        reader.resource.plural,
                        str(exc).strip().splitlines()[0][:200] if str(exc) else type(exc).__name__,
                    )
                continue
            except Exception as exc:
                # The housekeeping thread must outlive a bug in one flush: it also renews
                # the lock and notices a stop, and without it nothing would be written again.
                message = unexpected_error_text(exc)
                if reader is self.leases:
                    self.lease_status.failed(
                        f"Writing leases failed: {message}", kind="unexpected", disconnected=False
                    )
                else:
                    status.failed(f"Writing nodes failed: {message}", kind="unexpected")
                logger.error(
                    "cluster %s: %s\n%s",
                    self.cluster_id,
                    message,
                    "".join(traceback.format_tb(exc.__traceback__)),
                )
                continue
            updates.update(status.flushed(result, committed_version, watching, as_of))
            updates.update(status.observed(observed_since))
            skipped += status.skipped(result)
        if skipped:
            updates["skipped_objects_total"] = Added(skipped)
        write_flush_status(self.cluster_id, updates)

    def _refresh_candidates(self) -> None:
        if not server_trusted(self.cluster_id):
            return  # whether an NKS-given server answers is not shown before it is trusted
        # A reader may forget the connection meanwhile (a 401): read it once, here.
        api = self._api
        if api is None:
            return
        problem = ""
        try:
            api_version, items, cut = kube.list_lease_candidates(api)  # type: ignore[arg-type]
        except kube.KubeError as error:
            api_version, items, cut = "", [], []
            problem = "forbidden" if error.kind == "forbidden" else "error"
            self._candidates_changed(problem, str(error))
            if problem == "error":
                return  # a passing failure: keep what was last read
        else:
            if not api_version:
                problem = "not_served"
            self._candidates_changed(problem, "")
        if len(cut) != self._candidates_cut:
            self._candidates_cut = len(cut)
            logger.warning(
                "cluster %s: %d lease candidates over %d bytes left out",
                self.cluster_id,
                len(cut),
                kube.MAX_LEASE_BYTES,
            )
        observations = [obs for obs in map(parse_candidate, items) if obs is not None]
        cleaned = sum(obs.cleaned for obs in observations)
        try:
            sync_candidates(self.cluster_id, observations)
            KubeCluster.objects.filter(pk=self.cluster_id).update(
                candidates_api=api_version,
                candidates_problem=problem,
                skipped_objects_total=F("skipped_objects_total") + cleaned,
                # What the latest list left out (it is read again each time: not a total).
                candidates_cut=len(cut),
                candidates_last_cut=f"{cut[-1].namespace}/{cut[-1].name}"[:510] if cut else "",
                candidates_last_cut_bytes=cut[-1].size if cut else 0,
            )
        except DatabaseError:
            close_old_connections()

    def _candidates_changed(self, problem: str, detail: str) -> None:
        """Log why LeaseCandidates are missing once per change, not at every refresh."""
        if problem == self._candidates_problem:
            return
        previous, self._candidates_problem = self._candidates_problem, problem
        if problem == "forbidden":
            logger.warning("cluster %s: lease candidates forbidden: %s", self.cluster_id, detail)
        elif problem == "not_served":
            logger.info("cluster %s: the API server serves no lease candidates", self.cluster_id)
        elif problem == "error":
            logger.info("cluster %s: lease candidates unavailable: %s", self.cluster_id, detail)
        elif previous:
            logger.info("cluster %s: lease candidates are read again", self.cluster_id)

    # --- shared ------------------------------------------------------------------------
    def _stopping(self) -> bool:
        return self.stop.is_set() or SHUTDOWN.is_set()

    def _request_stop(self) -> None:
        self.stop.set()
        self.database.wake.set()  # the housekeeping thread sees the stop at once
        for reader in (self.leases, self.nodes):
            if reader is not None:
                reader.close_stream()  # unblocks that reader's read
