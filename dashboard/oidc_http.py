"""Calls to the OpenID provider, bounded in total time and size.

`requests` has only per-read timeouts: a provider sending a byte every few seconds, in the
headers or the body, would keep a sign-in (and a server thread) waiting for ever. Each call
here runs under a `SocketAlarm` of OIDC_TIMEOUT seconds that shuts its sockets (redirects
and proxies included) when time is up; answers are capped and must not be compressed.
"""

from __future__ import annotations

import contextvars
import socket
from typing import Any

import requests
from django.conf import settings
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from dashboard.socket_alarm import SocketAlarm

# Discovery documents, key sets and userinfo answers are a few kilobytes; a megabyte is room
# for the largest honest one and a cap on a hostile or broken provider.
MAX_RESPONSE_BYTES = 1024 * 1024


class ProviderAnswerRefused(requests.RequestException):
    """The provider's answer is larger than MAX_RESPONSE_BYTES, or compressed."""


# The call in progress in this thread (connections are made in the calling thread).
_current_deadline: contextvars.ContextVar[SocketAlarm | None] = contextvars.ContextVar(
    "oidc_deadline", default=None
)


class _WatchedConnection:
    """Hands each new connection's socket to the call's alarm."""

    sock: socket.socket | None

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]  # the urllib3 connection this is mixed into
        deadline = _current_deadline.get()
        if deadline is not None and self.sock is not None:
            deadline.watch(self.sock)


class _WatchedHTTPConnection(_WatchedConnection, HTTPConnection):
    pass


class _WatchedHTTPSConnection(_WatchedConnection, HTTPSConnection):
    pass


class _WatchedHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


_WATCHED_POOLS = {"http": _WatchedHTTPConnectionPool, "https": _WatchedHTTPSConnectionPool}


class _WatchedAdapter(HTTPAdapter):
    """requests' adapter whose connections (direct or through a proxy) obey the call's alarm."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _WATCHED_POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        manager.pool_classes_by_scheme = _WATCHED_POOLS
        return manager


def provider_call(method: str, url: str, **kwargs: Any) -> requests.Response:
    """One request to the provider: OIDC_TIMEOUT seconds in all (redirects included), at most
    MAX_RESPONSE_BYTES, read in full; failures are `requests` exceptions (``Timeout`` once the
    deadline has passed), which the callers already answer.
    """
    seconds = float(settings.OIDC_TIMEOUT)
    headers = {**kwargs.pop("headers", {}), "Accept-Encoding": "identity"}
    token = _current_deadline.set(deadline := SocketAlarm(seconds))
    try:
        with deadline, requests.Session() as session:
            session.mount("http://", _WatchedAdapter(max_retries=0))
            session.mount("https://", _WatchedAdapter(max_retries=0))
            with session.request(
                method,
                url,
                headers=headers,
                stream=True,
                timeout=seconds,
                verify=settings.OIDC_VERIFY_SSL,
                proxies=getattr(settings, "OIDC_PROXY", None),
                **kwargs,
            ) as response:
                body = _read_capped(response)
                if deadline.expired:
                    # A shut socket can look like a body that ended: never use a cut answer.
                    raise requests.Timeout("deadline")
                # requests' own slot for a body already read: json() and text read it from here.
                response._content = body
                return response
    except (requests.RequestException, OSError) as exc:
        if deadline.expired:
            raise requests.Timeout(f"no whole answer from {url} within {seconds:g} s") from None
        if isinstance(exc, requests.RequestException):
            raise
        raise requests.ConnectionError(f"{url}: {type(exc).__name__}") from None
    finally:
        _current_deadline.reset(token)


def _read_capped(response: requests.Response) -> bytes:
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        # We asked for identity: a compressed answer could expand far past the cap.
        raise ProviderAnswerRefused(f"compressed answer ({encoding[:20]})", response=response)
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > MAX_RESPONSE_BYTES:
        raise ProviderAnswerRefused("answer larger than the cap", response=response)
    body = bytearray()
    for chunk in response.iter_content(chunk_size=64 * 1024):
        body += chunk
        if len(body) > MAX_RESPONSE_BYTES:
            raise ProviderAnswerRefused("answer larger than the cap", response=response)
    return bytes(body)
