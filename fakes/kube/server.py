"""The fake kube-apiserver over real HTTP/1.1: discovery, list/watch/get/create/update/delete
for Leases and LeaseCandidates, bearer tokens, and fault injection for tests.

Watches stream chunked JSON lines straight out of the store's event log; many queued events
go out in one chunk and one `sendall`, which is what lets a single thread push well over
100,000 events per second.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import select
import socket
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
import yaml

from fakes.kube import errors
from fakes.kube.errors import ApiError
from fakes.kube.resources import (
    GROUP,
    LEASE_CANDIDATES,
    LEASES,
    ResourceType,
    clean_spec,
)
from fakes.kube.scenarios import ScenarioRunner, make_scenario
from fakes.kube.selectors import ObjectFilter, parse_filter
from fakes.kube.store import (
    DEFAULT_EVENT_WINDOW,
    ObjectStore,
    WatchEvent,
    watch_line,
    with_kind,
)

logger = logging.getLogger(__name__)

DEFAULT_BOOKMARK_INTERVAL = 5.0
# The apiserver picks a random watch timeout in [min-request-timeout, 2x] when none is asked.
DEFAULT_WATCH_TIMEOUT = 1800.0
# How often an idle watch checks that its client is still connected.
_LIVENESS_CHECK_SECONDS = 1.0
_MAX_BODY_BYTES = 3 * 1024 * 1024  # the apiserver's request size limit
_WATCH_BATCH = 2000
_HEALTH_PATHS = frozenset({"/healthz", "/livez", "/readyz"})
_TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})
_LEASE_VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
FORBIDDEN_USER = "system:serviceaccount:lease-dashboard:lease-dashboard"


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request the server answered, for tests that check what a client asked for."""

    method: str
    path: str
    query: dict[str, str]
    status: int


@dataclass(frozen=True, slots=True)
class _ResourcePath:
    resource: ResourceType
    version: str
    namespace: str | None
    name: str | None


def _is_true(value: str | None) -> bool:
    return value in _TRUE


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


class _DroppedMidLine(Exception):
    """Raised after a fault-injected watch has sent half a line and cut the connection."""


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False  # open watches are ended by FakeApiServer.stop(), not joined here
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], api: FakeApiServer) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.api = api
        super().__init__(address, _Handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HttpServer
    # Socket timeout: an idle keep-alive connection or a client that stops reading a watch
    # for this long is dropped, as the apiserver's write deadlines do.
    timeout = 120

    def setup(self) -> None:
        super().setup()
        self._request_path = ""
        self._request_query: dict[str, str] = {}
        self._response_started = False
        self.server.api._track_connection(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass
        finally:
            self.server.api._untrack_connection(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s %s", self.address_string(), format % args)

    def send_response(self, code: int, message: str | None = None) -> None:
        self._response_started = True
        # Recorded as the status line goes out, so a client that has seen the response
        # (even a watch that is still streaming) always finds its request in the log.
        self.server.api._record(
            RequestRecord(self.command, self._request_path, self._request_query, code)
        )
        # No `Server:` header: the apiserver sends none.
        self.log_request(code)
        self.send_response_only(code, message)
        self.send_header("Date", self.date_time_string())

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        # Nothing here patches; a Status-shaped 405 says so more plainly than http.server's 501.
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    # --- plumbing -----------------------------------------------------------------------

    def _common_headers(self, content_type: str = "application/json", *, apf: bool = True) -> None:
        api = self.server.api
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Type", content_type)
        if apf:
            self.send_header("X-Kubernetes-Pf-Flowschema-Uid", api._flowschema_uid)
            self.send_header("X-Kubernetes-Pf-Prioritylevel-Uid", api._priority_level_uid)

    def _send_json(
        self, code: int, body: Any, *, headers: dict[str, str] | None = None, apf: bool = True
    ) -> None:
        data = orjson.dumps(body, option=orjson.OPT_APPEND_NEWLINE)
        self.send_response(code)
        self._common_headers(apf=apf)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, error: ApiError) -> None:
        self._send_json(error.code, error.body, headers=error.headers, apf=error.code != 401)

    def _send_text(self, code: int, text: str) -> None:
        data = text.encode()
        self.send_response(code)
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            size = 0
            while True:
                length = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if length == 0:
                    self.rfile.readline()
                    break
                size += length
                if size > _MAX_BODY_BYTES:
                    raise errors.ApiError(
                        errors.status_body(
                            413, "RequestEntityTooLarge", f"limit is {_MAX_BODY_BYTES}"
                        )
                    )
                parts.append(self.rfile.read(length))
                self.rfile.readline()
            return b"".join(parts)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            self.close_connection = True
            raise errors.bad_request("invalid Content-Length") from None
        if length > _MAX_BODY_BYTES:
            self.close_connection = True
            raise errors.ApiError(
                errors.status_body(413, "RequestEntityTooLarge", f"limit is {_MAX_BODY_BYTES}")
            )
        return self.rfile.read(length) if length > 0 else b""

    def _dispatch(self) -> None:
        api = self.server.api
        split = urlsplit(self.path)
        path = split.path.rstrip("/") or "/"
        query = {
            key: values[0] for key, values in parse_qs(split.query, keep_blank_values=True).items()
        }
        self._request_path, self._request_query = split.path, query
        self._response_started = False
        try:
            body = self._read_body()
            if path in _HEALTH_PATHS:
                self._send_text(200, "ok")
                return
            route = api._parse_resource_path(path)
            api._check_access(self.command, path, route, query, self.headers.get("Authorization"))
            api._take_injected_failure()
            if route is None:
                self._serve_non_resource(path)
            else:
                self._serve_resource(route, query, body)
        except ApiError as error:
            self._answer_error(error)
        except (_DroppedMidLine, BrokenPipeError, ConnectionResetError, TimeoutError):
            # The client went away mid-answer (or a fault was injected): nothing to add.
            self.close_connection = True
        except Exception as error:
            # A bug in the fake must show up as an answer, not as a silent hang-up.
            logger.exception("fake apiserver failed on %s %s", self.command, self.path)
            self._answer_error(
                ApiError(
                    errors.status_body(500, "InternalError", f"Internal error occurred: {error!r}")
                )
            )

    def _answer_error(self, error: ApiError) -> None:
        if self._response_started:
            # Too late for a status code (a watch is streaming): end the connection instead.
            self.close_connection = True
            return
        try:
            self._send_error(error)
        except OSError:
            self.close_connection = True

    # --- discovery ----------------------------------------------------------------------

    def _serve_non_resource(self, path: str) -> None:
        if self.command != "GET":
            raise errors.method_not_allowed()
        body = self.server.api._discovery(path, self.headers.get("Host") or "")
        if body is None:
            raise errors.path_not_found()
        self._send_json(200, body)

    # --- resources ----------------------------------------------------------------------

    def _serve_resource(self, route: _ResourcePath, query: dict[str, str], body: bytes) -> None:
        api = self.server.api
        store = api.store
        resource, version = route.resource, route.version
        method = self.command
        if route.name is None:
            if method == "GET":
                if _is_true(query.get("watch")):
                    self._watch(route, query)
                else:
                    self._list(route, query)
                return
            if method == "POST" and route.namespace is not None:
                created = store.create(
                    resource,
                    route.namespace,
                    _decode_body(resource, version, body),
                    version=version,
                )
                self._send_json(201, with_kind(resource, created, version))
                return
            raise errors.method_not_allowed()

        assert route.namespace is not None  # _parse_resource_path guarantees it for items
        if method == "GET":
            obj = store.get(resource, route.namespace, route.name)
            self._send_json(200, with_kind(resource, obj, version))
        elif method == "PUT":
            updated = store.update(
                resource,
                route.namespace,
                route.name,
                _decode_body(resource, version, body),
                version=version,
            )
            self._send_json(200, with_kind(resource, updated, version))
        elif method == "DELETE":
            deleted = store.delete(resource, route.namespace, route.name)
            self._send_json(
                200,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": {
                        "name": route.name,
                        "group": GROUP,
                        "kind": resource.plural,
                        "uid": deleted["metadata"]["uid"],
                    },
                },
            )
        else:
            raise errors.method_not_allowed()

    def _list(self, route: _ResourcePath, query: dict[str, str]) -> None:
        store = self.server.api.store
        object_filter = parse_filter(
            route.namespace, query.get("labelSelector", ""), query.get("fieldSelector", "")
        )
        limit = _parse_int(query.get("limit"), "limit")
        continue_token = query.get("continue") or None
        requested = query.get("resourceVersion", "")
        if continue_token and requested:
            raise errors.bad_request(
                "specifying resource version is not allowed when using continue"
            )
        if requested not in ("", "0"):
            wanted = _parse_resource_version(requested)
            current = store.resource_version
            if wanted > current:
                raise errors.resource_version_too_large(wanted, current)
            # History is not kept for lists; an exact read of an older state is "too old".
            if query.get("resourceVersionMatch") == "Exact" and wanted != current:
                raise errors.expired("The resourceVersion for the provided list is too old.")
        page = store.list_page(
            route.resource,
            object_filter,
            limit=limit if limit and limit > 0 else None,
            continue_token=continue_token,
        )
        metadata: dict[str, Any] = {"resourceVersion": str(page.resource_version)}
        if page.continue_token:
            metadata["continue"] = page.continue_token
        if page.remaining_item_count is not None:
            metadata["remainingItemCount"] = page.remaining_item_count
        self._send_json(
            200,
            {
                "kind": route.resource.list_kind,
                "apiVersion": route.resource.api_version(route.version),
                "metadata": metadata,
                "items": page.items,  # list items carry no kind/apiVersion (list_all.json)
            },
        )

    # --- watch --------------------------------------------------------------------------

    def _start_stream(self) -> None:
        self.send_response(200)
        self._common_headers()
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _watch(self, route: _ResourcePath, query: dict[str, str]) -> None:
        api = self.server.api
        resource = route.resource
        object_filter = parse_filter(
            route.namespace, query.get("labelSelector", ""), query.get("fieldSelector", "")
        )
        bookmarks = _is_true(query.get("allowWatchBookmarks"))
        timeout = _parse_int(query.get("timeoutSeconds"), "timeoutSeconds")
        duration = float(timeout) if timeout and timeout > 0 else api.default_watch_timeout
        requested = query.get("resourceVersion", "")
        since = None if requested in ("", "0") else _parse_resource_version(requested)
        initial_events_end = api.watch_list and _is_true(query.get("sendInitialEvents"))
        if initial_events_end:
            if not bookmarks or query.get("resourceVersionMatch") != "NotOlderThan":
                raise errors.bad_request(
                    "sendInitialEvents requires allowWatchBookmarks=true and "
                    "resourceVersionMatch=NotOlderThan"
                )
            since = None
        deadline = time.monotonic() + duration
        convert = _line_converter(resource, route.version)

        try:
            subscription = api.store.subscribe(resource, object_filter, since)
        except ApiError as error:
            # Past authentication and parameter parsing, the apiserver reports watch errors
            # inside a 200 stream (watch_410_expired.jsonl), not as the HTTP status.
            self._start_stream()
            line = orjson.dumps({"type": "ERROR", "object": error.body}) + b"\n"
            self.wfile.write(_chunk(line) + b"0\r\n\r\n")
            return

        writer = _WatchWriter(self, api._take_watch_drop())

        def send_bookmark(*, initial_events_end: bool = False) -> None:
            resource_version = subscription.bookmark_resource_version()
            writer.write_lines(
                [
                    _bookmark_line(
                        resource,
                        route.version,
                        resource_version,
                        initial_events_end=initial_events_end,
                    )
                ]
            )

        try:
            self._start_stream()
            for start in range(0, len(subscription.initial_objects), _WATCH_BATCH):
                objects = subscription.initial_objects[start : start + _WATCH_BATCH]
                lines = [watch_line(resource, "ADDED", obj, route.version) for obj in objects]
                writer.write_lines(lines if convert is None else [convert(line) for line in lines])
            if initial_events_end:
                send_bookmark(initial_events_end=True)
            select_lines = _event_selector(resource, object_filter)
            next_bookmark = time.monotonic() + api.bookmark_interval
            while True:
                now = time.monotonic()
                if now >= deadline:
                    if bookmarks:
                        # Newer apiservers send a last bookmark before a watch times out so
                        # the client resumes without replaying events.
                        send_bookmark()
                    break
                wake = min(deadline, now + _LIVENESS_CHECK_SECONDS)
                if bookmarks:
                    wake = min(wake, next_bookmark)
                batch = subscription.next_batch(max(0.0, wake - now), _WATCH_BATCH)
                if subscription.closed:
                    break
                if batch:
                    lines = select_lines(batch)
                    if lines:
                        writer.write_lines(
                            lines if convert is None else [convert(line) for line in lines]
                        )
                elif self._client_gone():
                    self.close_connection = True
                    return
                if bookmarks and time.monotonic() >= next_bookmark:
                    send_bookmark()
                    next_bookmark = time.monotonic() + api.bookmark_interval
            self.wfile.write(b"0\r\n\r\n")
        finally:
            subscription.close()


class _WatchWriter:
    """Writes lines as chunks; carries out an injected mid-line connection drop."""

    def __init__(self, handler: _Handler, drop_after_events: int | None) -> None:
        self._handler = handler
        self._lines_before_drop = drop_after_events

    def write_lines(self, lines: list[bytes]) -> None:
        if not lines:
            return
        remaining = self._lines_before_drop
        if remaining is not None and len(lines) > remaining:
            whole = b"".join(lines[:remaining])
            victim = lines[remaining]
            data = whole + victim[: max(1, len(victim) // 2)]
            self._handler.wfile.write(_chunk(data))
            # Cut the TCP connection without the terminating chunk, as a crashing
            # apiserver or a load balancer reset does.
            with contextlib.suppress(OSError):
                self._handler.connection.shutdown(socket.SHUT_RDWR)
            raise _DroppedMidLine
        if remaining is not None:
            self._lines_before_drop = remaining - len(lines)
        self._handler.wfile.write(_chunk(b"".join(lines)))


def _event_selector(
    resource: ResourceType, object_filter: ObjectFilter
) -> Callable[[list[WatchEvent]], list[bytes]]:
    plural = resource.plural
    if object_filter.selects_everything:
        return lambda batch: [e.line for e in batch if e.resource == plural or not e.resource]
    if not object_filter.has_selectors:
        namespace = object_filter.namespace
        return lambda batch: [
            e.line
            for e in batch
            if not e.resource or (e.resource == plural and e.namespace == namespace)
        ]
    matches = object_filter.matches
    return lambda batch: [
        e.line
        for e in batch
        if not e.resource or (e.resource == plural and matches(e.namespace, e.name, e.labels))
    ]


def _line_converter(resource: ResourceType, version: str) -> Callable[[bytes], bytes] | None:
    """Re-encode stored event lines for a version other than storage's; None = as is."""
    if version == resource.storage_version:
        return None
    api_version = resource.api_version(version)

    def convert(line: bytes) -> bytes:
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            return line  # an injected garbage line stays garbage
        obj = event.get("object") if isinstance(event, dict) else None
        if not isinstance(obj, dict) or obj.get("kind") != resource.kind:
            return line
        obj["apiVersion"] = api_version
        return orjson.dumps(event, option=orjson.OPT_APPEND_NEWLINE)

    return convert


def _bookmark_line(
    resource: ResourceType, version: str, resource_version: int, *, initial_events_end: bool = False
) -> bytes:
    # A bookmark is an empty object of the watched kind with only a resourceVersion.
    metadata: dict[str, Any] = {"resourceVersion": str(resource_version), "creationTimestamp": None}
    if initial_events_end:
        metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
    obj = {
        "kind": resource.kind,
        "apiVersion": resource.api_version(version),
        "metadata": metadata,
        "spec": clean_spec(resource, {}, version),
    }
    return orjson.dumps({"type": "BOOKMARK", "object": obj}, option=orjson.OPT_APPEND_NEWLINE)


def _parse_int(value: str | None, name: str) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise errors.bad_request(f"{name}: Invalid value: {value!r}: must be an integer") from None


def _parse_resource_version(value: str) -> int:
    try:
        parsed = int(value)
    except ValueError:
        parsed = -1
    if parsed < 0:
        raise errors.bad_request(f"invalid resource version: {value!r}")
    return parsed


def _decode_body(resource: ResourceType, version: str, body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as error:
        kind = resource.kind
        raise errors.bad_request(
            f'{kind} in version "{version}" cannot be handled as a {kind}: {error}'
        ) from None


def kubeconfig_document(
    url: str, *, token: str | None, context_name: str, namespace: str = "default"
) -> dict[str, Any]:
    """A kubeconfig for `url` that kubectl and `kubernetes.config.load_kube_config` accept."""
    user: dict[str, Any] = {"token": token} if token else {}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context_name, "cluster": {"server": url}}],
        "users": [{"name": context_name, "user": user}],
        "contexts": [
            {
                "name": context_name,
                "context": {"cluster": context_name, "user": context_name, "namespace": namespace},
            }
        ],
        "current-context": context_name,
        "preferences": {},
    }


def write_private_file(path: Path, text: str) -> None:
    """Write atomically with mode 0600: a kubeconfig may hold a bearer token."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


class FakeApiServer:
    """A kube-apiserver for Leases and LeaseCandidates, in-process and over real HTTP.

    Typical use (also a context manager)::

        server = FakeApiServer(scenario="demo").start()
        server.write_kubeconfig("var/fake-kubeconfig")
        server.store.apply_lease("default", "example", {"holderIdentity": "me"})
        server.stop()

    `candidate_versions` lists the served LeaseCandidate versions ("v1beta1", "v1alpha2");
    empty means the group serves Leases only and candidate paths answer 404, like an old
    cluster. `watch_list` honours `sendInitialEvents=true` as servers with WatchList do.
    `event_window` is how many events watches can resume from before `410 Expired`.
    Faults for tests: set_auth_failure, drop_next_watches, fail_next_requests,
    inject_watch_line, inject_unknown_event, end_watches. Bulk traffic for benchmarks:
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
            self.scenario_runner = ScenarioRunner(
                self.store, make_scenario(scenario), speed=scenario_speed
            )
        self._served: dict[str, list[ResourceType]] = {"v1": [LEASES]}
        for version in self.candidate_versions:
            self._served[version] = [LEASE_CANDIDATES]
        self._flowschema_uid = str(uuid.uuid4())
        self._priority_level_uid = str(uuid.uuid4())
        self._lock = threading.Lock()
        self._auth_failure: int | None = None
        self._watch_drops: deque[int] = deque()
        self._request_failures: deque[tuple[int, int]] = deque()
        self._requests: deque[RequestRecord] = deque(maxlen=10_000)
        self._connections: set[socket.socket] = set()
        self._httpd: _HttpServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> FakeApiServer:
        if self._httpd is not None:
            raise RuntimeError("this FakeApiServer is already started")
        self._httpd = _HttpServer((self.host, self.requested_port), self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"fake-apiserver:{self.port}",
            daemon=True,
        )
        self._thread.start()
        if self.scenario_runner is not None:
            self.scenario_runner.start()
        return self

    def stop(self) -> None:
        """Stop the scenario, end every watch, close every connection. Idempotent.

        The store survives: a new FakeApiServer(store=old.store, port=old.port) is an
        apiserver restart (same objects, resourceVersions continue).
        """
        if self.scenario_runner is not None:
            self.scenario_runner.stop()
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()  # accept no new requests before ending the open watches
        self.store.end_watches()
        httpd.server_close()
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the server is not started")
        return int(self._httpd.server_address[1])

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

    def _check_access(
        self,
        method: str,
        path: str,
        route: _ResourcePath | None,
        query: dict[str, str],
        authorization: str | None,
    ) -> None:
        if self.token is not None:
            scheme, _, credential = (authorization or "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                credential.strip().encode(), self.token.encode()
            ):
                raise errors.unauthorized()
        with self._lock:
            failure = self._auth_failure
        if failure == 401:
            raise errors.unauthorized()
        if failure == 403:
            if route is None:
                raise errors.forbidden(FORBIDDEN_USER, method.lower(), None, None, None, path)
            raise errors.forbidden(
                FORBIDDEN_USER,
                _verb(method, route, query),
                route.resource.plural,
                route.namespace,
                route.name,
                path,
            )

    def _parse_resource_path(self, path: str) -> _ResourcePath | None:
        parts = path.strip("/").split("/")
        if len(parts) < 4 or parts[0] != "apis" or parts[1] != GROUP:
            return None
        version, rest = parts[2], parts[3:]
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if len(rest) == 1:
            plural, name = rest[0], None
        elif len(rest) == 2 and namespace is not None:
            plural, name = rest
        else:
            return None
        for resource in self._served.get(version, []):
            if resource.plural == plural:
                return _ResourcePath(resource, version, namespace, name)
        return None

    def _discovery(self, path: str, host_header: str) -> dict[str, Any] | None:
        major, minor = self.kubernetes_version.lstrip("v").split(".")[:2]
        group_versions = [
            {"groupVersion": f"{GROUP}/{version}", "version": version} for version in self._served
        ]
        group = {
            "name": GROUP,
            "versions": group_versions,
            "preferredVersion": group_versions[0],
        }
        if path == "/version":
            return {
                "major": major,
                "minor": minor,
                "gitVersion": self.kubernetes_version,
                "gitCommit": hashlib.sha1(
                    self.kubernetes_version.encode(), usedforsecurity=False
                ).hexdigest(),
                "gitTreeState": "clean",
                "buildDate": "2025-08-12T09:27:46Z",
                "goVersion": "go1.24.5",
                "compiler": "gc",
                "platform": "linux/amd64",
            }
        if path == "/api":
            # No core group: this fake serves coordination.k8s.io only, and an empty core
            # resource list makes discovery clients (kubectl api-resources) report an error.
            return {
                "kind": "APIVersions",
                "versions": [],
                "serverAddressByClientCIDRs": [
                    {
                        "clientCIDR": "0.0.0.0/0",
                        "serverAddress": host_header or f"{self.host}:{self.port}",
                    }
                ],
            }
        if path == "/apis":
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]}
        if path == f"/apis/{GROUP}":
            return {"kind": "APIGroup", "apiVersion": "v1", **group}
        prefix = f"/apis/{GROUP}/"
        if path.startswith(prefix) and path[len(prefix) :] in self._served:
            version = path[len(prefix) :]
            return {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{GROUP}/{version}",
                "resources": [
                    {
                        "name": resource.plural,
                        "singularName": resource.singular,
                        "namespaced": True,
                        "kind": resource.kind,
                        "verbs": list(_LEASE_VERBS),
                        "storageVersionHash": resource.storage_version_hash,
                    }
                    for resource in self._served[version]
                ],
            }
        return None


def _verb(method: str, route: _ResourcePath, query: dict[str, str]) -> str:
    if method == "GET":
        if route.name is not None:
            return "get"
        return "watch" if _is_true(query.get("watch")) else "list"
    if method == "DELETE":
        return "delete" if route.name is not None else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())
