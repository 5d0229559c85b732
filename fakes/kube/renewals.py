"""Bulk lease renewals for scenarios and benchmarks: node heartbeats by the thousand,
built ahead of time when a benchmark wants its clock to measure only the client."""

from __future__ import annotations

import contextlib
import gc
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import orjson

from fakes.kube.resources import LEASES, format_micro_time, normalize_micro_time
from fakes.kube.storage import (
    BULK_BATCH,
    EMPTY_LABELS,
    ObjectKey,
    StoreBase,
    StoredObject,
    WatchEvent,
)

# How long a bulk producer waits for a slow watcher before letting the log outrun it
# (the watcher is then cut off and must resume, as a real apiserver does to slow watchers).
SLOW_WATCHER_PATIENCE_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class PreparedRenewals:
    """Renewal events built ahead of time (see ObjectStore.prepare_renewals)."""

    namespace: str
    base_resource_version: int  # the events continue from here
    first_cursor: int  # round-robin position of the first renewal
    key_count: int  # leases in the namespace when prepared
    keys: list[ObjectKey]
    objects: list[StoredObject]
    events: list[WatchEvent]

    def __len__(self) -> int:
        return len(self.events)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic GC while bulk-building acyclic events.

    With a few hundred thousand live objects (the retained log) every generation-2 pass is
    costly, and building events triggers them: pausing makes the bulk paths 2-4x faster.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class RenewalTraffic(StoreBase):
    """Renewals as a fleet of kubelets sends them, written in batches under one lock."""

    def _renew_locked(self, key: ObjectKey, renew_time: str, *, notify: bool) -> bool:
        old = self._objects[LEASES.plural].get(key)
        if old is None:
            return False
        resource_version = self._resource_version + 1
        metadata = {**old["metadata"], "resourceVersion": str(resource_version)}
        spec = {**old["spec"], "renewTime": renew_time}
        self._commit_locked(
            LEASES,
            key,
            {"metadata": metadata, "spec": spec},
            resource_version,
            "MODIFIED",
            notify=notify,
        )
        return True

    def renew_lease(
        self, namespace: str, name: str, renew_time: str | datetime | float | None = None
    ) -> bool:
        """Set renewTime (now by default), as a holder's heartbeat does. False if missing."""
        stamp = (
            format_micro_time(self._clock())
            if renew_time is None
            else normalize_micro_time(renew_time)
        )
        with self._lock:
            return self._renew_locked((namespace, name), stamp, notify=True)

    def seed_node_leases(
        self,
        count: int,
        *,
        namespace: str = "kube-node-lease",
        name_format: str = "node-{index:05d}",
        lease_duration_seconds: int = 40,
    ) -> list[str]:
        """Create `count` kubelet-style node leases at once (one ADDED each); their names."""
        now = self._clock()
        stamp = format_micro_time(now)
        names = [name_format.format(index=index) for index in range(count)]
        with self._lock:
            for name in names:
                spec = {
                    "holderIdentity": name,
                    "leaseDurationSeconds": lease_duration_seconds,
                    "renewTime": stamp,
                }
                owner = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": str(uuid.uuid4())}
                self._new_object_locked(
                    LEASES, namespace, name, {"ownerReferences": [owner]}, spec, created_at=now
                )
        return names

    def emit_renewals(
        self,
        count: int,
        *,
        namespace: str = "kube-node-lease",
        rate: float | None = None,
    ) -> int:
        """Renew the leases of `namespace` round-robin, `count` MODIFIED events in total.

        With `rate` None it writes as fast as it can, in batches of 1,000 under one lock
        acquisition, but never more than half the event window ahead of the slowest open
        watch (so a benchmark measures its client, not the log's trimming). With a `rate`
        (events per second) it paces itself like a cluster of rate * 10 nodes. Returns the
        resourceVersion of the last renewal.
        """
        with self._lock:
            _, low, high = self._key_range_locked(LEASES, namespace)
            keys = self._keys_locked(LEASES)[low:high]
        if not keys:
            raise ValueError(f"no leases in namespace {namespace!r} to renew")
        for size in self._paced_batches(count, rate):
            stamp = format_micro_time(self._clock())
            with self._lock, _collector_paused():
                cursor = self._renewal_cursor
                for offset in range(size):
                    self._renew_locked(keys[(cursor + offset) % len(keys)], stamp, notify=False)
                self._renewal_cursor = (cursor + size) % len(keys)
                self._after_append_locked()
        return self.resource_version

    def _paced_batches(self, count: int, rate: float | None) -> Iterator[int]:
        """The sizes of the batches `count` bulk writes go in, each yielded when it may be
        written: at once in batches of BULK_BATCH (with `rate` None), or `rate` writes a second
        in batches of a hundredth of it; never more than half the event window ahead of the
        slowest open watch."""
        batch = BULK_BATCH if rate is None else max(1, min(BULK_BATCH, int(rate / 100)))
        started = time.monotonic()
        emitted = 0
        while emitted < count:
            size = min(batch, count - emitted)
            if rate is not None:
                delay = started + emitted / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            self._wait_for_slow_watches()
            yield size
            emitted += size

    def prepare_renewals(
        self, count: int, *, namespace: str = "kube-node-lease"
    ) -> PreparedRenewals:
        """Build `count` round-robin renewal events without publishing them.

        The costly part (copying and serializing objects) happens here, so a benchmark
        can do it before its clock starts; `publish()` then only appends. The events
        continue from the current resourceVersion; if anything else writes in between,
        `publish()` prepares them again.
        """
        with self._lock:
            _, low, high = self._key_range_locked(LEASES, namespace)
            keys = self._keys_locked(LEASES)[low:high]
            current = {key: self._objects[LEASES.plural][key] for key in keys}
            base = self._resource_version
            cursor = self._renewal_cursor
        if not keys:
            raise ValueError(f"no leases in namespace {namespace!r} to renew")
        chosen: list[ObjectKey] = []
        objects: list[StoredObject] = []
        events: list[WatchEvent] = []
        dumps, option = orjson.dumps, orjson.OPT_APPEND_NEWLINE
        kind, api_version = LEASES.kind, LEASES.api_version(LEASES.storage_version)
        stamp = ""
        with _collector_paused():
            for offset in range(count):
                if offset % BULK_BATCH == 0:
                    stamp = format_micro_time(self._clock())
                key = keys[(cursor + offset) % len(keys)]
                resource_version = base + offset + 1
                old = current[key]
                metadata = {**old["metadata"], "resourceVersion": str(resource_version)}
                spec = {**old["spec"], "renewTime": stamp}
                obj = {"metadata": metadata, "spec": spec}
                current[key] = obj
                event = {
                    "type": "MODIFIED",
                    "object": {
                        "kind": kind,
                        "apiVersion": api_version,
                        "metadata": metadata,
                        "spec": spec,
                    },
                }
                labels = metadata.get("labels") or EMPTY_LABELS
                chosen.append(key)
                objects.append(obj)
                events.append(
                    WatchEvent(
                        resource_version,
                        LEASES.plural,
                        key[0],
                        key[1],
                        labels,
                        dumps(event, option=option),
                    )
                )
        return PreparedRenewals(namespace, base, cursor, len(keys), chosen, objects, events)

    def publish(self, prepared: PreparedRenewals) -> int:
        """Make prepared renewals visible; returns the last resourceVersion.

        Appends in slices of half the event window, waiting between slices for open
        watches to keep up (as emit_renewals does), so no watcher is cut off. If another
        writer got in first, the rest is prepared again with fresh resourceVersions.
        """
        step = max(1, self.event_window // 2)
        leases = self._objects[LEASES.plural]
        total = len(prepared.events)
        for start in range(0, total, step):
            self._wait_for_slow_watches()
            end = min(start + step, total)
            with self._lock:
                if self._resource_version != prepared.base_resource_version + start:
                    stale = True
                else:
                    stale = False
                    for key, obj in zip(
                        prepared.keys[start:end], prepared.objects[start:end], strict=True
                    ):
                        if key in leases:  # a lease deleted meanwhile stays deleted
                            leases[key] = obj
                    self._events.extend(prepared.events[start:end])
                    self._resource_version = prepared.base_resource_version + end
                    self._renewal_cursor = (prepared.first_cursor + end) % prepared.key_count
                    self._after_append_locked()
            if stale:
                rest = self.prepare_renewals(total - start, namespace=prepared.namespace)
                return self.publish(rest)
        return self.resource_version

    def _wait_for_slow_watches(self) -> None:
        limit = max(1, self.event_window // 2)
        deadline = time.monotonic() + SLOW_WATCHER_PATIENCE_SECONDS
        with self._lock:
            while self._watch_positions:
                end = self._first_event_index + len(self._events)
                if end - min(self._watch_positions.values()) <= limit:
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return
                self._producers_waiting += 1
                try:
                    self._events_consumed.wait(min(remaining, 0.5))
                finally:
                    self._producers_waiting -= 1
