"""Posting a channel message: the one place that talks HTTP to Dooray!, Slack and webhooks.

The webhook URL is the channel's credential (whoever has it can post), so nothing here puts
it in an exception, a log line or a stored answer: httpx's own errors name the URL, so they
are reduced to what went wrong. Redirects are never followed: a redirect would carry the
message (and, for a webhook, its signature) to a host the operator did not name. A post is
bounded in total (``deadline``: connect, sending, every read of the answer) and its answer in
size (``RESPONSE_BODY_LIMIT``, compressed answers refused) by ``dashboard.outbound_http``.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import http
import unicodedata
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

import httpx

from dashboard import outbound_http

# How much of an endpoint's answer is kept on the row: enough to see why it refused.
RESPONSE_LIMIT = 500
# The most of an answer read at all: an endpoint's reply is a status and a short text.
RESPONSE_BODY_LIMIT = 64 * 1024
# A Retry-After longer than this is not believed (a misconfigured proxy's "come back
# tomorrow" must not silence alerts for a day); the row retries after this instead.
RETRY_AFTER_MAX_SECONDS = 3600
USER_AGENT = "lease-dashboard-alerts/1"
SIGNATURE_HEADER = "X-Dashboard-Signature"
TIMESTAMP_HEADER = "X-Dashboard-Timestamp"


class Outcome(enum.StrEnum):
    DELIVERED = "delivered"
    RETRY = "retry"  # 5xx, 429, timeout, connection failure: the same post may succeed later
    PERMANENT = "permanent"  # 4xx (not 429) or a redirect: it will not, until someone acts


@dataclass(frozen=True, slots=True)
class PostResult:
    outcome: Outcome
    # "HTTP 404 Not Found: no such hook" or "timed out after 10 s": never the URL.
    text: str
    # The status line and a bounded, visible excerpt of the body ("" when none came back).
    response: str = ""
    retry_after: float | None = None


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """`sha256=<hex HMAC-SHA256 of "<timestamp>.<body>">`, as Slack and Stripe sign theirs.

    The timestamp is inside the signed text, so a receiver that rejects old timestamps
    cannot be fed a recorded message again (replay).
    """
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def _visible(text: str, limit: int = RESPONSE_LIMIT) -> str:
    """An endpoint's answer for the admin: one line, control characters as escapes, bounded."""
    out = []
    for character in text:
        if unicodedata.category(character) in {"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"}:
            code = ord(character)
            out.append(" " if character in "\r\n\t" else f"\\u{code:04x}")
        else:
            out.append(character)
    single = " ".join("".join(out).split())
    return single if len(single) <= limit else single[: limit - 1] + "…"


def _scrub(text: str, url: str) -> str:
    """Text with the URL (and its path and query, the secret parts) taken out."""
    parts = urlsplit(url)
    for secret in (url, url.rstrip("/"), parts.path, parts.query):
        if secret and len(secret) > 1:
            text = text.replace(secret, "…")
    return text


def _retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date), bounded."""
    if not value:
        return None
    value = value.strip()
    seconds: float | None
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            moment = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        seconds = (moment - now).total_seconds()
    return min(max(seconds, 1.0), RETRY_AFTER_MAX_SECONDS)


def _status_line(response: httpx.Response) -> str:
    try:
        phrase = http.HTTPStatus(response.status_code).phrase
    except ValueError:
        phrase = response.reason_phrase or ""
    return f"HTTP {response.status_code} {phrase}".strip()


def post(
    url: str,
    body: bytes,
    *,
    timeout: float,
    deadline: float,
    signing_secret: str = "",
    now: datetime | None = None,
) -> PostResult:
    """POST `body` (JSON) to `url` once and say what came of it; never raises for HTTP.

    `timeout` bounds each socket operation, `deadline` the whole post.
    """
    headers = {"Content-Type": "application/json; charset=utf-8", "User-Agent": USER_AGENT}
    moment = now or datetime.now(UTC)
    if signing_secret:
        timestamp = str(int(moment.timestamp()))
        headers[TIMESTAMP_HEADER] = timestamp
        headers[SIGNATURE_HEADER] = signature(signing_secret, timestamp, body)
    try:
        with outbound_http.bounded_client(timeout=httpx.Timeout(timeout)) as client:
            response = outbound_http.send(
                client,
                "POST",
                url,
                content=body,
                headers=headers,
                deadline=outbound_http.Deadline(deadline),
                max_body=RESPONSE_BODY_LIMIT,
            )
    except outbound_http.OutboundError as error:
        # Whatever the status was, the answer never came whole: the same post may do better.
        return PostResult(Outcome.RETRY, str(error))
    except httpx.TimeoutException:
        return PostResult(Outcome.RETRY, f"no answer within {timeout:g} s (timed out)")
    except httpx.HTTPError as error:
        # The exception's text often quotes the URL; keep only what went wrong.
        reason = _scrub(str(error), url) or type(error).__name__
        return PostResult(Outcome.RETRY, f"{type(error).__name__}: {_visible(reason, 200)}")
    status = _status_line(response)
    excerpt = _visible(_scrub(response.text, url))
    shown = f"{status}: {excerpt}" if excerpt else status
    code = response.status_code
    if 200 <= code < 300:
        return PostResult(Outcome.DELIVERED, status, shown)
    if 300 <= code < 400:
        # Where it points is not recorded: it may be as secret as the URL itself.
        return PostResult(
            Outcome.PERMANENT,
            f"{status}: a redirect, not followed (the channel's URL must be the final one)",
            status,
        )
    if code == 429:
        wait = _retry_after(response.headers.get("Retry-After"), moment)
        return PostResult(Outcome.RETRY, f"{status} (rate limited)", shown, retry_after=wait)
    if 400 <= code < 500:
        return PostResult(Outcome.PERMANENT, shown, shown)
    return PostResult(Outcome.RETRY, shown, shown)
