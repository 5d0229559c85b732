"""The process faults of the fake kube-apiserver, for fault campaigns: a frozen process (a
stall), watch streams that stay stuck while everything else answers, streams cut mid-line,
a storm of `410 Gone`, slow list pages.

Handler threads wait here, on one condition, while tests flip the faults from their own
thread: every method is thread-safe. A killed (or stopped) server `abandon`s whatever is
waiting, so a held request never gets an answer and never changes the store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

# How often a held thread looks again at its client (gone: it is freed) and at the server.
_POLL_SECONDS = 0.25


class ServerKilled(ConnectionAbortedError):
    """Raised in a handler thread held by a fault when the server is killed or stopped: the
    process it stood for is gone, so the request gets no answer and changes nothing."""


class WatchStreamControl:
    """The faults of one open watch stream (registered with `Faults` while it is open)."""

    __slots__ = ("cut", "plural", "stuck")

    def __init__(self, plural: str) -> None:
        self.plural = plural
        self.stuck = False  # stall_watch_streams: write nothing until unstuck
        self.cut = False  # cut_stream_mid_line: the next line goes out half, then the end


class Faults:
    """What a FakeApiServer's handler threads consult before they answer or write."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._stalled = False
        # Bumped by abandon(): a thread held from before gives up (ServerKilled).
        self._generation = 0
        self._streams: set[WatchStreamControl] = set()
        self._gone_watches = 0
        self._list_page_seconds: float | None = None

    # --- set by the server's public controls --------------------------------------------

    @property
    def stalled(self) -> bool:
        with self._condition:
            return self._stalled

    def stall(self) -> None:
        with self._condition:
            self._stalled = True

    def resume(self) -> None:
        with self._condition:
            self._stalled = False
            self._condition.notify_all()

    def stick_streams(self, plural: str | None) -> int:
        """Mark the open streams (of `plural`, or all) stuck; how many were marked."""
        with self._condition:
            chosen = [s for s in self._streams if plural is None or s.plural == plural]
            for stream in chosen:
                stream.stuck = True
            return len(chosen)

    def unstick_streams(self) -> None:
        with self._condition:
            for stream in self._streams:
                stream.stuck = False
            self._condition.notify_all()

    def cut_streams(self) -> int:
        """Mark every open stream to cut its next line; how many were marked."""
        with self._condition:
            for stream in self._streams:
                stream.cut = True
            return len(self._streams)

    def add_gone_watches(self, count: int) -> None:
        with self._condition:
            self._gone_watches += count

    def set_list_page_seconds(self, seconds: float | None) -> None:
        with self._condition:
            self._list_page_seconds = seconds

    def abandon(self) -> None:
        """The process is gone (kill, stop): held threads give up, the stall is over (a
        restarted process is not frozen), and streams are forgotten (their connections die)."""
        with self._condition:
            self._generation += 1
            self._stalled = False
            for stream in self._streams:
                stream.stuck = False
                stream.cut = False
            self._condition.notify_all()

    # --- consulted by handler threads ---------------------------------------------------

    def open_stream(self, plural: str) -> WatchStreamControl:
        control = WatchStreamControl(plural)
        with self._condition:
            self._streams.add(control)
        return control

    def close_stream(self, control: WatchStreamControl) -> None:
        with self._condition:
            self._streams.discard(control)

    @property
    def open_stream_count(self) -> int:
        with self._condition:
            return len(self._streams)

    def take_gone_watch(self) -> bool:
        """True for a watch that is to answer 410 Gone (one of gone_storm's count)."""
        with self._condition:
            if self._gone_watches <= 0:
                return False
            self._gone_watches -= 1
            return True

    def hold_request(self, client_gone: Callable[[], bool]) -> None:
        """Wait while the server is stalled, before a request is handled or answered.

        Raises ServerKilled if the server is killed meanwhile and BrokenPipeError if the
        client hangs up (nothing is left to answer).
        """
        self._hold(None, client_gone)

    def hold_stream_write(
        self, control: WatchStreamControl, client_gone: Callable[[], bool]
    ) -> bool:
        """Wait while the server is stalled or this stream is stuck, before a stream writes.

        True when this write is to be cut mid-line (cut_stream_mid_line); raises as
        hold_request does.
        """
        return self._hold(control, client_gone)

    def _hold(self, control: WatchStreamControl | None, client_gone: Callable[[], bool]) -> bool:
        with self._condition:
            generation = self._generation
            while self._stalled or (control is not None and control.stuck):
                self._condition.wait(_POLL_SECONDS)
                if self._generation != generation:
                    raise ServerKilled
                if client_gone():
                    raise BrokenPipeError
            if control is not None and control.cut:
                control.cut = False
                return True
            return False

    def pause_list_page(self) -> None:
        """Sleep as long as slow_lists asks before a list page is answered (no wait: off).

        A kill or stop during the sleep raises ServerKilled, so no answer follows.
        """
        with self._condition:
            seconds = self._list_page_seconds
            if not seconds:
                return
            generation = self._generation
            deadline = time.monotonic() + seconds
            while (remaining := deadline - time.monotonic()) > 0:
                self._condition.wait(remaining)
                if self._generation != generation:
                    raise ServerKilled
