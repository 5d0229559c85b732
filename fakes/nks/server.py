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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Self

from fakes.nks.handler import HttpServer
from fakes.nks.routes import IDENTITY_PREFIX, TOKENS_PATH, json_bytes, keystone_error, magnum_error
from fakes.nks.scenarios import (
    DEFAULT_PASSWORD,
    DEFAULT_TENANT_ID,
    DEFAULT_USERNAME,
    build_scenario,
)
from fakes.nks.state import FakeNksState

logger = logging.getLogger(__name__)


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


class FakeNks:
    """A fake NKS account served over HTTP on ``host:port`` (port 0 picks a free one)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        scenario: str = "demo",
        *,
        latency: float = 0.0,
        resize_delay: float = 5.0,
        health_speed: float = 1.0,
        password: str = DEFAULT_PASSWORD,
        kube_server_url: str | None = None,
        kubeconfigs: Mapping[str, str] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.scenario = scenario
        self.latency = latency
        self.state = FakeNksState(
            tenant_id=DEFAULT_TENANT_ID,
            username=DEFAULT_USERNAME,
            password=password,
            resize_delay=resize_delay,
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
        self._server: HttpServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle ---------------------------------------------------------------------

    def start(self) -> Self:
        if self._server is not None:
            raise RuntimeError("this FakeNks is already running")
        self._stopping.clear()
        self._server = HttpServer((self.host, self.port), self)
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
                body, content_type = json_bytes(payload), content_type or "application/json"
            elif status in (502, 503, 504):
                body = _GATEWAY_PAGE.format(status=status, phrase=phrase).encode()
                content_type = content_type or "text/html"
            else:
                detail = _DEFAULT_DETAILS.get(status, f"{phrase} (injected by the fake NKS)")
                body, content_type = json_bytes(magnum_error(status, detail)), "application/json"
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
