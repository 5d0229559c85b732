"""Scenario time: a timeline of actions, and the runner that lives through it.

A scenario is a timeline of actions in scenario time (epoch seconds). A ScenarioRunner
advances it with the wall clock (optionally sped up) in a daemon thread, or step by step
with `advance()` so a test can live through minutes of cluster life in milliseconds. Every
timestamp a scenario writes is the scheduled time of its action, not the moment the thread
got round to it, so renewals are evenly spaced like real heartbeats.

The actions are the cluster's clients writing to the API server. While it takes no writes
(a FakeApiServer stalled, killed or restarting: the runner's `writes_refused`), a repeating
action's occurrences are not made (a renewal that fails; the next one is made as usual), and
a one-off action (a step of a client's own chain) is made once writes are taken again, at
that moment: the client's retry.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from fakes.kube.store import ObjectStore

logger = logging.getLogger(__name__)

Action = Callable[[float], None]
NODE_LEASE_NAMESPACE = "kube-node-lease"
NODE_RENEW_INTERVAL = 10.0
NODE_LEASE_DURATION = 40
DAY = 86_400.0


class Scenario:
    """A timeline of actions; subclasses create objects in `setup` and schedule with `at`."""

    name = "scenario"

    def __init__(self) -> None:
        self._agenda: list[tuple[float, int, Action]] = []
        self._order = itertools.count()  # ties run in scheduling order
        self._held: list[Action] = []  # one-off actions due while writes were refused
        self._store: ObjectStore | None = None

    @property
    def store(self) -> ObjectStore:
        if self._store is None:
            raise RuntimeError("the scenario has not begun")
        return self._store

    def begin(self, store: ObjectStore, now: float) -> None:
        self._store = store
        self.setup(now)

    def setup(self, now: float) -> None:
        """Create the initial objects and schedule what happens next."""

    def at(self, when: float, action: Action) -> None:
        heapq.heappush(self._agenda, (when, next(self._order), action))

    def every(self, first: float, interval: float, action: Action) -> None:
        """Run `action(when)` at `first` and every `interval` seconds after it."""
        self.at(first, _Every(self, interval, action))

    def hold_until(self, now: float) -> int:
        """Live through `now` while the API server takes no writes: repeating actions due
        skip this occurrence (keeping their schedule), one-off actions wait for the next
        `run_until`. Returns how many occurrences were skipped."""
        skipped = 0
        while self._agenda and self._agenda[0][0] <= now:
            when, _, action = heapq.heappop(self._agenda)
            if isinstance(action, _Every):
                action.skip(when)
                skipped += 1
            else:
                self._held.append(action)
        return skipped

    def run_until(self, now: float) -> int:
        """Run every action due at or before `now` (those held by `hold_until` first, at
        `now`); returns how many ran."""
        ran = 0
        held, self._held = self._held, []
        for action in held:
            self._run(action, now)
            ran += 1
        while self._agenda and self._agenda[0][0] <= now:
            when, _, action = heapq.heappop(self._agenda)
            self._run(action, when)
            ran += 1
        return ran

    def _run(self, action: Action, when: float) -> None:
        try:
            action(when)
        except Exception:
            logger.exception("scenario %s: action at %.3f failed", self.name, when)


class _Every:
    """A repeating action on a scenario's agenda (Scenario.every)."""

    __slots__ = ("action", "interval", "scenario")

    def __init__(self, scenario: Scenario, interval: float, action: Action) -> None:
        self.scenario = scenario
        self.interval = interval
        self.action = action

    def __call__(self, when: float) -> None:
        self.skip(when)  # first, so a failing action keeps its schedule
        self.action(when)

    def skip(self, when: float) -> None:
        """This occurrence is not made; the next one is scheduled as usual."""
        self.scenario.at(when + self.interval, self)


def node_owner(node: str, uid: uuid.UUID) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "name": node, "uid": str(uid)}


class ScenarioRunner:
    """Advances a scenario with (optionally sped-up) real time, or by explicit steps.

    `speed` 10 lives ten scenario seconds per wall second; timestamps then run ahead of the
    wall clock, which is fine for tests but not for a dashboard that computes expiry from
    its own clock, so the demo uses 1. While `writes_refused()` is true (the API server
    the actors write to takes no writes) the scenario is held (Scenario.hold_until).
    """

    def __init__(
        self,
        store: ObjectStore,
        scenario: Scenario,
        *,
        speed: float = 1.0,
        start_time: float | None = None,
        tick_seconds: float = 0.1,
        writes_refused: Callable[[], bool] | None = None,
    ) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.store = store
        self.scenario = scenario
        self.speed = speed
        # Fixed when the scenario begins, so a runner built early does not start behind.
        self._start_time = start_time
        self.tick_seconds = tick_seconds
        self.writes_refused = writes_refused
        self._manual_offset = 0.0
        self._began = False
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._wall_start = 0.0

    def _begin(self) -> None:
        if not self._began:
            self._began = True
            self.scenario.begin(self.store, self.start_time)

    @property
    def start_time(self) -> float:
        """Scenario time at the beginning (epoch seconds); fixed on first use."""
        if self._start_time is None:
            self._start_time = time.time()
        return self._start_time

    @property
    def now(self) -> float:
        """Scenario time in epoch seconds."""
        if self._thread is None:
            return self.start_time + self._manual_offset
        return (
            self.start_time
            + self._manual_offset
            + (time.monotonic() - self._wall_start) * self.speed
        )

    def advance(self, seconds: float) -> int:
        """Live through `seconds` of scenario time at once (not while the thread runs)."""
        if self._thread is not None:
            raise RuntimeError("advance() is for runners that were not started")
        self._begin()
        self._manual_offset += seconds
        return self._step()

    def _step(self) -> int:
        if self.writes_refused is not None and self.writes_refused():
            self.scenario.hold_until(self.now)
            return 0
        return self.scenario.run_until(self.now)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._begin()
        self._wall_start = time.monotonic()
        self._thread = threading.Thread(
            target=self._run, name=f"scenario:{self.scenario.name}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.wait(self.tick_seconds):
            self._step()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
