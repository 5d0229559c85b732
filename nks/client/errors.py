"""The client's one error type, the words in it, and when trying again can help.

Every failure to get an answer from NKS or the identity service becomes an :class:`NksError`
whose message a person can act on: what was asked, what the server said (a short, tag-free
excerpt, with secrets redacted), and whether a retry can help.
"""

from __future__ import annotations

import enum
import http
import random
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
from django.utils.translation import gettext, pgettext

from dashboard import outbound_http
from nks.client.parsing import as_text
from nks.client.types import Timeouts

# How much of a server's error text goes into an error message: enough to understand the
# failure, short enough to fit a table cell and an e-mail subject line.
EXCERPT_LIMIT = 200


def uncertain_write() -> str:
    """The warning a write whose fate is unknown carries, in the active language."""
    return gettext(
        "the request may or may not have been applied; check the nodegroup status and the "
        "cluster's events before trying again"
    )


# Messages are built from whole clauses, each translated on its own, and joined by a pattern
# that is itself translated: a translator may reorder or repunctuate, never sees a fragment.
def with_hint(message: str, hint: str) -> str:
    """``message (hint)``: what happened, then what it likely means."""
    return pgettext("an error, then a hint in brackets", "%(message)s (%(hint)s)") % {
        "message": message,
        "hint": hint,
    }


def with_consequence(message: str, consequence: str) -> str:
    """``message; consequence``: what happened, then what follows for the reader."""
    return pgettext("an error, then what follows from it", "%(message)s; %(consequence)s") % {
        "message": message,
        "consequence": consequence,
    }


def uncertain(message: str, idempotent: bool) -> str:
    """``message``, warned that a write may have been applied when it was one."""
    return message if idempotent else with_consequence(message, uncertain_write())


def answered(
    status: int, method: str, path: str, excerpt: str = "", *, identity: bool = False
) -> str:
    """ "NKS answered 503 Service Unavailable for GET /path: what it said" (or the identity
    service). The reason phrase is HTTP's own, kept in English like the method and path."""
    values = {
        "status": status,
        "phrase": reason_phrase(status),
        "method": method,
        "path": path,
        "excerpt": excerpt,
    }
    if identity:
        if excerpt:
            return (
                gettext(
                    "The identity service answered %(status)s %(phrase)s for %(method)s "
                    "%(path)s: %(excerpt)s"
                )
                % values
            )
        return (
            gettext("The identity service answered %(status)s %(phrase)s for %(method)s %(path)s")
            % values
        )
    if excerpt:
        return (
            gettext("NKS answered %(status)s %(phrase)s for %(method)s %(path)s: %(excerpt)s")
            % values
        )
    return gettext("NKS answered %(status)s %(phrase)s for %(method)s %(path)s") % values


class ErrorKind(enum.StrEnum):
    AUTH = "auth"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    RATE_LIMITED = "rate_limited"
    SERVER = "server"
    TIMEOUT = "timeout"
    CONNECTION = "connection"
    BAD_RESPONSE = "bad_response"
    CONFLICT = "conflict"
    CLIENT = "client"


class NksError(Exception):
    """Any failure to get an answer from NKS or the identity service.

    ``retryable`` says whether the same call can succeed later without anyone changing anything.
    For a write it is only true when the request certainly never reached NKS: a resize whose
    fate is unknown must be checked (nodegroup status, events), not sent again.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        status: int | None,
        kind: str,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.status = status
        self.kind = ErrorKind(kind)
        self.retry_after = retry_after

    @property
    def not_found(self) -> bool:
        return self.kind is ErrorKind.NOT_FOUND

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return (
            f"NksError(kind={self.kind.value!r}, status={self.status!r}, "
            f"retryable={self.retryable!r}, message={self.message!r})"
        )

    def __reduce__(self) -> tuple[Callable[..., NksError], tuple[Any, ...]]:
        # Keyword-only arguments defeat Exception's default pickling, and Celery pickles
        # exceptions raised by tasks.
        return (
            _rebuild_nks_error,
            (self.message, self.retryable, self.status, self.kind.value, self.retry_after),
        )


def _rebuild_nks_error(
    message: str, retryable: bool, status: int | None, kind: str, retry_after: float | None
) -> NksError:
    return NksError(message, retryable=retryable, status=status, kind=kind, retry_after=retry_after)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many times, and after how long, a retryable failure is tried again."""

    retries: int
    backoff: float
    max_backoff: float
    max_retry_after: float

    def delay(self, attempt: int, error: NksError) -> float | None:
        """Seconds to wait before attempt ``attempt + 1``, or None to give up now."""
        if not error.retryable or attempt >= self.retries:
            return None
        if error.retry_after is not None:
            if error.retry_after > self.max_retry_after:
                # NKS asks for a long pause: let the caller (a Celery retry) wait, not a thread.
                return None
            return error.retry_after
        ceiling = min(self.max_backoff, self.backoff * (2**attempt))
        # Jitter keeps a fleet of pollers that failed together from retrying in lockstep.
        return ceiling / 2 + random.uniform(0, ceiling / 2)  # noqa: S311 - not cryptographic


# --------------------------------------------------------------------------------------------
# Error text
# --------------------------------------------------------------------------------------------

_HTML_DROP = re.compile(r"(?is)<(script|style)\b.*?</\1\s*>")
_HTML_TAG = re.compile(r"(?s)<[^>]*>")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
_WHITESPACE = re.compile(r"\s+")

# Defence in depth for secrets echoed back under their usual names, whatever their value.
_TOKEN_HEADER_VALUE = re.compile(r"(?i)(x-auth-token[\"']?\s*[:=]\s*[\"']?)[^\s\"',;}]+")
_PASSWORD_VALUE = re.compile(r"(?i)(password[\"']?\s*[:=]\s*[\"']?)[^\s\"',;}]+")


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` without the given secrets, nor anything sent as a token or a password."""
    # Servers sometimes echo the request back in an error; never let a secret out that way.
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
    text = _TOKEN_HEADER_VALUE.sub(r"\1[redacted]", text)
    return _PASSWORD_VALUE.sub(r"\1[redacted]", text)


def reason_phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return "(non-standard status)"


def looks_like_html(response: httpx.Response) -> bool:
    if "html" in response.headers.get("content-type", "").lower():
        return True
    return response.content.lstrip()[:1] == b"<"


def _message_from_json(data: Any) -> str | None:
    """Find the human message in the error shapes OpenStack services use."""
    if isinstance(data, str):
        return data
    if not isinstance(data, Mapping):
        return None
    errors = data.get("errors")
    if isinstance(errors, list) and errors and isinstance(errors[0], Mapping):
        # Magnum (the API NKS is built on): {"errors": [{"title", "detail", "code", ...}]}
        first = errors[0]
        return as_text(first.get("detail")) or as_text(first.get("title"))
    error = data.get("error")
    if isinstance(error, Mapping):
        # Keystone: {"error": {"message", "code", "title"}}
        return as_text(error.get("message")) or as_text(error.get("title"))
    if isinstance(error, str):
        return error
    for key in ("message", "detail", "faultstring", "title", "error_message"):
        text = as_text(data.get(key))
        if text:
            return text
    # webob's {"badRequest": {"message": ...}} style
    if len(data) == 1:
        inner = next(iter(data.values()))
        if isinstance(inner, Mapping):
            return as_text(inner.get("message"))
    return None


def text_excerpt(text: str) -> str:
    """``text`` as one short line: no tags, no control characters, at most EXCERPT_LIMIT."""
    text = _HTML_DROP.sub(" ", text)
    text = _HTML_TAG.sub(" ", text)
    text = _CONTROL.sub(" ", text)
    text = _WHITESPACE.sub(" ", text).strip()
    if len(text) > EXCERPT_LIMIT:
        text = text[: EXCERPT_LIMIT - 1].rstrip() + "…"
    return text


def server_excerpt(response: httpx.Response) -> str:
    """What the server said, in a line: its JSON message, an HTML page's title, or the text."""
    body = response.content
    if not body.strip():
        return ""
    if not looks_like_html(response):
        try:
            message = _message_from_json(orjson.loads(body))
        except orjson.JSONDecodeError:
            message = None
        if message:
            return text_excerpt(message)
    html_title = re.search(rb"(?is)<title[^>]*>(.*?)</title>", body)
    if html_title:
        return text_excerpt(html_title.group(1).decode("utf-8", "replace"))
    return text_excerpt(body[: EXCERPT_LIMIT * 8].decode("utf-8", "replace"))


def _parse_retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            moment = parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        seconds = (moment - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds)


def status_error(
    method: str,
    path: str,
    response: httpx.Response,
    *,
    idempotent: bool,
    fixed_token: bool,
    redact_text: Callable[[str], str],
    identity: bool = False,
) -> NksError:
    """The error for a non-2xx answer: its kind, and whether sending it again can help.

    ``identity``: the answer came from the identity service, not NKS (the message says so).
    """
    status = response.status_code
    excerpt = server_excerpt(response)
    message = answered(status, method, path, excerpt, identity=identity)
    retry_after: float | None = None
    if 300 <= status < 400:
        kind, retryable = ErrorKind.CLIENT, False
        location = text_excerpt(response.headers.get("location", ""))
        message = with_hint(
            message,
            gettext("redirected to %(location)s; check the configured API URL")
            % {"location": location}
            if location
            else gettext("redirected to nowhere; check the configured API URL"),
        )
    elif status == http.HTTPStatus.UNAUTHORIZED:
        kind, retryable = ErrorKind.AUTH, False
        message = with_hint(
            message,
            gettext("the configured NKS token was rejected; it may have expired")
            if fixed_token
            else gettext("rejected even with a freshly issued token; check the account's access"),
        )
    elif status == http.HTTPStatus.FORBIDDEN:
        kind, retryable = ErrorKind.FORBIDDEN, False
        message = with_hint(message, gettext("the account is not allowed to do this"))
    elif status == http.HTTPStatus.NOT_FOUND:
        kind, retryable = ErrorKind.NOT_FOUND, False
    elif status == http.HTTPStatus.CONFLICT:
        kind, retryable = ErrorKind.CONFLICT, False
    elif status == http.HTTPStatus.TOO_MANY_REQUESTS:
        kind, retryable = ErrorKind.RATE_LIMITED, True
        retry_after = _parse_retry_after(response.headers.get("retry-after"))
    elif status == http.HTTPStatus.REQUEST_TIMEOUT:
        kind, retryable = ErrorKind.TIMEOUT, idempotent
    elif status >= 500:
        kind, retryable = ErrorKind.SERVER, idempotent
        if status == http.HTTPStatus.SERVICE_UNAVAILABLE:
            retry_after = _parse_retry_after(response.headers.get("retry-after"))
        message = uncertain(message, idempotent)
    else:
        kind, retryable = ErrorKind.CLIENT, False
    return NksError(
        redact_text(message),
        retryable=retryable,
        status=status,
        kind=kind,
        retry_after=retry_after,
    )


def transport_error(
    method: str,
    path: str,
    exc: httpx.RequestError,
    *,
    idempotent: bool,
    host: str,
    timeouts: Timeouts,
    redact_text: Callable[[str], str],
) -> NksError:
    """The error for a call that got no usable answer: a timeout, a refused or dropped line."""
    detail = redact_text(text_excerpt(str(exc))) or type(exc).__name__
    values = {"method": method, "path": path, "detail": detail, "host": host}
    if isinstance(exc, httpx.DecodingError):
        # A 2xx whose compressed body is corrupt: the same ambiguity as a mangled JSON body.
        return NksError(
            uncertain(
                gettext(
                    "NKS answered %(method)s %(path)s with a body that could not be decoded: "
                    "%(detail)s"
                )
                % values,
                idempotent,
            ),
            retryable=idempotent,
            status=None,
            kind=ErrorKind.BAD_RESPONSE,
        )
    # Connect failures never reached NKS; anything later may have, which matters for writes.
    never_sent = isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout))
    retryable = idempotent or never_sent
    if isinstance(exc, httpx.TimeoutException):
        # One whole sentence per stage, so each reads naturally in every language.
        stage = {
            httpx.ConnectTimeout: (
                gettext(
                    "NKS at %(host)s timed out connecting for %(method)s %(path)s "
                    "(limit %(limit)s s)"
                ),
                timeouts.connect,
            ),
            httpx.ReadTimeout: (
                gettext(
                    "NKS at %(host)s timed out waiting for the answer for %(method)s %(path)s "
                    "(limit %(limit)s s)"
                ),
                timeouts.read,
            ),
            httpx.WriteTimeout: (
                gettext(
                    "NKS at %(host)s timed out sending the request for %(method)s %(path)s "
                    "(limit %(limit)s s)"
                ),
                timeouts.write,
            ),
            httpx.PoolTimeout: (
                gettext(
                    "NKS at %(host)s timed out waiting for a free connection for %(method)s "
                    "%(path)s (limit %(limit)s s)"
                ),
                timeouts.pool,
            ),
        }.get(
            type(exc),
            (
                gettext(
                    "NKS at %(host)s timed out waiting for %(method)s %(path)s (limit %(limit)s s)"
                ),
                timeouts.read,
            ),
        )
        return NksError(
            uncertain(stage[0] % {**values, "limit": f"{stage[1]:g}"}, retryable),
            retryable=retryable,
            status=None,
            kind=ErrorKind.TIMEOUT,
        )
    return NksError(
        uncertain(
            gettext("Could not talk to NKS at %(host)s for %(method)s %(path)s: %(detail)s")
            % values,
            retryable,
        ),
        retryable=retryable,
        status=None,
        kind=ErrorKind.CONNECTION,
    )


def host_of(url: str | None) -> str:
    """``host[:port]`` of ``url``: what error messages name, never a user name or password."""
    try:
        parts = urlsplit(url or "")
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return "?"
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}" if port else host


def bounded_error(
    method: str,
    path: str,
    exc: outbound_http.OutboundError,
    *,
    idempotent: bool,
    host: str,
    identity: bool = False,
) -> NksError:
    """The error for an exchange stopped by its bounds: too slow in total, too big, compressed.

    Only a call past its deadline may succeed later; an answer too big or compressed will be
    the same next time. For a write, any of them may come after NKS took the request.
    """
    values = {"method": method, "path": path, "host": host}
    if isinstance(exc, outbound_http.DeadlineExceeded):
        values["limit"] = f"{exc.seconds:g}"
        message = (
            gettext(
                "The identity service at %(host)s took longer than %(limit)s s in total for "
                "%(method)s %(path)s"
            )
            if identity
            else gettext(
                "NKS at %(host)s took longer than %(limit)s s in total for %(method)s %(path)s"
            )
        ) % values
        return NksError(
            uncertain(message, idempotent),
            retryable=idempotent,
            status=None,
            kind=ErrorKind.TIMEOUT,
        )
    if isinstance(exc, outbound_http.BodyTooLarge):
        values["limit"] = outbound_http.format_size(exc.limit)
        message = (
            gettext(
                "The identity service at %(host)s answered %(method)s %(path)s with an answer "
                "larger than %(limit)s"
            )
            if identity
            else gettext(
                "NKS at %(host)s answered %(method)s %(path)s with an answer larger than %(limit)s"
            )
        ) % values
    else:
        values["encoding"] = text_excerpt(getattr(exc, "encoding", ""))
        message = (
            gettext(
                "The identity service at %(host)s answered %(method)s %(path)s compressed as "
                "%(encoding)s, which was not asked for"
            )
            if identity
            else gettext(
                "NKS at %(host)s answered %(method)s %(path)s compressed as %(encoding)s, which "
                "was not asked for"
            )
        ) % values
    return NksError(
        uncertain(message, idempotent),
        retryable=False,
        status=None,
        kind=ErrorKind.BAD_RESPONSE,
    )
