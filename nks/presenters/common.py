"""What several NKS pages show alike: banners about polling, ages, and ready bars."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.utils.translation import gettext, ngettext

from dashboard.timefmt import format_duration, relative_text
from nks.models import NksAccount, NksCluster


def age_text(moment: datetime | None, now: datetime) -> str:
    """How long ago, as a phrase ("5 min ago"); "never" when it has not happened."""
    if moment is None:
        return gettext("never")
    return relative_text((now - moment).total_seconds())


def length_text(moment: datetime | None, now: datetime) -> str:
    """How long since, as a length ("5 min"); "ever" has no length, so "—"."""
    if moment is None:
        return "—"
    return format_duration((now - moment).total_seconds())


@dataclass(frozen=True, slots=True)
class Banner:
    level: str  # error, warning, info
    text: str


@dataclass(frozen=True, slots=True)
class ReadyBar:
    """Ready and not-ready node counts as percentages of a bar."""

    ready: int | None
    not_ready: int | None
    ready_pct: float
    not_ready_pct: float
    text: str
    known: bool


def ready_bar(ready: int | None, not_ready: int | None) -> ReadyBar:
    if ready is None or not_ready is None:
        return ReadyBar(ready, not_ready, 0.0, 0.0, gettext("unknown"), False)
    total = ready + not_ready
    if total == 0:
        return ReadyBar(ready, not_ready, 0.0, 0.0, gettext("0 nodes"), True)
    return ReadyBar(
        ready,
        not_ready,
        round(100 * ready / total, 1),
        round(100 * not_ready / total, 1),
        f"{ready}:{not_ready}",
        True,
    )


def account_banners(accounts: Iterable[NksAccount], now: datetime) -> list[Banner]:
    """What is wrong with polling, per account: old data must never pass as current."""
    banners = []
    for account in accounts:
        if not account.enabled:
            banners.append(
                Banner(
                    "warning",
                    gettext("Account %(account)s is disabled: it is not polled.")
                    % {"account": account.name},
                )
            )
            continue
        if account.last_poll_at is None:
            banners.append(
                Banner(
                    "warning",
                    gettext(
                        "Account %(account)s has not been polled yet. Polls run on the Celery "
                        "beat and default worker (`make run` starts both; "
                        "`python manage.py poll_nks` polls once now)."
                    )
                    % {"account": account.name},
                )
            )
            continue
        data_age = age_text(account.last_success_at, now)
        if account.consecutive_failures:
            banners.append(
                Banner(
                    "error",
                    ngettext(
                        "Polling account %(account)s failed %(count)s time in a row (last "
                        "%(last)s): %(error)s The clusters below show what was polled %(age)s.",
                        "Polling account %(account)s failed %(count)s times in a row (last "
                        "%(last)s): %(error)s The clusters below show what was polled %(age)s.",
                        account.consecutive_failures,
                    )
                    % {
                        "account": account.name,
                        "count": account.consecutive_failures,
                        "last": age_text(account.last_error_at, now),
                        "error": account.last_error,
                        "age": data_age,
                    },
                )
            )
        elif account.is_stale(now):
            banners.append(
                Banner(
                    "error",
                    gettext(
                        "No poll of account %(account)s for %(length)s: is the Celery beat or "
                        "worker down? Its clusters are shown as unknown."
                    )
                    % {
                        "account": account.name,
                        "length": length_text(account.last_success_at, now),
                    },
                )
            )
    return banners


def cluster_banners(cluster: NksCluster, now: datetime) -> list[Banner]:
    """The account's banners, then what is wrong with this one cluster's data."""
    banners = account_banners([cluster.account], now)
    if cluster.gone_at is not None:
        banners.append(
            Banner(
                "warning",
                gettext(
                    "NKS stopped listing this cluster %(age)s: it is gone. What the dashboard "
                    "last saw is kept below."
                )
                % {"age": age_text(cluster.gone_at, now)},
            )
        )
    elif cluster.last_error:
        banners.append(
            Banner(
                "error",
                gettext(
                    "The last poll could not fetch everything about this cluster (%(age)s): "
                    "%(error)s Parts not fetched are as of %(data_age)s."
                )
                % {
                    "age": age_text(cluster.last_error_at, now),
                    "error": cluster.last_error,
                    "data_age": age_text(cluster.refreshed_at, now),
                },
            )
        )
    elif cluster.is_stale(now) and not cluster.account.is_stale(now):
        banners.append(
            Banner(
                "error",
                gettext("This cluster's data is from %(age)s: shown as unknown.")
                % {"age": age_text(cluster.refreshed_at, now)},
            )
        )
    return banners
