"""NksClient: one NKS account's HTTP calls, each answer parsed, each failure an NksError.

Reads are retried on transient failures (429, 5xx, timeouts, dropped connections, mangled
200 bodies); writes are sent exactly once. Tokens come from ``identity``, error words from
``errors``, and the answers are read by ``parsing``.
"""

from __future__ import annotations

import http
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Self, TypeVar
from urllib.parse import quote, urlsplit

import httpx
import orjson
from django.utils.translation import gettext

from dashboard import outbound_http
from nks.client.errors import (
    ErrorKind,
    NksError,
    RetryPolicy,
    bounded_error,
    host_of,
    looks_like_html,
    reason_phrase,
    server_excerpt,
    status_error,
    transport_error,
    uncertain,
)
from nks.client.identity import TokenSource
from nks.client.parsing import (
    ShapeError,
    as_text,
    event_sort_key,
    parse_cluster,
    parse_event,
    parse_nodegroup,
)
from nks.client.types import Cluster, ClusterEvent, Nodegroup, ResizeAccepted, Timeouts

logger = logging.getLogger(__name__)

T = TypeVar("T")

API_VERSION_HEADER = "container-infra latest"
USER_AGENT = "lease-dashboard-nks-client/1.0"
# One call's bounds, retries and identity calls included (settings NKS_HTTP_DEADLINE_SECONDS
# and NKS_HTTP_MAX_BODY_BYTES): a trickling or bloated answer cannot hold a poll for ever.
DEFAULT_DEADLINE = 30.0
DEFAULT_MAX_BODY = 8 * 1024 * 1024


def check_url(url: str, *, require_https: bool) -> None:
    """Refuse what must never be sent to: user info in the URL, or http where https is due.

    The messages name the problem, never the URL (it would carry the user info).
    """
    parts = urlsplit(url)
    if "@" in parts.netloc:
        raise ValueError("an NKS URL must not carry a user name or password")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("an NKS URL must be an http:// or https:// URL with a host")
    if require_https and parts.scheme != "https":
        raise ValueError("an NKS URL must use https:// in production")


class NksClient:
    """One NKS account: a base URL, a token source, and a pooled HTTP connection set.

    Thread-safe: the snapshot fetcher shares one client between its worker threads.
    Reads are retried on transient failures (429, 5xx, timeouts, dropped connections, mangled
    200 bodies); writes are sent exactly once.
    """

    def __init__(
        self,
        api_url: str,
        *,
        token: str | None = None,
        identity_url: str | None = None,
        tenant_id: str | None = None,
        username: str | None = None,
        password: str | None = None,
        timeout: Timeouts | float | None = None,
        retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        max_retry_after: float = 30.0,
        max_connections: int = 32,
        deadline: float = DEFAULT_DEADLINE,
        max_body: int = DEFAULT_MAX_BODY,
        require_https: bool = False,
    ) -> None:
        has_credentials = all((identity_url, tenant_id, username, password))
        if not token and not has_credentials:
            raise ValueError(
                "NksClient needs either token= or all of identity_url=, tenant_id=, username= "
                "and password="
            )
        if token and any((identity_url, username, password)):
            # Which one wins would be a guess; a misconfiguration should fail at start-up.
            raise ValueError("NksClient takes token= or identity credentials, not both")
        if retries < 0 or backoff < 0 or max_connections < 1:
            raise ValueError("retries and backoff must be >= 0 and max_connections >= 1")
        if deadline <= 0 or max_body < 1:
            raise ValueError("deadline and max_body must be positive")
        for url in (api_url, identity_url):
            if url:
                check_url(url, require_https=require_https)
        self.api_url = api_url.rstrip("/")
        self.identity_url = identity_url.rstrip("/") if identity_url else None
        self.tenant_id = tenant_id
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_retry_after = max_retry_after
        self.max_connections = max_connections
        self.deadline = deadline
        self.max_body = max_body
        self._retry = RetryPolicy(
            retries=retries,
            backoff=backoff,
            max_backoff=max_backoff,
            max_retry_after=max_retry_after,
        )
        self._count_lock = threading.Lock()
        self._request_count = 0
        if timeout is None:
            timeouts = Timeouts()
        elif isinstance(timeout, Timeouts):
            timeouts = timeout
        else:
            timeouts = Timeouts(connect=timeout, read=timeout, write=timeout, pool=timeout)
        self.timeouts = timeouts
        self._http = outbound_http.bounded_client(
            base_url=self.api_url,
            timeout=httpx.Timeout(
                connect=timeouts.connect,
                read=timeouts.read,
                write=timeouts.write,
                pool=timeouts.pool,
            ),
            limits=httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=max_connections,
                keepalive_expiry=30.0,
            ),
            headers={"User-Agent": USER_AGENT},
            # Redirects are never followed: from an API one is a misconfiguration (http vs
            # https, wrong region), and following it could carry the token to another host.
            proxy=outbound_http.environment_proxy(self.api_url),
        )
        self._tokens = TokenSource(
            self._http,
            token=token,
            identity_url=self.identity_url,
            tenant_id=tenant_id,
            username=username,
            password=password,
            retry=self._retry,
            count_request=self._count_request,
            max_body=max_body,
        )

    def __repr__(self) -> str:
        source = "fixed token" if self._tokens.fixed else f"identity {host_of(self.identity_url)}"
        return f"<NksClient {host_of(self.api_url)} ({source})>"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    @property
    def request_count(self) -> int:
        """HTTP requests sent so far, retries and identity calls included."""
        with self._count_lock:
            return self._request_count

    # ---- reads --------------------------------------------------------------------------

    def list_clusters(self) -> list[Cluster]:
        return self._parse_items(
            self._read("/v1/clusters"),
            "clusters",
            "/v1/clusters",
            lambda data: parse_cluster(data, detailed=False),
        )

    def get_cluster(self, cluster: str) -> Cluster:
        path = f"/v1/clusters/{_segment(cluster)}"
        return self._parse_one(self._read(path), path, lambda d: parse_cluster(d, detailed=True))

    def list_nodegroups(self, cluster: str) -> list[Nodegroup]:
        path = f"/v1/clusters/{_segment(cluster)}/nodegroups"
        return self._parse_items(
            self._read(path),
            "nodegroups",
            path,
            lambda data: parse_nodegroup(data, detailed=False),
        )

    def get_nodegroup(self, cluster: str, nodegroup: str) -> Nodegroup:
        path = f"/v1/clusters/{_segment(cluster)}/nodegroups/{_segment(nodegroup)}"
        return self._parse_one(self._read(path), path, lambda d: parse_nodegroup(d, detailed=True))

    def list_events(self, cluster_uuid: str) -> list[ClusterEvent]:
        """The cluster's operations, newest first (NKS does not promise an order)."""
        path = f"/v1/clusters/{_segment(cluster_uuid)}/events"
        events = self._parse_items(self._read(path), "events", path, parse_event)
        return sorted(events, key=event_sort_key, reverse=True)

    def get_kubeconfig(self, cluster: str) -> str:
        path = f"/v1/clusters/{_segment(cluster)}/config"
        config = self._read(path).get("config")
        if not isinstance(config, str) or not config.strip():
            raise NksError(
                gettext("NKS answered GET %(path)s without a kubeconfig in the 'config' field")
                % {"path": path},
                retryable=False,
                status=200,
                kind=ErrorKind.BAD_RESPONSE,
            )
        return config

    # ---- writes -------------------------------------------------------------------------

    def resize(
        self,
        cluster: str,
        nodegroup: str,
        node_count: int,
        nodes_to_remove: Sequence[str] | None = None,
    ) -> ResizeAccepted:
        """Ask NKS to resize a nodegroup. Sent once; never retried (see :class:`NksError`).

        The range of ``node_count`` is left to NKS to check: the upper bound is a quota.
        """
        if isinstance(node_count, bool) or not isinstance(node_count, int):
            raise TypeError(f"node_count must be an int, not {type(node_count).__name__}")
        body: dict[str, Any] = {"nodegroup": nodegroup, "node_count": node_count}
        if nodes_to_remove:
            body["nodes_to_remove"] = list(nodes_to_remove)
        path = f"/v1/clusters/{_segment(cluster)}/actions/resize"
        answer = self._request("POST", path, json_body=body, idempotent=False)
        cluster_uuid = as_text(answer.get("uuid")) if isinstance(answer, Mapping) else None
        if cluster_uuid is None:
            logger.warning("NKS accepted POST %s without naming the cluster in its answer", path)
        return ResizeAccepted(cluster_uuid=cluster_uuid)

    # ---- parsing helpers ----------------------------------------------------------------

    def _parse_items(
        self,
        body: Mapping[str, Any],
        key: str,
        path: str,
        parse: Callable[[Mapping[str, Any]], T],
    ) -> list[T]:
        items = body.get(key)
        if not isinstance(items, list):
            raise NksError(
                gettext("NKS answered GET %(path)s without a '%(key)s' list")
                % {"path": path, "key": key},
                retryable=True,
                status=200,
                kind=ErrorKind.BAD_RESPONSE,
            )
        parsed: list[T] = []
        for index, item in enumerate(items):
            # One malformed entry must not hide every other cluster from the dashboard.
            if not isinstance(item, Mapping):
                logger.warning("Skipping %s[%d] from GET %s: not an object", key, index, path)
                continue
            try:
                parsed.append(parse(item))
            except ShapeError as exc:
                logger.warning("Skipping %s[%d] from GET %s: %s", key, index, path, exc)
        return parsed

    def _parse_one(
        self, body: Mapping[str, Any], path: str, parse: Callable[[Mapping[str, Any]], T]
    ) -> T:
        try:
            return parse(body)
        except ShapeError as exc:
            raise NksError(
                gettext("NKS answered GET %(path)s with %(problem)s")
                % {"path": path, "problem": exc},
                retryable=False,
                status=200,
                kind=ErrorKind.BAD_RESPONSE,
            ) from None

    # ---- transport ----------------------------------------------------------------------

    def _read(self, path: str) -> dict[str, Any]:
        return self._request("GET", path, json_body=None, idempotent=True)

    def _count_request(self) -> None:
        with self._count_lock:
            self._request_count += 1

    def _request(
        self,
        method: str,
        path: str,
        *,
        json_body: Mapping[str, Any] | None,
        idempotent: bool,
    ) -> dict[str, Any]:
        # One deadline for the whole call: every attempt, the waits between them and any
        # token request share it, so retries cannot multiply it.
        deadline = outbound_http.Deadline(self.deadline)
        attempt = 0
        renewed_after_rejection = False
        while True:
            token = self._tokens.current(deadline)
            headers = {
                "Accept": "application/json",
                "Content-Type": "application/json",
                "OpenStack-API-Version": API_VERSION_HEADER,
                "X-Auth-Token": token,
            }
            content = orjson.dumps(json_body) if json_body is not None else None
            self._count_request()
            try:
                response = outbound_http.send(
                    self._http,
                    method,
                    path,
                    headers=headers,
                    content=content,
                    deadline=deadline,
                    max_body=self.max_body,
                )
            except outbound_http.OutboundError as exc:
                error = bounded_error(
                    method, path, exc, idempotent=idempotent, host=host_of(self.api_url)
                )
            except httpx.RequestError as exc:
                error = transport_error(
                    method,
                    path,
                    exc,
                    idempotent=idempotent,
                    host=host_of(self.api_url),
                    timeouts=self.timeouts,
                    redact_text=self._tokens.redact,
                )
            else:
                if (
                    response.status_code == http.HTTPStatus.UNAUTHORIZED
                    and not renewed_after_rejection
                    and not self._tokens.fixed
                ):
                    # A 401 is decided before NKS acts on a request, so sending it again with a
                    # fresh token is safe even for a write.
                    renewed_after_rejection = True
                    logger.info("NKS rejected the token for %s %s; getting a new one", method, path)
                    self._tokens.renew_rejected(token, deadline)
                    continue
                try:
                    return self._decode(method, path, response, idempotent=idempotent)
                except NksError as exc:
                    error = exc
            delay = self._retry.delay(attempt, error) if idempotent else None
            if delay is None or delay >= deadline.remaining():
                # No retry that could still finish in time: the last error is the answer.
                raise error
            attempt += 1
            logger.warning(
                "Retrying %s %s in %.2f s (attempt %d of %d): %s",
                method,
                path,
                delay,
                attempt + 1,
                self.retries + 1,
                error.message,
            )
            time.sleep(delay)

    def _decode(
        self, method: str, path: str, response: httpx.Response, *, idempotent: bool
    ) -> dict[str, Any]:
        status = response.status_code
        if not 200 <= status < 300:
            raise status_error(
                method,
                path,
                response,
                idempotent=idempotent,
                fixed_token=self._tokens.fixed,
                redact_text=self._tokens.redact,
            )
        if not idempotent and not response.content.strip():
            return {}
        # A 200 can still be a proxy's HTML error page or a body cut short by a dropped
        # connection. For a read that is worth another try; for a write it is ambiguous.
        problem: str | None = None
        data: Any = None
        if looks_like_html(response):
            excerpt = server_excerpt(response)
            problem = (
                gettext("an HTML page instead of JSON (%(excerpt)s)") % {"excerpt": excerpt}
                if excerpt
                else gettext("an HTML page instead of JSON")
            )
        else:
            try:
                data = orjson.loads(response.content)
            except orjson.JSONDecodeError:
                problem = gettext("a body that is not valid JSON (truncated or garbled)")
            else:
                if not isinstance(data, dict):
                    problem = gettext("JSON that is a %(type)s, not an object") % {
                        "type": type(data).__name__
                    }
        if problem is None:
            return data
        if not idempotent and not looks_like_html(response):
            # NKS took the write (2xx) and only its answer is odd: reporting a failure here would
            # invite a second resize, so accept it and leave a trace.
            logger.warning("NKS accepted %s %s but answered with %s", method, path, problem)
            return {}
        message = gettext(
            "NKS answered %(status)s %(phrase)s for %(method)s %(path)s with %(problem)s"
        ) % {
            "status": status,
            "phrase": reason_phrase(status),
            "method": method,
            "path": path,
            "problem": problem,
        }
        raise NksError(
            self._tokens.redact(uncertain(message, idempotent)),
            retryable=idempotent,
            status=status,
            kind=ErrorKind.BAD_RESPONSE,
        )


def _segment(value: str) -> str:
    # Cluster and nodegroup names are user data: quote them so "a/../b" stays one path segment.
    return quote(value, safe="")
