"""Celery tasks for NKS: a few lines each, taking ids, safe to run twice.

* ``poll_due_accounts`` (beat, every 5 s) claims the accounts whose poll is due on their rows
  and queues ``poll_account`` for each: every account is polled every NKS_POLL_SECONDS.
* ``poll_account`` polls one account; a lock lets only one poll of an account run at a time.
* ``submit_resize`` sends a resize once: it claims the request row before calling NKS.
* ``follow_resize`` reads a resize's progress back every NKS_RESIZE_FOLLOW_SECONDS while it is
  in flight (for at most NKS_RESIZE_FOLLOW_MINUTES; the regular poll advances it after that).
* ``sweep_resizes`` (beat) re-queues requests whose task was lost.

Old health samples and events are deleted by history retention (dashboard.retention).
"""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from nks import poller, resize_progress, resizes
from nks.models import ResizeState


@shared_task(ignore_result=True)
def poll_due_accounts() -> None:
    for account_id in poller.claim_due_accounts(timezone.now()):
        poll_account.apply_async((account_id,), expires=settings.NKS_POLL_SECONDS)


@shared_task(ignore_result=True)
def poll_account(account_id: int) -> None:
    # Failures are recorded on the account's and clusters' rows; beat polls again soon.
    poller.poll_account(account_id)


@shared_task(ignore_result=True)
def submit_resize(request_id: int) -> None:
    # Never retried: a write whose fate is unknown is followed up, not sent again.
    state = resizes.submit_resize(request_id)
    if state in (ResizeState.SUBMITTED, ResizeState.UNCERTAIN):
        follow_resize.apply_async((request_id,), countdown=settings.NKS_RESIZE_FOLLOW_SECONDS)


@shared_task(ignore_result=True)
def follow_resize(request_id: int) -> None:
    if resize_progress.follow_resize(request_id):
        follow_resize.apply_async((request_id,), countdown=settings.NKS_RESIZE_FOLLOW_SECONDS)


@shared_task(ignore_result=True)
def sweep_resizes() -> None:
    sweep = resize_progress.sweep_resizes(timezone.now())
    for request_id in sweep.resent:
        submit_resize.delay(request_id)
    for request_id in sweep.followed:
        follow_resize.delay(request_id)
