"""The probe of one cluster's API server: a silent stream is not a quiet cluster.

A frozen kube-apiserver (SIGSTOP, a dead etcd behind it, a stuck proxy) keeps its TCP
connections open and sends nothing: the watch streams look like a quiet cluster. So once
a second (WATCH_PROBE_SECONDS) the probe thread asks the server a tiny question with a
short timeout (kube.probe_revision: a one-lease list, a quorum read) and hands each
resource's freshness the answer (leases.freshness: the stream proves it once it has
delivered that far).

- The server does not answer (a timeout, a refused connection): the streams that have
  proved nothing for a while are closed, so their readers reconnect with timeouts instead
  of waiting on a dead connection; the data's as-of moment stops, and the pages call it
  stale within WATCH_STALE_SECONDS.
- The server answers again: readers waiting out a backoff retry at once.
- A stream that has not caught up with a probe for QUIET_CHECK_AFTER seconds is checked:
  a one-second watch from its last resourceVersion (kube.changes_since). No change in it:
  the stream missed nothing (a quiet resource, Nodes most of the time). Changes the stream
  has not delivered: the stream is stuck while the server answers, and it is closed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connection
from django.utils import timezone

from leases import kube
from leases.freshness import revision
from leases.watch_loop import ResourceReader

logger = logging.getLogger(__name__)

# A stream that has not caught up with a probe this long is checked with a short watch.
QUIET_CHECK_AFTER_SECONDS = 3.0
# At most one such check per resource in this long: a check is a watch request.
QUIET_CHECK_INTERVAL_SECONDS = 5.0
# Failed probes in a row after which the streams are closed and reconnected: one failure
# may be a hiccup, two (about 2 s of no answer on top of the timeouts) is a server that
# does not answer.
FAILURES_BEFORE_RECONNECT = 2
# The failures that mean the server does not answer at all (a 5xx, a 429 or a 403 is an
# answer: the streams may still be fine, and their readers judge them).
_NOT_ANSWERING = frozenset({"timeout", "connection"})


class ServerProbe:
    """Probes one cluster's API server while its watcher runs (see the module doc)."""

    def __init__(
        self,
        cluster_id: int,
        readers: Callable[[], Sequence[ResourceReader | None]],
        api: Callable[[], Any | None],
        stop: threading.Event,
        *,
        interval: float,
        timeout: float = kube.PROBE_TIMEOUT_SECONDS,
        quiet_check_after: float = QUIET_CHECK_AFTER_SECONDS,
    ) -> None:
        self.cluster_id = cluster_id
        self._readers = readers
        self._api = api
        self._stop = stop
        self.interval = interval
        self.timeout = timeout
        self.quiet_check_after = quiet_check_after
        self.failures = 0
        self.probes = 0
        # When the server last answered a probe (time.monotonic()), None: never.
        self.answered_at: float | None = None
        # The last probe was answered with a refusal (403, 5xx, 429), not the revision.
        self._refused = False
        self.quiet_checks = 0
        self.stuck_streams = 0
        self._last_check: dict[str, float] = {}

    def run(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                self.probe_once()
        finally:
            connection.close()  # this thread never queries, but a helper might have

    def probe_once(self) -> None:
        api = self._api()
        if api is None:
            return  # not connected yet: the readers are still building the client
        readers = [reader for reader in self._readers() if reader is not None]
        asked_at = timezone.now()
        try:
            server_revision = kube.probe_revision(api, self.timeout)
        except kube.KubeError as error:
            self._failed(error, readers)
            return
        except Exception:
            # A bug here must not end the probe: the data then simply stops being proved.
            logger.exception(
                "cluster %s: the API server probe failed unexpectedly", self.cluster_id
            )
            return
        self.probes += 1
        if self._refused:
            self._refused = False
            for reader in readers:
                reader.retry_now()  # refused a moment ago, served now: the readers too
        self._answered(readers)
        for reader in readers:
            reader.resource.freshness.probed(asked_at, server_revision)
        for reader in readers:
            if self._stop.is_set():
                return
            self._check_if_quiet(api, reader)

    def _failed(self, error: kube.KubeError, readers: list[ResourceReader]) -> None:
        if error.kind not in _NOT_ANSWERING:
            # An answer all the same (a 403 of a server still loading its roles, a 5xx, a
            # 429): the process is back, so readers waiting out a backoff try now, and again
            # once a probe gets through.
            self._answered(readers)
            self._refused = True
            return
        self.failures += 1
        if self.failures == 1:
            logger.warning(
                "cluster %s: the API server did not answer a probe: %s", self.cluster_id, error
            )
        if self.failures < FAILURES_BEFORE_RECONNECT:
            return
        for reader in readers:
            if reader.watching:
                if self.failures == FAILURES_BEFORE_RECONNECT:
                    logger.warning(
                        "cluster %s: closing the %s watch: the API server does not answer",
                        self.cluster_id,
                        reader.resource.plural,
                    )
                reader.close_stream()

    def _answered(self, readers: list[ResourceReader]) -> None:
        self.answered_at = time.monotonic()
        if not self.failures:
            return
        logger.info(
            "cluster %s: the API server answers again after %d failed probes",
            self.cluster_id,
            self.failures,
        )
        self.failures = 0
        for reader in readers:
            reader.retry_now()  # no backoff left to wait out: the server is back

    def _check_if_quiet(self, api: Any, reader: ResourceReader) -> None:
        freshness = reader.resource.freshness
        if not reader.watching or freshness.unproved_for() < self.quiet_check_after:
            return
        plural = reader.resource.plural
        now = time.monotonic()
        if now - self._last_check.get(plural, -1e9) < QUIET_CHECK_INTERVAL_SECONDS:
            return
        self._last_check[plural] = now
        since = freshness.delivered
        if revision(since) is None:
            return
        asked_at = timezone.now()
        self.quiet_checks += 1
        try:
            events = kube.changes_since(
                api, plural, since, seconds=1, deadline=time.monotonic() + 1 + 2 * self.timeout
            )
        except kube.KubeError as error:
            if error.kind == "gone":
                # The stream's version is no longer kept: resuming from it would fail too.
                # Closed, its reader resumes, is told 410 and lists again.
                reader.close_stream()
            return
        changed = [revision(version) for kind, version in events if kind != "BOOKMARK"]
        newest = max((number for number in changed if number is not None), default=None)
        if newest is None:
            freshness.proved_quiet(asked_at, since)
            return
        delivered = freshness.delivered_revision
        if delivered is not None and delivered >= newest:
            return  # the stream delivered them meanwhile: it is only busy
        self.stuck_streams += 1
        logger.warning(
            "cluster %s: the %s watch has not delivered changes the API server has "
            "(resourceVersion %s, the stream is at %s): reconnecting it",
            self.cluster_id,
            plural,
            newest,
            delivered,
        )
        reader.close_stream()
