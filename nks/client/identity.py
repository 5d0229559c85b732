"""The X-Auth-Token an NKS client sends: a fixed token, or one issued by the identity service.

Issued tokens are cached and renewed shortly before they expire (and once after a 401), under
a lock, so a snapshot's threads that find the token expired together cause one identity call.
"""

from __future__ import annotations

import http
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

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
    reason_phrase,
    redact,
    server_excerpt,
    status_error,
    text_excerpt,
)
from nks.client.parsing import as_datetime

logger = logging.getLogger(__name__)

# Issued tokens remembered for redaction: a replaced token may still be valid.
REMEMBERED_TOKENS = 8


@dataclass(frozen=True, slots=True)
class _Token:
    value: str
    # Epoch seconds after which we ask for a new token; None for a configured token.
    renew_at: float | None


class TokenSource:
    """One account's token: configured (``token``), or issued from identity credentials.

    Thread-safe. It shares the client's HTTP connections (``http``), its retry policy, and its
    request counter (``count_request``), so identity calls are counted and retried alike.
    """

    def __init__(
        self,
        http_client: httpx.Client,
        *,
        token: str | None,
        identity_url: str | None,
        tenant_id: str | None,
        username: str | None,
        password: str | None,
        retry: RetryPolicy,
        count_request: Callable[[], None],
        max_body: int = 1024 * 1024,
    ) -> None:
        self.identity_url = identity_url
        self.tenant_id = tenant_id
        self._http = http_client
        self._username = username
        self._password = password
        # An empty token is no token: with identity credentials beside it, tokens are issued.
        self._fixed_token = token or None
        self._retry = retry
        self._count_request = count_request
        self._max_body = max_body
        self._token: _Token | None = _Token(token, renew_at=None) if token else None
        # The last few tokens issued, for redaction. Replaced whole (never mutated), so readers
        # need no lock.
        self._tokens_used: tuple[str, ...] = ()
        self._lock = threading.Lock()

    @property
    def fixed(self) -> bool:
        """The token was configured: nothing can renew it."""
        return self._fixed_token is not None

    def redact(self, text: str) -> str:
        """``text`` without the password or any token this source has held."""
        return redact(text, (self._password, self._fixed_token, *self._tokens_used))

    def current(self, deadline: outbound_http.Deadline) -> str:
        """The token to send; a new one is asked for within the caller's ``deadline``."""
        token = self._token
        if token is not None and token.renew_at is None:
            return token.value
        with self._locked(deadline):
            token = self._token
            if token is not None and (token.renew_at is None or time.time() < token.renew_at):
                return token.value
            # Holding the lock while asking for a token is deliberate: sixteen snapshot threads
            # finding the token expired at once should cause one identity call, not sixteen.
            self._token = self._issue(deadline)
            return self._token.value

    def renew_rejected(self, rejected: str, deadline: outbound_http.Deadline) -> None:
        """Replace ``rejected`` (NKS answered 401 to it), unless another thread already did."""
        with self._locked(deadline):
            if self._token is not None and self._token.value != rejected:
                return
            self._token = self._issue(deadline)

    @contextmanager
    def _locked(self, deadline: outbound_http.Deadline) -> Iterator[None]:
        # Waiting for another thread's identity call is part of this call's deadline too.
        if not self._lock.acquire(timeout=max(0.0, deadline.remaining())):
            raise bounded_error(
                "POST",
                urlsplit(f"{self.identity_url}/v2.0/tokens").path,
                outbound_http.DeadlineExceeded(deadline.seconds),
                idempotent=True,
                host=host_of(self.identity_url),
                identity=True,
            )
        try:
            yield
        finally:
            self._lock.release()

    def _issue(self, deadline: outbound_http.Deadline) -> _Token:
        if self.identity_url is None or self._username is None or self._password is None:
            raise RuntimeError("token renewal needs identity credentials")
        url = f"{self.identity_url}/v2.0/tokens"
        path = urlsplit(url).path
        body = {
            "auth": {
                "tenantId": self.tenant_id,
                "passwordCredentials": {"username": self._username, "password": self._password},
            }
        }
        attempt = 0
        while True:
            self._count_request()
            try:
                response = outbound_http.send(
                    self._http,
                    "POST",
                    url,
                    content=orjson.dumps(body),
                    headers={"Accept": "application/json", "Content-Type": "application/json"},
                    deadline=deadline,
                    max_body=self._max_body,
                )
            except outbound_http.OutboundError as exc:
                error = bounded_error(
                    "POST", path, exc, idempotent=True, host=host_of(url), identity=True
                )
            except httpx.RequestError as exc:
                error = self._transport_error(path, exc)
            else:
                try:
                    return self._token_from(response, path)
                except NksError as exc:
                    error = exc
            delay = self._retry.delay(attempt, error)
            if delay is None or delay >= deadline.remaining():
                raise error
            attempt += 1
            logger.warning(
                "Retrying the NKS token request in %.2f s (attempt %d of %d): %s",
                delay,
                attempt + 1,
                self._retry.retries + 1,
                error.message,
            )
            time.sleep(delay)

    def _transport_error(self, path: str, exc: httpx.RequestError) -> NksError:
        host = host_of(self.identity_url)
        if isinstance(exc, httpx.TimeoutException):
            return NksError(
                gettext("The identity service at %(host)s timed out for POST %(path)s")
                % {"host": host, "path": path},
                retryable=True,
                status=None,
                kind=ErrorKind.TIMEOUT,
            )
        detail = self.redact(text_excerpt(str(exc))) or type(exc).__name__
        return NksError(
            gettext(
                "Could not talk to the identity service at %(host)s for POST %(path)s: %(detail)s"
            )
            % {"host": host, "path": path, "detail": detail},
            retryable=True,
            status=None,
            kind=ErrorKind.CONNECTION,
        )

    def _token_from(self, response: httpx.Response, path: str) -> _Token:
        status = response.status_code
        if status in (http.HTTPStatus.UNAUTHORIZED, http.HTTPStatus.FORBIDDEN):
            # The credentials themselves were refused: that needs a person, not a retry.
            excerpt = self.redact(server_excerpt(response))
            values = {
                "status": status,
                "phrase": reason_phrase(status),
                "path": path,
                "tenant": self.tenant_id,
                "excerpt": excerpt,
            }
            raise NksError(
                gettext(
                    "The identity service answered %(status)s %(phrase)s for POST %(path)s: it "
                    "refused the NKS credentials for tenant %(tenant)s (%(excerpt)s)"
                )
                % values
                if excerpt
                else gettext(
                    "The identity service answered %(status)s %(phrase)s for POST %(path)s: it "
                    "refused the NKS credentials for tenant %(tenant)s"
                )
                % values,
                retryable=False,
                status=status,
                kind=ErrorKind.AUTH,
            )
        if not 200 <= status < 300:
            raise status_error(
                "POST",
                path,
                response,
                idempotent=True,
                fixed_token=self.fixed,
                redact_text=self.redact,
                identity=True,
            )
        try:
            data = orjson.loads(response.content)
            token_data = data["access"]["token"]
            value = token_data["id"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise NksError(
                gettext(
                    "The identity service answered %(status)s for POST %(path)s without "
                    "access.token.id in JSON"
                )
                % {"status": status, "path": path},
                retryable=True,
                status=status,
                kind=ErrorKind.BAD_RESPONSE,
            ) from None
        if not isinstance(value, str) or not value:
            raise NksError(
                gettext("The identity service answered POST %(path)s with an empty token id")
                % {"path": path},
                retryable=True,
                status=status,
                kind=ErrorKind.BAD_RESPONSE,
            )
        self._tokens_used = (*self._tokens_used[-(REMEMBERED_TOKENS - 1) :], value)
        return _Token(value, renew_at=_renewal_time(token_data))


def _renewal_time(token_data: Mapping[str, Any]) -> float:
    now = time.time()
    expires = as_datetime(token_data.get("expires"))
    if expires is None:
        # Without an expiry, renew conservatively; a 401 would still trigger a renewal.
        return now + 600.0
    issued = as_datetime(token_data.get("issued_at"))
    # Lifetime measured on the server's own clock, so a skewed local clock cannot make every
    # token look expired on arrival (which would mean one identity call per API call).
    lifetime = (expires - issued).total_seconds() if issued else expires.timestamp() - now
    if lifetime <= 0:
        return now + 30.0
    margin = min(60.0, lifetime * 0.1)
    return now + lifetime - margin
