"""The fake kube-apiserver for Leases, LeaseCandidates and Nodes, in-process and over real
HTTP: its lifecycle, access checks (RBAC per resource), and the faults tests inject. Requests
are answered in `handler`, watches streamed in `watch`, objects kept in `store`."""

from __future__ import annotations

import contextlib
import hmac
import os
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml

from fakes.kube import errors
from fakes.kube.discovery import discovery_document
from fakes.kube.faults import Faults
from fakes.kube.handler import HttpServer
from fakes.kube.kubeconfig import kubeconfig_document, write_private_file
from fakes.kube.resources import LEASE_CANDIDATES, LEASES, NODES, RESOURCES, ResourceType
from fakes.kube.routes import RequestRecord, ResourcePath, parse_resource_path, verb
from fakes.kube.scenarios import ScenarioRunner, make_scenario
from fakes.kube.storage import DEFAULT_EVENT_WINDOW
from fakes.kube.store import ObjectStore

# The apiserver's watch cache sends a bookmark about once a minute (bookmarkFrequency).
DEFAULT_BOOKMARK_INTERVAL = 60.0
# The apiserver picks a random watch timeout in [min-request-timeout, 2x] when none is asked.
DEFAULT_WATCH_TIMEOUT = 1800.0
FORBIDDEN_USER = "system:serviceaccount:lease-dashboard:lease-dashboard"


class FakeApiServer:
    """A kube-apiserver for Leases, LeaseCandidates and Nodes, in-process and over real HTTP.

    Typical use (also a context manager)::

        server = FakeApiServer(scenario="demo").start()
        server.write_kubeconfig("var/fake-kubeconfig")
        server.store.apply_lease("default", "example", {"holderIdentity": "me"})
        server.stop()

    `candidate_versions` lists the served LeaseCandidate versions ("v1beta1", "v1alpha2");
    empty means the group serves Leases only and candidate paths answer 404, like an old
    cluster. `watch_list` honours `sendInitialEvents=true` as servers with WatchList do.
    `event_window` is how many events watches can resume from before `410 Expired`.
    `nodes` serves v1 Nodes under /api/v1 (False: 404, like a server without them).
    `bookmark_interval` is how often watches that allow bookmarks get one (the apiserver:
    about once a minute).
    Permissions: forbid / allow answer 403 for chosen resources (and verbs) only.
    Faults for tests: set_auth_failure, drop_next_watches, fail_next_requests,
    inject_watch_line, inject_unknown_event, end_watches. The process's faults for fault
    campaigns: stall / resume, stall_watch_streams / resume_watch_streams, kill / restart,
    slow_lists, gone_storm, cut_stream_mid_line. Bulk traffic for benchmarks:
    store.prepare_renewals + store.publish, or store.emit_renewals(count, rate=...).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        token: str | None = None,
        scenario: str | None = None,
        scenario_speed: float = 1.0,
        candidate_versions: Sequence[str] = ("v1beta1",),
        bookmark_interval: float = DEFAULT_BOOKMARK_INTERVAL,
        event_window: int = DEFAULT_EVENT_WINDOW,
        watch_list: bool = False,
        store: ObjectStore | None = None,
        nodes: bool = True,
    ) -> None:
        unknown = set(candidate_versions) - set(LEASE_CANDIDATES.versions)
        if unknown:
            raise ValueError(f"unknown LeaseCandidate versions: {sorted(unknown)}")
        self.host = host
        self.requested_port = port
        self.token = token or None
        self.bookmark_interval = bookmark_interval
        self.default_watch_timeout = DEFAULT_WATCH_TIMEOUT
        self.watch_list = watch_list
        self.candidate_versions = tuple(
            version for version in LEASE_CANDIDATES.versions if version in candidate_versions
        )
        # LeaseCandidates arrived in 1.33; without them the fake is the fixtures' 1.24.
        self.kubernetes_version = "v1.33.4" if self.candidate_versions else "v1.24.17"
        self.store = store or ObjectStore(event_window=event_window)
        self.scenario_runner: ScenarioRunner | None = None
        if scenario is not None:
            # The scenario's actors are this server's clients: while it takes no writes
            # (stalled, killed, restarting), their writes are not made.
            self.scenario_runner = ScenarioRunner(
                self.store,
                make_scenario(scenario),
                speed=scenario_speed,
                writes_refused=self._refuses_writes,
            )
        self._served: dict[str, list[ResourceType]] = {"v1": [LEASES]}
        for version in self.candidate_versions:
            self._served[version] = [LEASE_CANDIDATES]
        self._core: list[ResourceType] = [NODES] if nodes else []
        # RBAC resource ("nodes", "nodes/status", "leases") -> forbidden verbs (None: all).
        self._forbidden: dict[str, frozenset[str] | None] = {}
        self._flowschema_uid = str(uuid.uuid4())
        self._priority_level_uid = str(uuid.uuid4())
        self._lock = threading.Lock()
        self._auth_failure: int | None = None
        self._watch_drops: deque[int] = deque()
        self._request_failures: deque[tuple[int, int]] = deque()
        self._requests: deque[RequestRecord] = deque(maxlen=10_000)
        self._connections: set[socket.socket] = set()
        self._faults = Faults()
        self._killed = False  # kill() was called and restart() not yet
        self._forbidden_until: float | None = None  # restart(forbidden_seconds): monotonic
        self._bound_port: int | None = None
        self._httpd: HttpServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> FakeApiServer:
        if self._httpd is not None or self._killed:
            raise RuntimeError("this FakeApiServer is already started (restart() after kill())")
        self._listen(self.requested_port)
        if self.scenario_runner is not None:
            self.scenario_runner.start()
        return self

    def _listen(self, port: int) -> None:
        httpd = HttpServer((self.host, port), self)
        self._bound_port = int(httpd.server_address[1])
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"fake-apiserver:{self._bound_port}",
            daemon=True,
        )
        with self._lock:
            self._httpd = httpd
        self._thread.start()

    def stop(self) -> None:
        """Stop the scenario, end every watch, close every connection. Idempotent.

        The store survives: a new FakeApiServer(store=old.store, port=old.port) is an
        apiserver restart (same objects, resourceVersions continue).
        """
        if self.scenario_runner is not None:
            self.scenario_runner.stop()
        with self._lock:
            httpd, self._httpd = self._httpd, None
            self._killed = False
        if httpd is None:
            self._faults.abandon()
            return
        httpd.shutdown()  # accept no new requests before ending the open watches
        self._faults.abandon()  # requests held by a stall or stuck streams get no answer
        self.store.end_watches()
        httpd.server_close()
        self._close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _close_connections(self) -> None:
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The port it listens on (also while killed: restart() listens there again)."""
        with self._lock:
            running = self._httpd is not None or self._killed
        if not running or self._bound_port is None:
            raise RuntimeError("the server is not started")
        return self._bound_port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def write_kubeconfig(
        self,
        path: str | os.PathLike[str],
        *,
        context_name: str = "fake-apiserver",
        namespace: str = "default",
    ) -> Path:
        target = Path(path)
        document = kubeconfig_document(
            self.url, token=self.token, context_name=context_name, namespace=namespace
        )
        write_private_file(target, yaml.safe_dump(document, sort_keys=False))
        return target

    # --- fault injection ----------------------------------------------------------------

    def set_auth_failure(self, code: int | None) -> None:
        """Answer every request (health checks aside) with 401 or 403; None restores."""
        if code not in (None, 401, 403):
            raise ValueError("auth failure must be 401, 403 or None")
        with self._lock:
            self._auth_failure = code

    def forbid(self, *resources: str, verbs: Iterable[str] | None = None) -> None:
        """Answer 403 for these RBAC resources, as for a user whose roles lack them.

        A resource also covers its subresources ("nodes" forbids "nodes/status" too);
        `verbs` narrows it ("watch" only, say). Everything else keeps working.
        """
        known = {f"{plural}/status" for plural, kind in RESOURCES.items() if kind.has_status}
        known |= set(RESOURCES)
        unknown = set(resources) - known
        if unknown:
            raise ValueError(f"unknown resources: {sorted(unknown)}")
        with self._lock:
            for resource in resources:
                self._forbidden[resource] = None if verbs is None else frozenset(verbs)

    def allow(self, *resources: str) -> None:
        """Lift `forbid` for these resources; with none, for every resource."""
        with self._lock:
            if not resources:
                self._forbidden.clear()
            for resource in resources:
                self._forbidden.pop(resource, None)

    def drop_next_watches(self, count: int = 1, *, after_events: int = 0) -> None:
        """The next `count` watches send `after_events` whole events, then half of the next
        line, then cut the connection without ending the chunked stream."""
        with self._lock:
            self._watch_drops.extend([after_events] * count)

    def fail_next_requests(
        self, code: int, count: int = 1, *, retry_after_seconds: int = 1
    ) -> None:
        """Answer the next `count` requests with 429, 500, 503 or 504 (with Retry-After)."""
        errors.injected_failure(code, retry_after_seconds)  # validates the code
        with self._lock:
            self._request_failures.extend([(code, retry_after_seconds)] * count)

    def inject_watch_line(self, line: bytes) -> None:
        """Send raw bytes as one line into every open watch (e.g. b"{not json")."""
        self.store.inject_watch_line(line)

    def inject_unknown_event(self, event_type: str = "UNKNOWN") -> None:
        """Send a well-formed event with a type no client knows into every open watch."""
        obj = {
            "kind": LEASES.kind,
            "apiVersion": LEASES.api_version("v1"),
            "metadata": {"name": "injected", "resourceVersion": str(self.store.resource_version)},
            "spec": {},
        }
        self.store.inject_watch_line(orjson.dumps({"type": event_type, "object": obj}))

    def end_watches(self) -> None:
        """End every open watch cleanly (terminating chunk), as a restarting server does."""
        self.store.end_watches()

    def wait_for_watches(self, count: int = 1, timeout: float = 5.0) -> bool:
        """Block until at least `count` watches are open; False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.store.open_watch_count >= count:
                return True
            time.sleep(0.01)
        return self.store.open_watch_count >= count

    # --- the process's faults (fault campaigns) -----------------------------------------

    def stall(self) -> None:
        """Freeze the server, as a SIGSTOP freezes the apiserver's process.

        New connections are still accepted (the kernel does that for a stopped process),
        but no request gets a byte of answer, no write reaches the store, and open watch
        streams send nothing (no events, no bookmarks) until `resume()`. The scenario's
        simulated clients write nothing meanwhile: a renewal due during the stall is not
        made (the next one after `resume()` is). Writes a test makes through `store` still
        happen, as through another apiserver of the same etcd.
        """
        self._faults.stall()

    def resume(self) -> None:
        """End a `stall()`, as a SIGCONT does: held requests are answered from the state
        now, and streams go on, delivering what changed meanwhile (and a bookmark if one
        fell due). Streams stuck by `stall_watch_streams` stay stuck."""
        self._faults.resume()

    def stall_watch_streams(self, plural: str | None = None) -> int:
        """The watch streams open now (of `plural`, e.g. "leases"; None: all) stop writing.

        They stay open and silent (no events, no bookmarks, no end at their timeout) until
        the client closes them or `resume_watch_streams()`; events meanwhile are delivered
        then, unless the stream's timeout passed: it then ends as a timed-out watch does
        (a last bookmark at what it sent, if bookmarks are allowed). Everything else is
        answered as usual, new watches included: a server whose one stream is stuck.
        Returns how many streams it stalled.
        """
        if plural is not None and plural not in RESOURCES:
            raise ValueError(f"unknown resource {plural!r}; choose one of {sorted(RESOURCES)}")
        return self._faults.stick_streams(plural)

    def resume_watch_streams(self) -> None:
        """Let every stream stalled by `stall_watch_streams` write again."""
        self._faults.unstick_streams()

    def kill(self) -> None:
        """Kill the server, as a SIGKILL kills the apiserver's process.

        The listening socket closes (connections are refused from now on) and every open
        connection is cut: streams end without their terminating chunk, held requests get
        no answer. The store (etcd) survives; `restart()` listens again on the same port.
        The scenario's clients write nothing until the restarted server takes writes.
        """
        with self._lock:
            httpd, self._httpd = self._httpd, None
            if httpd is None:
                raise RuntimeError("the server is not running")
            self._killed = True
        httpd.shutdown()
        httpd.server_close()  # connection refused from here on
        self._faults.abandon()
        self._close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def restart(self, forbidden_seconds: float = 0.0, *, keep_watch_history: bool = False) -> None:
        """Listen again on the same port after `kill()` (a running server is killed first).

        The objects are those of before and resourceVersions continue from where they were
        (etcd survived). For the first `forbidden_seconds`, every request (health checks
        and discovery too) answers 403 Forbidden with the Status the apiserver gives for
        that resource and verb, as a restarted apiserver does until its RBAC cache is
        loaded; a wrong token still answers 401 (authentication works from the start).
        Faults of the old process (stall, stuck streams, pending cuts) are gone; those a
        test configured (forbid, slow_lists, gone_storm, queued failures) remain.

        The new process's watch cache starts at the current revision, as a real one's does:
        a watch resumed from an older resourceVersion answers 410 (the client lists again);
        `keep_watch_history` keeps the old history instead.
        """
        if forbidden_seconds < 0:
            raise ValueError("forbidden_seconds must not be negative")
        with self._lock:
            running = self._httpd is not None
        if running:
            self.kill()
        with self._lock:
            if not self._killed or self._bound_port is None:
                raise RuntimeError("the server is not started")
            self._forbidden_until = (
                time.monotonic() + forbidden_seconds if forbidden_seconds > 0 else None
            )
        if not keep_watch_history:
            self.store.forget_watch_history()
        self._listen(self._bound_port)
        with self._lock:
            self._killed = False

    def slow_lists(self, seconds_per_page: float | None) -> None:
        """Answer each list request (each page of a paginated list) only after this many
        seconds, read from the store when the time is up; None answers at once again."""
        if seconds_per_page is not None and seconds_per_page < 0:
            raise ValueError("seconds_per_page must not be negative")
        self._faults.set_list_page_seconds(seconds_per_page)

    def gone_storm(self, count: int) -> None:
        """The next `count` watches that ask for a resourceVersion (not "" or "0") answer
        as for one the watch cache no longer holds: HTTP 200 and one ERROR event with a
        `410 Expired` Status, "too old resource version: <asked> (<current>)", then the
        stream ends (watch_410_expired.jsonl). Other requests answer as usual."""
        if count < 0:
            raise ValueError("count must not be negative")
        self._faults.add_gone_watches(count)

    def cut_stream_mid_line(self) -> int:
        """Every watch stream open now writes the first half of its next line (an event or
        a bookmark), then its connection is cut without the terminating chunk (a stream
        that ends first is cut instead). Watches opened later are not cut. Returns how
        many streams it will cut."""
        return self._faults.cut_streams()

    @property
    def open_connections(self) -> int:
        """How many client connections are open now (fault tests count what a client left)."""
        with self._lock:
            return len(self._connections)

    @property
    def open_watch_streams(self) -> int:
        """How many watch streams are open (subscribed and not yet ended)."""
        return self._faults.open_stream_count

    @property
    def requests(self) -> list[RequestRecord]:
        """The most recent requests (up to 10,000), oldest first."""
        with self._lock:
            return list(self._requests)

    # --- request handling helpers (called from handler threads) -------------------------

    def _track_connection(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.add(connection)

    def _untrack_connection(self, connection: socket.socket) -> None:
        with self._lock:
            self._connections.discard(connection)

    def _record(self, record: RequestRecord) -> None:
        with self._lock:
            self._requests.append(record)

    def _take_watch_drop(self) -> int | None:
        with self._lock:
            return self._watch_drops.popleft() if self._watch_drops else None

    def _take_injected_failure(self) -> None:
        with self._lock:
            failure = self._request_failures.popleft() if self._request_failures else None
        if failure is not None:
            raise errors.injected_failure(*failure)

    def _refuses_writes(self) -> bool:
        """Whether the scenario's clients get their writes in: not while the server is
        stalled, killed, or restarting without its RBAC cache."""
        with self._lock:
            if self._killed:
                return True
            until = self._forbidden_until
        if until is not None and time.monotonic() < until:
            return True
        return self._faults.stalled

    def _refuse_while_restarting(
        self,
        method: str,
        path: str,
        route: ResourcePath | None,
        query: dict[str, str],
        authorization: str | None,
    ) -> None:
        """403 for everything in a restarted server's first `forbidden_seconds`."""
        with self._lock:
            until = self._forbidden_until
        if until is None or time.monotonic() >= until:
            return
        if route is None:
            # Health checks are asked without a token, as the anonymous user.
            user = FORBIDDEN_USER if authorization else "system:anonymous"
            raise errors.forbidden(user, method.lower(), None, None, None, path)
        raise self._forbidden_error(method, path, route, query)

    def _forbidden_error(
        self, method: str, path: str, route: ResourcePath, query: dict[str, str]
    ) -> errors.ApiError:
        return errors.forbidden(
            FORBIDDEN_USER,
            verb(method, route, query),
            route.resource.plural,
            route.namespace,
            route.name,
            path,
            group=route.resource.group,
            subresource=route.subresource,
        )

    def _check_access(
        self,
        method: str,
        path: str,
        route: ResourcePath | None,
        query: dict[str, str],
        authorization: str | None,
    ) -> None:
        if self.token is not None:
            scheme, _, credential = (authorization or "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                credential.strip().encode(), self.token.encode()
            ):
                raise errors.unauthorized()
        self._refuse_while_restarting(method, path, route, query, authorization)
        with self._lock:
            failure = self._auth_failure
            forbidden = dict(self._forbidden)
        if failure == 401:
            raise errors.unauthorized()
        if failure != 403 and route is None:
            return
        if route is None:
            raise errors.forbidden(FORBIDDEN_USER, method.lower(), None, None, None, path)
        action = verb(method, route, query)
        if failure != 403:
            rule_names = {route.rbac_resource, route.resource.plural}
            if not any(
                name in forbidden and (forbidden[name] is None or action in forbidden[name])
                for name in rule_names
            ):
                return
        raise self._forbidden_error(method, path, route, query)

    def _parse_resource_path(self, path: str) -> ResourcePath | None:
        return parse_resource_path(path, self._served, self._core)

    def _discovery(self, path: str, host_header: str) -> dict[str, Any] | None:
        return discovery_document(
            path,
            served=self._served,
            core=self._core,
            kubernetes_version=self.kubernetes_version,
            server_address=host_header or f"{self.host}:{self.port}",
        )
