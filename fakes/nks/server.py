"""The fake NKS API and identity service, over real HTTP (stdlib only).

It serves the endpoints the dashboard uses in the shapes of the NKS API v2 guide, checks tokens
the way NKS does, and can be told to misbehave (fault injection) so the client's error handling
is tested at the wire::

    with FakeNks(scenario="demo") as fake:
        client = NksClient(fake.url, **fake.credentials())
        fake.fail_next(r"/v1/clusters", 503, times=2)
        client.list_clusters()  # retried, then succeeds

Error answers use Magnum's shape (NKS is built on OpenStack Magnum; the guide shows none):
``{"errors": [{"status": 400, "title": "Bad Request", "detail": "...", ...}]}``; the identity
service and token checks use Keystone's ``{"error": {"code", "title", "message"}}``.
"""

from __future__ import annotations

import contextlib
import http
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import unquote, urlsplit

from fakes.nks.model import FakeApiError
from fakes.nks.scenarios import (
    DEFAULT_PASSWORD,
    DEFAULT_TENANT_ID,
    DEFAULT_USERNAME,
    build_scenario,
)
from fakes.nks.state import FakeNksState

logger = logging.getLogger(__name__)

IDENTITY_PREFIX = "/identity"
TOKENS_PATH = f"{IDENTITY_PREFIX}/v2.0/tokens"
MAX_BODY_BYTES = 1 << 20

_GATEWAY_PAGE = (
    "<html>\r\n<head><title>{status} {phrase}</title></head>\r\n<body>\r\n"
    "<center><h1>{status} {phrase}</h1></center>\r\n<hr><center>nginx</center>\r\n"
    "</body>\r\n</html>\r\n"
)
_MAINTENANCE_PAGE = (
    "<!DOCTYPE html><html><head><meta charset='utf-8'><title>NHN Cloud - Service maintenance"
    "</title><style>body{font-family:sans-serif}</style></head><body><h1>Service maintenance"
    "</h1><p>The service is temporarily unavailable. Please try again later.</p></body></html>"
)
_DEFAULT_DETAILS = {
    403: "Policy doesn't allow container-infra:cluster:get_all to be performed.",
    404: "The resource could not be found.",
    409: "The resource is being updated; try again when the operation has finished.",
    429: "Too many requests; slow down.",
    500: "Internal Server Error",
}


def _json_bytes(payload: Any) -> bytes:
    return json.dumps(payload, ensure_ascii=False).encode("utf-8")


def magnum_error(status: int, detail: str) -> dict[str, Any]:
    return {
        "errors": [
            {
                "request_id": "",
                "code": "client" if status < 500 else "server",
                "status": status,
                "title": http.HTTPStatus(status).phrase,
                "detail": detail,
                "links": [],
            }
        ]
    }


def keystone_error(status: int, message: str) -> dict[str, Any]:
    return {"error": {"code": status, "title": http.HTTPStatus(status).phrase, "message": message}}


@dataclass
class Fault:
    """Misbehaviour for the next ``remaining`` requests matching ``method`` and ``path``."""

    path: re.Pattern[str]
    method: str | None
    remaining: int
    action: str  # "status", "html", "truncate", "delay" or "drop"
    status: int = 200
    body: bytes | None = None
    content_type: str = "application/json"
    retry_after: str | None = None
    delay: float = 0.0

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and bool(self.path.fullmatch(path))


@dataclass(frozen=True)
class RecordedRequest:
    """A request the fake received. Token values are not kept, only whether one was sent."""

    method: str
    path: str
    status: int | None  # None when the fault injection dropped the connection
    headers: Mapping[str, str]
    body: Any  # parsed JSON of API writes; never the identity request (it holds a password)
    at: float


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    # stop() must not wait for a handler sleeping in an injected delay or a keep-alive read.
    block_on_close = False
    # The benchmark opens dozens of connections at once; the default backlog of 5 would make
    # the kernel drop SYNs and the client wait a second to retransmit.
    request_queue_size = 256
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], fake: FakeNks) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.fake = fake
        self.open_connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.open_connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.open_connections.discard(request)
        super().shutdown_request(request)

    def close_open_connections(self) -> None:
        with self.connections_lock:
            connections = list(self.open_connections)
        for connection in connections:
            # OSError: the peer closed it already.
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    # HTTP/1.1 keeps connections alive, so the client's connection pool is really exercised.
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle on, the body waits for the client's
    # delayed ACK (~40 ms per request).
    disable_nagle_algorithm = True
    server_version = "FakeNKS/1.0"
    sys_version = ""
    server: _HttpServer

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        # The stdlib prints every request to stderr; the demo's console has better uses.
        logger.debug("fake NKS: " + format, *args)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            return b""
        return self.rfile.read(length) if length > 0 else b""

    def _handle(self, method: str) -> None:
        fake = self.server.fake
        path = urlsplit(self.path).path
        raw_body = self._read_body()
        if fake.latency > 0:
            fake.sleep(fake.latency)
        fault = fake.take_fault(method, path)
        if fault is not None and fault.action == "delay":
            fake.sleep(fault.delay)
            fault = None
        if fault is not None and fault.action == "drop":
            fake.record(method, path, None, self.headers, raw_body)
            self.close_connection = True
            return

        extra_headers: dict[str, str] = {}
        content_type = "application/json"
        if fault is not None and fault.action in ("status", "html"):
            status = fault.status
            body = fault.body or b""
            content_type = fault.content_type
            if fault.retry_after is not None:
                extra_headers["Retry-After"] = fault.retry_after
        else:
            status, payload, extra_headers = fake.route(method, path, raw_body, self.headers)
            body = _json_bytes(payload) if payload is not None else b""
            if fault is not None and fault.action == "truncate":
                body = body[: max(1, len(body) // 2)]
        fake.record(method, path, status, self.headers, raw_body)
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in extra_headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (its timeout is shorter than an injected delay).
            self.close_connection = True


class FakeNks:
    """A fake NKS account served over HTTP on ``host:port`` (port 0 picks a free one)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        scenario: str = "demo",
        *,
        token_ttl: float = 60.0,
        latency: float = 0.0,
        resize_delay: float = 5.0,
        health_speed: float = 1.0,
        tenant_id: str = DEFAULT_TENANT_ID,
        username: str = DEFAULT_USERNAME,
        password: str = DEFAULT_PASSWORD,
        kube_server_url: str | None = None,
        kubeconfigs: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.host = host
        self.port = port
        self.scenario = scenario
        self.latency = latency
        self.state = FakeNksState(
            tenant_id=tenant_id,
            username=username,
            password=password,
            token_ttl=token_ttl,
            resize_delay=resize_delay,
            clock=clock,
        )
        self.state.kube_server_url = kube_server_url
        build_scenario(self.state, scenario, health_speed=health_speed)
        for cluster_ref, text in (kubeconfigs or {}).items():
            self.state.find_cluster(cluster_ref).kubeconfig = text
        self._faults: list[Fault] = []
        self._faults_lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._requests_lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _HttpServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle ---------------------------------------------------------------------

    def start(self) -> Self:
        if self._server is not None:
            raise RuntimeError("this FakeNks is already running")
        self._stopping.clear()
        self._server = _HttpServer((self.host, self.port), self)
        self.port = self._server.server_address[1]
        self.state.public_url = self.url
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name=f"fake-nks-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stopping.set()
        # shutdown() waits for serve_forever's next poll; a connection attempt wakes it now.
        stopper = threading.Thread(target=server.shutdown, name=f"fake-nks-{self.port}-stop")
        stopper.start()
        with contextlib.suppress(OSError), socket.create_connection(self._wake_address(), 1):
            pass
        stopper.join()
        server.close_open_connections()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)
        self._server = self._thread = None

    def _wake_address(self) -> tuple[str, int]:
        host = self.url.rsplit(":", 1)[0].removeprefix("http://").strip("[]")
        return host, self.port

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def sleep(self, seconds: float) -> None:
        # Wakes up early when the server stops, so stop() never waits for an injected delay.
        self._stopping.wait(seconds)

    # ---- where and how to connect ------------------------------------------------------

    @property
    def url(self) -> str:
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(  # noqa: S104
            self.host, self.host
        )
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def identity_url(self) -> str:
        return f"{self.url}{IDENTITY_PREFIX}"

    @property
    def tenant_id(self) -> str:
        return self.state.tenant_id

    @property
    def username(self) -> str:
        return self.state.username

    @property
    def password(self) -> str:
        return self.state.password

    def credentials(self) -> dict[str, str]:
        """Keyword arguments for ``NksClient(fake.url, **fake.credentials())``."""
        return {
            "identity_url": self.identity_url,
            "tenant_id": self.tenant_id,
            "username": self.username,
            "password": self.password,
        }

    # ---- fault injection ---------------------------------------------------------------

    def _add_fault(self, fault: Fault) -> None:
        with self._faults_lock:
            self._faults.append(fault)

    @staticmethod
    def _pattern(path: str) -> re.Pattern[str]:
        return re.compile(path)

    def fail_next(
        self,
        path: str,
        status: int,
        *,
        times: int = 1,
        method: str | None = None,
        retry_after: float | str | None = None,
        body: bytes | str | None = None,
        content_type: str | None = None,
    ) -> None:
        """Answer the next ``times`` requests whose path fully matches the regex ``path``
        with ``status``. Without ``body``: a 401 in Keystone's shape, 502/503/504 as an nginx
        HTML page, anything else in Magnum's error shape."""
        if body is None:
            phrase = http.HTTPStatus(status).phrase
            if status == 401:
                payload = keystone_error(401, "The request you have made requires authentication.")
                body, content_type = _json_bytes(payload), content_type or "application/json"
            elif status in (502, 503, 504):
                body = _GATEWAY_PAGE.format(status=status, phrase=phrase).encode()
                content_type = content_type or "text/html"
            else:
                detail = _DEFAULT_DETAILS.get(status, f"{phrase} (injected by the fake NKS)")
                body, content_type = _json_bytes(magnum_error(status, detail)), "application/json"
        elif isinstance(body, str):
            body = body.encode("utf-8")
        self._add_fault(
            Fault(
                path=self._pattern(path),
                method=method,
                remaining=times,
                action="status",
                status=status,
                body=body,
                content_type=content_type or "application/json",
                retry_after=None if retry_after is None else str(retry_after),
            )
        )

    def html_next(
        self, path: str, *, times: int = 1, method: str | None = None, status: int = 200
    ) -> None:
        """Answer with an HTML maintenance page (a 200 by default, as some proxies do)."""
        self._add_fault(
            Fault(
                path=self._pattern(path),
                method=method,
                remaining=times,
                action="html",
                status=status,
                body=_MAINTENANCE_PAGE.encode(),
                content_type="text/html; charset=utf-8",
            )
        )

    def truncate_next(self, path: str, *, times: int = 1, method: str | None = None) -> None:
        """Answer with the real JSON cut in half (Content-Length consistent, JSON broken)."""
        self._add_fault(
            Fault(path=self._pattern(path), method=method, remaining=times, action="truncate")
        )

    def delay_next(
        self, path: str, seconds: float, *, times: int = 1, method: str | None = None
    ) -> None:
        """Wait ``seconds`` before answering normally (longer than a client timeout)."""
        self._add_fault(
            Fault(
                path=self._pattern(path),
                method=method,
                remaining=times,
                action="delay",
                delay=seconds,
            )
        )

    def drop_next(self, path: str, *, times: int = 1, method: str | None = None) -> None:
        """Close the connection without answering."""
        self._add_fault(
            Fault(path=self._pattern(path), method=method, remaining=times, action="drop")
        )

    def clear_faults(self) -> None:
        with self._faults_lock:
            self._faults.clear()

    def take_fault(self, method: str, path: str) -> Fault | None:
        with self._faults_lock:
            for fault in self._faults:
                if fault.matches(method, path):
                    fault.remaining -= 1
                    if fault.remaining <= 0:
                        self._faults.remove(fault)
                    return fault
        return None

    def expire_all_tokens(self) -> None:
        self.state.expire_all_tokens()

    def remove_cluster_after_list(self, cluster: str) -> None:
        """The next cluster list still shows ``cluster``; right after it, the cluster is gone."""
        with self.state.lock:
            self.state.remove_after_list.add(self.state.find_cluster(cluster).uuid)

    # ---- what the fake saw -------------------------------------------------------------

    def record(
        self, method: str, path: str, status: int | None, headers: Mapping[str, str], body: bytes
    ) -> None:
        parsed: Any = None
        if body and method != "GET" and path != TOKENS_PATH:
            try:
                parsed = json.loads(body)
            except ValueError:
                parsed = body.decode("utf-8", "replace")
        seen = {
            name: headers.get(name, "")
            for name in ("Accept", "Content-Type", "OpenStack-API-Version", "User-Agent")
        }
        seen["X-Auth-Token"] = "present" if headers.get("X-Auth-Token") else "absent"
        with self._requests_lock:
            self._requests.append(
                RecordedRequest(method, path, status, seen, parsed, self.state.now())
            )

    def requests_seen(
        self, path: str | None = None, *, method: str | None = None
    ) -> list[RecordedRequest]:
        """Requests received so far, optionally those whose path fully matches regex ``path``."""
        pattern = re.compile(path) if path is not None else None
        with self._requests_lock:
            return [
                request
                for request in self._requests
                if (method is None or request.method == method)
                and (pattern is None or pattern.fullmatch(request.path))
            ]

    def clear_requests(self) -> None:
        with self._requests_lock:
            self._requests.clear()

    # ---- routing -----------------------------------------------------------------------

    def route(
        self, method: str, path: str, raw_body: bytes, headers: Mapping[str, str]
    ) -> tuple[int, Any, dict[str, str]]:
        state = self.state
        state.advance()
        try:
            if path == TOKENS_PATH:
                if method != "POST":
                    raise FakeApiError(405, "Use POST to ask for a token.", keystone=True)
                return 200, state.issue_token(_parse_json(raw_body, keystone=True)), {}
            if not path.startswith("/v1/"):
                raise FakeApiError(404, "The resource could not be found.")
            if not state.token_is_valid(headers.get("X-Auth-Token")):
                message = "The request you have made requires authentication."
                return 401, keystone_error(401, message), {"WWW-Authenticate": "Keystone"}
            segments = [unquote(part) for part in path.split("/")[2:]]
            if segments and segments[-1] == "":
                segments.pop()
            return self._route_api(method, segments, raw_body)
        except FakeApiError as exc:
            if exc.keystone:
                return exc.status, keystone_error(exc.status, exc.detail), {}
            return exc.status, magnum_error(exc.status, exc.detail), {}

    def _route_api(
        self, method: str, segments: list[str], raw_body: bytes
    ) -> tuple[int, Any, dict[str, str]]:
        state = self.state

        def only(allowed: str) -> None:
            if method != allowed:
                raise FakeApiError(405, f"Method {method} is not allowed here; use {allowed}.")

        match segments:
            case ["supports"]:
                only("GET")
                return (
                    200,
                    {
                        "supported_k8s": dict(state.supported_k8s),
                        "supported_event_type": dict(state.supported_event_types),
                    },
                    {},
                )
            case ["clusters"]:
                only("GET")
                return 200, state.cluster_list_json(), {}
            case ["clusters", cluster_ref]:
                only("GET")
                with state.lock:
                    cluster = state.find_cluster(cluster_ref)
                    return 200, state.cluster_json(cluster, detail=True), {}
            case ["clusters", cluster_ref, "config"]:
                only("GET")
                with state.lock:
                    return (
                        200,
                        {"config": state.kubeconfig_for(state.find_cluster(cluster_ref))},
                        {},
                    )
            case ["clusters", cluster_ref, "actions", "resize"]:
                only("POST")
                cluster_uuid = state.resize(cluster_ref, _parse_json(raw_body, keystone=False))
                return 202, {"uuid": cluster_uuid}, {}
            case ["clusters", cluster_ref, "nodegroups"]:
                only("GET")
                with state.lock:
                    cluster = state.find_cluster(cluster_ref)
                    groups = [
                        state.nodegroup_json(cluster, group, detail=False)
                        for group in cluster.nodegroups
                    ]
                    return 200, {"nodegroups": groups}, {}
            case ["clusters", cluster_ref, "nodegroups", group_ref]:
                only("GET")
                with state.lock:
                    cluster = state.find_cluster(cluster_ref)
                    group = state.find_nodegroup(cluster, group_ref)
                    return 200, state.nodegroup_json(cluster, group, detail=True), {}
            case ["clusters", cluster_uuid, "events"]:
                only("GET")
                with state.lock:
                    cluster = state.find_cluster_by_uuid(cluster_uuid)
                    events = sorted(cluster.events, key=lambda event: event.id)
                    return 200, {"events": [state.event_json(event) for event in events]}, {}
            case ["clusters", cluster_uuid, "events", event_uuid]:
                only("GET")
                with state.lock:
                    cluster = state.find_cluster_by_uuid(cluster_uuid)
                    for event in cluster.events:
                        if event.uuid == event_uuid:
                            return 200, state.event_json(event), {}
                raise FakeApiError(404, f"Event {event_uuid} could not be found.")
            case _:
                raise FakeApiError(404, "The resource could not be found.")


def _parse_json(raw_body: bytes, *, keystone: bool) -> Any:
    try:
        return json.loads(raw_body or b"null")
    except ValueError:
        raise FakeApiError(400, "The request body is not valid JSON.", keystone=keystone) from None
