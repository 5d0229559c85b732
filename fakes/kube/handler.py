"""The HTTP side of the fake kube-apiserver: one handler thread per connection reads a
request, checks access through the FakeApiServer, and answers from its store."""

from __future__ import annotations

import logging
import select
import socket
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import orjson

from fakes.kube import errors
from fakes.kube.errors import ApiError
from fakes.kube.faults import ServerKilled
from fakes.kube.patches import parse_patch
from fakes.kube.routes import (
    RequestRecord,
    ResourcePath,
    decode_body,
    is_true,
    parse_int,
    parse_resource_version,
)
from fakes.kube.selectors import parse_filter
from fakes.kube.storage import with_kind
from fakes.kube.watch import DroppedMidLine, serve_watch

if TYPE_CHECKING:
    from fakes.kube.server import FakeApiServer

logger = logging.getLogger(__name__)

_MAX_BODY_BYTES = 3 * 1024 * 1024  # the apiserver's request size limit
_HEALTH_PATHS = frozenset({"/healthz", "/livez", "/readyz"})


class HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False  # open watches are ended by FakeApiServer.stop(), not joined here
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], api: FakeApiServer) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.api = api
        super().__init__(address, Handler)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HttpServer
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
        # A stalled server sends no byte, also of an answer it had begun to work out.
        self.server.api._faults.hold_request(self.client_gone)
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
            # A stalled server (a frozen process) handles nothing: no write reaches the
            # store until it resumes, and a held request is answered from the state then.
            api._faults.hold_request(self.client_gone)
            body = self._read_body()
            if path in _HEALTH_PATHS:
                api._refuse_while_restarting(
                    self.command, path, None, query, self.headers.get("Authorization")
                )
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
        except (DroppedMidLine, ServerKilled, BrokenPipeError, ConnectionResetError, TimeoutError):
            # The client went away mid-answer, the server was killed, or a fault was
            # injected: nothing to add.
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

    def _serve_resource(self, route: ResourcePath, query: dict[str, str], body: bytes) -> None:
        api = self.server.api
        store = api.store
        resource, version = route.resource, route.version
        # Cluster-scoped objects (Nodes) are stored under the namespace "".
        namespace = route.namespace or ""
        method = self.command
        if route.name is None:
            if method == "GET":
                if is_true(query.get("watch")):
                    serve_watch(self, route, query)
                else:
                    self._list(route, query)
                return
            if method == "POST" and (route.namespace is not None or not resource.namespaced):
                created = store.create(
                    resource,
                    namespace,
                    decode_body(resource, version, body),
                    version=version,
                )
                self._send_json(201, with_kind(resource, created, version))
                return
            raise errors.method_not_allowed()

        if method == "GET":
            obj = store.get(resource, namespace, route.name)
            self._send_json(200, with_kind(resource, obj, version))
        elif method == "PUT":
            updated = store.update(
                resource,
                namespace,
                route.name,
                decode_body(resource, version, body),
                version=version,
                subresource=route.subresource,
            )
            self._send_json(200, with_kind(resource, updated, version))
        elif method == "PATCH":
            patched = store.patch(
                resource,
                namespace,
                route.name,
                parse_patch(self.headers.get("Content-Type"), body),
                version=version,
                subresource=route.subresource,
            )
            self._send_json(200, with_kind(resource, patched, version))
        elif method == "DELETE" and route.subresource is None:
            deleted = store.delete(resource, namespace, route.name)
            details: dict[str, Any] = {"name": route.name}
            if resource.group:  # omitempty: the core group is not written
                details["group"] = resource.group
            details.update(kind=resource.plural, uid=deleted["metadata"]["uid"])
            self._send_json(
                200,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": details,
                },
            )
        else:
            raise errors.method_not_allowed()

    def _list(self, route: ResourcePath, query: dict[str, str]) -> None:
        api = self.server.api
        store = api.store
        object_filter = parse_filter(
            route.namespace, query.get("labelSelector", ""), query.get("fieldSelector", "")
        )
        limit = parse_int(query.get("limit"), "limit")
        continue_token = query.get("continue") or None
        requested = query.get("resourceVersion", "")
        if continue_token and requested:
            raise errors.bad_request(
                "specifying resource version is not allowed when using continue"
            )
        if requested not in ("", "0"):
            wanted = parse_resource_version(requested)
            current = store.resource_version
            if wanted > current:
                raise errors.resource_version_too_large(wanted, current)
            # History is not kept for lists; an exact read of an older state is "too old".
            if query.get("resourceVersionMatch") == "Exact" and wanted != current:
                raise errors.expired("The resourceVersion for the provided list is too old.")
        api._faults.pause_list_page()  # slow_lists: the page is read once the time is up
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

    # --- streams (watch.serve_watch drives them) --------------------------------------

    def start_stream(self) -> None:
        self.send_response(200)
        self._common_headers()
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True
