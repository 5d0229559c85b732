"""The watch loop of one cluster: list, watch, resume, relist on 410, and keep the lock.

Two threads per watcher. The reader thread (the caller of `run`) lists and then reads the
watch stream line by line, handing observations to the ingestor. The housekeeping thread
flushes the ingestor twice a second, writes the watcher status, renews the lock, refreshes
LeaseCandidates and notices when the watcher must stop (lock lost, cluster disabled, worker
shutting down); it ends a blocked read by closing the stream.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import orjson
from django.db import DatabaseError, close_old_connections, connection
from django.db.models import F
from django.utils import timezone

from dashboard.encryption import secret_problem
from dashboard.locks import ExpiringLock
from leases import kube
from leases.ingest import LeaseIngestor, sync_candidates
from leases.models import KubeCluster
from leases.parse import lease_identity, parse_candidate, resource_version_of

logger = logging.getLogger(__name__)

# Set when the worker process shuts down: every watcher in it stops and releases its lock.
SHUTDOWN = threading.Event()

WATCH_TIMEOUT_SECONDS = 290
FLUSH_INTERVAL_SECONDS = 0.5
LOCK_RENEW_INTERVAL_SECONDS = 5.0
CANDIDATES_INTERVAL_SECONDS = 15.0
SETTINGS_CHECK_INTERVAL_SECONDS = 5.0


class WatchExpired(Exception):
    """The resourceVersion we resume from is gone: list again."""


@dataclass
class Backoff:
    """Exponential backoff with jitter; credentials problems wait longer."""

    base: float = 1.0
    maximum: float = 30.0
    auth_base: float = 5.0
    auth_maximum: float = 120.0
    failures: int = 0

    def next_delay(self, kind: str) -> float:
        self.failures += 1
        if kind in {"auth", "forbidden", "config"}:
            base, maximum = self.auth_base, self.auth_maximum
        else:
            base, maximum = self.base, self.maximum
        delay = min(maximum, base * 2 ** (self.failures - 1))
        return delay * random.uniform(0.8, 1.0)  # noqa: S311 - jitter, not security

    def reset(self) -> None:
        self.failures = 0


class LeaseWatcher:
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
    ) -> None:
        self.cluster_id = cluster_id
        self.owner = owner
        self.lock = lock
        self.stop = stop or threading.Event()
        self.watch_timeout_seconds = watch_timeout_seconds
        self.flush_interval = flush_interval
        self.candidates_interval = candidates_interval
        self.backoff = backoff or Backoff()
        self.resource_version = ""
        self.malformed_lines = 0
        self.unknown_events = 0
        self._stream: kube.WatchStream | None = None
        self._api: object | None = None
        self._events_since_status = 0
        self._status_at = time.monotonic()
        self.ingestor: LeaseIngestor | None = None
        self._watches_opened = 0
        # Why LeaseCandidates are missing ("forbidden", "not_served", ""), None before the
        # first look: a change is logged once, not at every refresh.
        self._candidates_problem: str | None = None
        # Worst event-to-commit delay seen by this watcher (the status row keeps the last).
        self.max_lag_seconds = 0.0

    # --- the reader thread -------------------------------------------------------------
    def run(self, seconds: float | None = None) -> None:
        """Watch until stopped (or for `seconds`); never raises for cluster-side problems."""
        timer = None
        if seconds is not None:
            timer = threading.Timer(seconds, self._request_stop)
            timer.daemon = True
            timer.start()
        self.ingestor = LeaseIngestor(self.cluster_id)
        KubeCluster.objects.filter(pk=self.cluster_id).update(watcher_id=self.owner[:200])
        housekeeping = threading.Thread(
            target=self._housekeeping, name=f"lease-housekeeping-{self.cluster_id}", daemon=True
        )
        housekeeping.start()
        try:
            self._watch_until_stopped()
        finally:
            if timer is not None:
                timer.cancel()
            self.stop.set()
            housekeeping.join(timeout=30)
            self._flush_and_report()
            KubeCluster.objects.filter(pk=self.cluster_id, watcher_id=self.owner[:200]).update(
                connected=False, events_per_second=0.0
            )

    def _watch_until_stopped(self) -> None:
        resource_version = ""
        while not self._stopping():
            try:
                api = self._connect()
                if not resource_version:
                    resource_version = self._relist(api)
                resource_version = self._stream_once(api, resource_version)
            except WatchExpired:
                logger.info("cluster %s: resourceVersion expired, listing again", self.cluster_id)
                resource_version = ""
            except kube.KubeError as error:
                if self._stopping():
                    break  # we closed the stream ourselves
                if error.kind == "gone":
                    resource_version = ""
                    continue
                if error.kind in {"auth", "forbidden", "tls", "config"}:
                    self._api = None  # re-read the cluster: someone may fix its kubeconfig
                delay = self.backoff.next_delay(error.kind)
                self._record_error(error.message)
                logger.warning("cluster %s: %s (retrying in %.0f s)", self.cluster_id, error, delay)
                self.stop.wait(delay)
            except Exception as exc:
                # A failure nobody foresaw (a value the HTTP client refuses, the database
                # going away): a watcher that ended here would leave its cluster unwatched
                # with nothing on the status page. Say so, back off, start over.
                if self._stopping():
                    break
                self._api = None
                close_old_connections()  # a broken connection is replaced, not reused
                delay = self.backoff.next_delay("unexpected")
                message = unexpected_error_text(exc)
                self._record_error(f"{message} Retrying in {delay:.0f} s.")
                # The traceback's frames, not the exception's text: http.client quotes the
                # header value it refuses, which is the token.
                logger.error(
                    "cluster %s: %s (retrying in %.0f s)\n%s",
                    self.cluster_id,
                    message,
                    delay,
                    "".join(traceback.format_tb(exc.__traceback__)),
                )
                self.stop.wait(delay)

    def _connect(self) -> object:
        if self._api is None:
            cluster = KubeCluster.objects.get(pk=self.cluster_id)
            problem = secret_problem(cluster.kubeconfig)
            if problem is not None:
                # A missing or wrong encryption key: say so on the row and back off like any
                # configuration error; never fall back to the stored text.
                raise kube.KubeError(f"The kubeconfig cannot be read: {problem}", kind="config")
            in_cluster = cluster.source == KubeCluster.Source.IN_CLUSTER
            if not in_cluster:
                # kube.connect refuses an unsafe kubeconfig too; this read keeps the
                # warnings of rows stored before the check existed on the watchers page.
                checked = kube.parse_kubeconfig(cluster.kubeconfig, cluster.context)
                warning = " ".join(checked.warnings)
                if warning != cluster.config_warning:
                    KubeCluster.objects.filter(pk=self.cluster_id).update(config_warning=warning)
            self._api = kube.connect(
                kube.ClusterConfig(
                    in_cluster=in_cluster, kubeconfig=cluster.kubeconfig, context=cluster.context
                )
            )
        return self._api

    def _relist(self, api: object) -> str:
        assert self.ingestor is not None
        listed: set[tuple[str, str]] = set()
        resource_version = ""
        for page in kube.iter_all_leases(api):  # type: ignore[arg-type]
            for item in page.items:
                identity = lease_identity(item)
                if identity is not None and self.ingestor.observe(item):
                    listed.add(identity.key)
            resource_version = page.resource_version
        gone = self.ingestor.reconcile(listed)
        # The server answers again: the next break starts from the shortest delay, not from
        # where an outage left the backoff.
        self.backoff.reset()
        KubeCluster.objects.filter(pk=self.cluster_id).update(
            relists_total=F("relists_total") + 1, last_list_at=timezone.now()
        )
        logger.info(
            "cluster %s: listed %d leases (%d gone) at resourceVersion %s",
            self.cluster_id,
            len(listed),
            gone,
            resource_version,
        )
        self.resource_version = resource_version
        return resource_version

    def _stream_once(self, api: object, resource_version: str) -> str:
        assert self.ingestor is not None
        ingestor = self.ingestor
        stream = kube.open_lease_watch(api, resource_version, self.watch_timeout_seconds)  # type: ignore[arg-type]
        self._stream = stream
        self._watches_opened += 1
        # Every watch after the first is a reconnect: after the server's timeout, a dropped
        # connection or an outage alike.
        reconnected = self._watches_opened > 1
        KubeCluster.objects.filter(pk=self.cluster_id).update(
            connected=True,
            connected_since=timezone.now(),
            reconnects_total=F("reconnects_total") + int(reconnected),
            # The watch works again: an old error would read as a current one. The log keeps it.
            last_error="",
            last_error_at=None,
        )
        delivered = False
        try:
            for line in stream.lines():
                if self.stop.is_set():
                    break
                if not delivered:
                    # A stream that delivers is a server that works: a break after it waits
                    # the shortest delay.
                    delivered = True
                    self.backoff.reset()
                try:
                    event = orjson.loads(line)
                except orjson.JSONDecodeError:
                    self._malformed(line)
                    continue
                if not isinstance(event, dict):
                    self._malformed(line)
                    continue
                kind, obj = event.get("type"), event.get("object")
                if kind in ("ADDED", "MODIFIED"):
                    if not ingestor.observe(obj):  # type: ignore[arg-type]
                        self._malformed(line)
                elif kind == "DELETED":
                    identity = lease_identity(obj)
                    if identity is not None:
                        ingestor.observe_deleted(identity.key)
                elif kind == "BOOKMARK":
                    ingestor.count_event()
                elif kind == "ERROR":
                    status = obj if isinstance(obj, dict) else {}
                    if status.get("code") == 410:
                        raise WatchExpired
                    raise kube.status_error(status, "watch leases", kube.server_address(api))  # type: ignore[arg-type]
                else:
                    self.unknown_events += 1
                    if self.unknown_events <= 3:
                        logger.warning(
                            "cluster %s: ignoring watch event of unknown type %r",
                            self.cluster_id,
                            str(kind)[:40],
                        )
                    continue
                resource_version = resource_version_of(obj) or resource_version
                self.resource_version = resource_version
        finally:
            self._stream = None
            stream.close()
        return resource_version

    def _malformed(self, line: bytes) -> None:
        self.malformed_lines += 1
        if self.malformed_lines <= 3:
            logger.warning(
                "cluster %s: skipping a malformed watch line (%d bytes)", self.cluster_id, len(line)
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
                if self.stop.wait(wait):
                    self._request_stop()  # a blocked read ends now, not at the next event
                    break
                flushed_at = time.monotonic()
                self._flush_and_report()
                now = time.monotonic()
                if self.lock is not None and now >= next_renew:
                    if not self.lock.renew():
                        logger.warning("cluster %s: watcher lock lost; stopping", self.cluster_id)
                        self._request_stop()
                        break
                    next_renew = now + LOCK_RENEW_INTERVAL_SECONDS
                if now >= next_settings:
                    next_settings = now + SETTINGS_CHECK_INTERVAL_SECONDS
                    if not KubeCluster.objects.filter(pk=self.cluster_id, enabled=True).exists():
                        logger.info("cluster %s: disabled or removed; stopping", self.cluster_id)
                        self._request_stop()
                        break
                if self._api is not None and now >= next_candidates:
                    next_candidates = now + self.candidates_interval
                    self._refresh_candidates()
                if SHUTDOWN.is_set():
                    self._request_stop()
                    break
        finally:
            connection.close()

    def _flush_and_report(self) -> None:
        if self.ingestor is None:
            return
        # Taken before the flush: every event up to this resourceVersion is in the batch
        # being written, so the status never claims more than what is committed.
        committed_version = self.resource_version
        try:
            result = self.ingestor.flush()
        except DatabaseError as exc:
            close_old_connections()
            logger.warning(
                "cluster %s: could not write leases (%s); will retry", self.cluster_id, exc
            )
            return
        except Exception as exc:
            # The housekeeping thread must outlive a bug in one flush: it also renews the
            # lock and notices a stop, and without it nothing would be written again.
            message = unexpected_error_text(exc)
            self._record_error(f"Writing leases failed: {message}", disconnected=False)
            logger.error(
                "cluster %s: %s\n%s",
                self.cluster_id,
                message,
                "".join(traceback.format_tb(exc.__traceback__)),
            )
            return
        now = time.monotonic()
        self._events_since_status += result.events
        elapsed = now - self._status_at
        updates: dict[str, object] = {"events_total": F("events_total") + result.events}
        wrote = result.leases_written or result.deletions_written or result.transitions_written
        if self._stream is not None or wrote:
            # A flush vouches for the data only while a watch is open (or when it wrote what
            # a list found): stamped while disconnected, or before any data, the page would
            # call old data, or none, "0 s old".
            updates["last_flush_at"] = timezone.now()
        if result.drained:
            updates["resource_version"] = committed_version[:64]
        if result.events:
            updates["last_event_at"] = timezone.now()
        skipped = result.objects_cleaned + result.leases_skipped
        if skipped:
            updates["skipped_objects_total"] = F("skipped_objects_total") + skipped
        if result.leases_written or result.deletions_written:
            updates["lag_seconds"] = round(result.lag_seconds, 3)
            self.max_lag_seconds = max(self.max_lag_seconds, result.lag_seconds)
        if elapsed >= 2.0:
            updates["events_per_second"] = round(self._events_since_status / elapsed, 1)
            self._events_since_status, self._status_at = 0, now
        try:
            KubeCluster.objects.filter(pk=self.cluster_id).update(**updates)
        except DatabaseError:
            close_old_connections()

    def _refresh_candidates(self) -> None:
        problem = ""
        try:
            api_version, items = kube.list_lease_candidates(self._api)  # type: ignore[arg-type]
        except kube.KubeError as error:
            api_version, items = "", []
            problem = "forbidden" if error.kind == "forbidden" else "error"
            self._candidates_changed(problem, str(error))
            if problem == "error":
                return  # a passing failure: keep what was last read
        else:
            if not api_version:
                problem = "not_served"
            self._candidates_changed(problem, "")
        observations = [obs for obs in map(parse_candidate, items) if obs is not None]
        cleaned = sum(obs.cleaned for obs in observations)
        try:
            sync_candidates(self.cluster_id, observations)
            KubeCluster.objects.filter(pk=self.cluster_id).update(
                candidates_api=api_version,
                candidates_problem=problem,
                skipped_objects_total=F("skipped_objects_total") + cleaned,
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
        stream = self._stream
        if stream is not None:
            stream.close()  # unblocks the reader thread's read

    def _record_error(self, message: str, *, disconnected: bool = True) -> None:
        updates: dict[str, object] = {"last_error": message[:2000], "last_error_at": timezone.now()}
        if disconnected:
            updates["connected"] = False
        try:
            KubeCluster.objects.filter(pk=self.cluster_id).update(**updates)
        except DatabaseError:
            close_old_connections()


def unexpected_error_text(exc: BaseException) -> str:
    """An unforeseen failure in words, without the exception's own text (it may quote a
    credential), but with where it happened so the log's traceback is easy to find."""
    if isinstance(exc, DatabaseError):
        # Database messages carry no credentials; the first line says what went wrong.
        detail = (str(exc).strip().splitlines() or [""])[0][:200]
        return f"A database call of the watcher failed ({type(exc).__name__}: {detail})."
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    if frames:
        last = frames[-1]
        where = f" in {'/'.join(Path(last.filename).parts[-2:])}, {last.name}()"
    return (
        f"The watcher failed unexpectedly ({type(exc).__name__}{where}); the worker log has "
        "the traceback."
    )
