"""`nks_poll_stuck`: an NKS poll that has been running far longer than a poll can.

Celery stops a poll at its soft time limit (NKS_POLL_TIME_LIMIT_SECONDS) and kills it soon
after, so a poll still marked running well past that was not stopped: the limit is not
enforced where it runs, or its worker died mid-poll and the mark stayed. Either way a worker
process may be held, the account's polls wait for its lock, and the account's data ages.

Judged only by what the account row knows: ``poll_started_at``, set under the poll's lock
when a poll starts and cleared when it ends however it ends, and ``last_poll_at``, the start
of the latest poll that completed. An incident stays open until a poll completes: a poll
that merely starts after a dead one is not proof that polling works again.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.utils.translation import gettext_noop

from alerts.conditions import (
    Condition,
    Message,
    RuleContext,
    RuleOutcome,
    duration_fact,
    fact,
    time_fact,
)
from alerts.models import Incident, Rule
from alerts.nks_rules import NONE_RECORDED
from alerts.nks_scope import nks_link
from nks.models import NksAccount

KEY_PREFIX = f"{Rule.NKS_POLL_STUCK}:"


def stuck_threshold(ctx: RuleContext) -> timedelta:
    """The admin row's grace, else ALERT_NKS_POLL_STUCK_SECONDS, else twice the time limit."""
    if ctx.config.grace_seconds is not None:
        return timedelta(seconds=ctx.config.grace_seconds)
    if settings.ALERT_NKS_POLL_STUCK_SECONDS is not None:
        return timedelta(seconds=settings.ALERT_NKS_POLL_STUCK_SECONDS)
    return timedelta(seconds=2 * settings.NKS_POLL_TIME_LIMIT_SECONDS)


def nks_poll_stuck(ctx: RuleContext) -> RuleOutcome:
    """One incident per enabled account whose running poll is older than the threshold."""
    now, outcome = ctx.now, RuleOutcome()
    threshold = stuck_threshold(ctx)
    accounts = NksAccount.objects.filter(enabled=True).defer("password", "token")
    for account in accounts:
        key = f"{KEY_PREFIX}{account.name}"
        since = _stuck_since(account, ctx.unresolved.get(key), now, threshold)
        if since is None:
            continue
        outcome.add(
            Condition(
                key=key,
                title=Message.gettext_noop(
                    "NKS account %(account)s: a poll is stuck", account=account.name
                ),
                cluster="",
                since=since,
                hold=threshold,
                link=nks_link(),
                details={"facts": _facts(account, since, threshold)},
            )
        )
    for incident in ctx.ending(outcome):
        outcome.notes[incident.key] = Message.gettext_noop(
            "a poll completed (or the account was disabled)"
        )
    return outcome


def _stuck_since(
    account: NksAccount, open_incident: Incident | None, now: datetime, threshold: timedelta
) -> datetime | None:
    started = account.poll_started_at
    if started is not None and now - started >= threshold:
        return started
    if open_incident is not None:
        completed = account.last_poll_at
        # The stuck poll, or one after it, has completed only if its start is recorded.
        if completed is None or completed < open_incident.since:
            return open_incident.since
    return None


def _facts(account: NksAccount, since: datetime, threshold: timedelta) -> list[dict[str, object]]:
    return [
        fact(
            gettext_noop("Source"),
            Message.gettext_noop("NKS polls of account %(account)s", account=account.name),
        ),
        time_fact(gettext_noop("Running poll started"), account.poll_started_at),
        time_fact(gettext_noop("Stuck since"), since),
        duration_fact(
            gettext_noop("Poll time limit"),
            timedelta(seconds=settings.NKS_POLL_TIME_LIMIT_SECONDS),
        ),
        duration_fact(gettext_noop("Threshold"), threshold),
        time_fact(gettext_noop("Last completed poll started"), account.last_poll_at),
        time_fact(gettext_noop("Last successful poll"), account.last_success_at),
        fact(gettext_noop("Last error"), account.last_error or NONE_RECORDED),
        fact(
            gettext_noop("Meanwhile"),
            Message.gettext_noop(
                "the poll's worker process may be held, and this account's polls wait for its lock"
            ),
        ),
    ]
