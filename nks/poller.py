"""Polling an NKS account: one concurrent snapshot (nks.client), stored (nks.snapshot_store).

One poll lists the clusters, then fetches every cluster's detail, nodegroups (list and each
detail) and events concurrently (``fetch_snapshot``), then stores them in a few bulk
statements. When the list itself fails, the failure is recorded on the account: nothing else
changes, and the old data stays and ages into "stale".

A poll is safe to run twice or concurrently for one account: a lock lets one through, and the
writes are upserts keyed by NKS's uuids.

A poll is bounded: Celery stops it after NKS_POLL_TIME_LIMIT_SECONDS (``SoftTimeLimitExceeded``
in this, the task's thread). The fetch runs in a thread of its own so that the stop is felt at
once, not after every call queued in the fetch's pool; the poll then records on the account
that it was stopped, releases its lock, and closes the account's client so the calls still
queued are never made. While a poll runs, ``poll_started_at`` on the account says since when:
the `nks_poll_stuck` rule reads it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid as uuid_module
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import datetime

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.utils import timezone
from django.utils.translation import gettext

from dashboard.celery import poll_time_limits
from dashboard.locks import ExpiringLock
from nks import client as nks
from nks.accounts import client_for, discard_client
from nks.models import (
    NksAccount,
)
from nks.resize_progress import advance_resizes_from_poll
from nks.snapshot_store import StoreSummary, store_snapshot

logger = logging.getLogger(__name__)


LOCK_MARGIN_SECONDS = 15


@dataclass(slots=True)
class PollResult:
    account: str
    polled: bool
    error: str = ""
    seconds: float = 0.0
    http_calls: int = 0
    store: StoreSummary | None = None
    fetch_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.polled and not self.error


def poll_lock(account_id: int) -> ExpiringLock:
    owner = f"{socket.gethostname()}:{os.getpid()}:{uuid_module.uuid4().hex[:8]}"
    # Longer than a poll can live (Celery kills it at its hard time limit), so two polls of
    # one account never overlap; short enough that a killed worker blocks only a few polls.
    ttl = poll_time_limits().hard + LOCK_MARGIN_SECONDS
    return ExpiringLock(name=f"nks-poll:{account_id}", owner=owner, ttl=ttl)


def record_account_failure(account_id: int, error: nks.NksError, now: datetime) -> None:
    from django.db.models import F

    NksAccount.objects.filter(pk=account_id).update(
        last_poll_at=now,
        last_error=error.message,
        last_error_kind=error.kind.value,
        last_error_at=now,
        consecutive_failures=F("consecutive_failures") + 1,
        polls_total=F("polls_total") + 1,
        poll_failures_total=F("poll_failures_total") + 1,
    )


def stopped_error() -> nks.NksError:
    return nks.NksError(
        gettext(
            "The poll ran over %(seconds)s s and was stopped (NKS_POLL_TIME_LIMIT_SECONDS): "
            "NKS answers too slowly or not at all. The next poll tries again."
        )
        % {"seconds": settings.NKS_POLL_TIME_LIMIT_SECONDS},
        retryable=True,
        status=None,
        kind=nks.ErrorKind.TIMEOUT,
    )


def fetch_in_thread(client: nks.NksClient, account_id: int) -> nks.AccountSnapshot:
    """`fetch_snapshot` in a thread of its own, waited for here.

    Celery's soft time limit raises in this thread; waiting on the fetch's own pool instead
    would hold the stop back until every queued call had ended (each with its own timeout).
    A stopped poll's fetch thread is left to end by itself: it writes nothing.
    """
    future: Future[nks.AccountSnapshot] = Future()

    def fetch() -> None:
        future.set_running_or_notify_cancel()
        try:
            future.set_result(nks.fetch_snapshot(client, max_workers=settings.NKS_POLL_WORKERS))
        except BaseException as problem:  # handed to the waiting thread, raised there
            future.set_exception(problem)

    threading.Thread(target=fetch, name=f"nks-poll-{account_id}", daemon=True).start()
    return future.result()


def poll_account(account_id: int) -> PollResult:
    """Poll one account now, unless another poll of it is running (then ``polled`` is False)."""
    account = NksAccount.objects.get(pk=account_id)
    lock = poll_lock(account_id)
    if not lock.acquire():
        logger.info("NKS account %s is being polled already; skipping", account.name)
        return PollResult(account=account.name, polled=False)
    started_at = timezone.now()
    started = time.monotonic()
    try:
        NksAccount.objects.filter(pk=account_id).update(poll_started_at=started_at)
        return _poll(account, started_at, started)
    except SoftTimeLimitExceeded:
        # Celery stopped the poll: the account says so, and the account's client goes, so
        # the stopped fetch's queued calls are not made (those in flight end by their own
        # timeouts).
        discard_client(account_id)
        error = stopped_error()
        logger.warning("Polling NKS account %s was stopped: %s", account.name, error.message)
        record_account_failure(account_id, error, started_at)
        return PollResult(
            account=account.name,
            polled=True,
            error=error.message,
            seconds=time.monotonic() - started,
        )
    finally:
        try:
            # Only this poll's mark: a poll that outlived its lock must not clear a newer one.
            NksAccount.objects.filter(pk=account_id, poll_started_at=started_at).update(
                poll_started_at=None
            )
        finally:
            lock.release()


def _poll(account: NksAccount, now: datetime, started: float) -> PollResult:
    from django.db.models import F

    account_id = account.pk
    try:
        client = client_for(account)
        snapshot = fetch_in_thread(client, account_id)
    except ValueError as problem:
        # Credentials edited into an unusable state: say so on the account, every poll.
        error = nks.NksError(
            gettext("The account cannot be used: %(problem)s.") % {"problem": problem},
            retryable=False,
            status=None,
            kind=nks.ErrorKind.CLIENT,
        )
        record_account_failure(account_id, error, now)
        return PollResult(account=account.name, polled=True, error=error.message)
    except nks.NksError as error:
        logger.warning("Polling NKS account %s failed: %s", account.name, error.message)
        record_account_failure(account_id, error, now)
        return PollResult(
            account=account.name,
            polled=True,
            error=error.message,
            seconds=time.monotonic() - started,
        )
    fetched = time.monotonic() - started
    store = store_snapshot(account, snapshot, now)
    advance_resizes_from_poll(account_id)
    seconds = time.monotonic() - started
    NksAccount.objects.filter(pk=account_id).update(
        last_poll_at=now,
        last_success_at=now,
        last_poll_seconds=seconds,
        last_poll_calls=snapshot.http_calls,
        last_error="",
        last_error_kind="",
        consecutive_failures=0,
        polls_total=F("polls_total") + 1,
    )
    return PollResult(
        account=account.name,
        polled=True,
        seconds=seconds,
        http_calls=snapshot.http_calls,
        store=store,
        fetch_seconds=fetched,
    )


def claim_due_accounts(now: datetime) -> list[int]:
    """Accounts whose next poll is due, each claimed by moving its next poll forward.

    The claim is a conditional update on the row, so beat running twice (or two beats by
    mistake) still dispatches one poll per account per interval.
    """
    from datetime import timedelta

    from django.db.models import Q

    interval = timedelta(seconds=settings.NKS_POLL_SECONDS)
    claimed = []
    due = NksAccount.objects.filter(enabled=True).filter(
        Q(next_poll_at__isnull=True) | Q(next_poll_at__lte=now)
    )
    for pk, next_poll_at in due.values_list("pk", "next_poll_at"):
        won = (
            NksAccount.objects.filter(pk=pk, next_poll_at=next_poll_at).update(
                next_poll_at=now + interval
            )
            == 1
        )
        if won:
            claimed.append(pk)
    return claimed
