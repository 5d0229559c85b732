"""What several NKS pages show alike: banners about polling, ages, and ready bars."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from dashboard.timefmt import format_duration
from nks.models import NksAccount, NksCluster


def age_text(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return "never"
    return f"{format_duration((now - moment).total_seconds())} ago"


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
        return ReadyBar(ready, not_ready, 0.0, 0.0, "unknown", False)
    total = ready + not_ready
    if total == 0:
        return ReadyBar(ready, not_ready, 0.0, 0.0, "0 nodes", True)
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
                Banner("warning", f"Account {account.name} is disabled: it is not polled.")
            )
            continue
        if account.last_poll_at is None:
            banners.append(
                Banner(
                    "warning",
                    f"Account {account.name} has not been polled yet. Polls run on the Celery "
                    "beat and default worker (`make run` starts both; "
                    "`python manage.py poll_nks` polls once now).",
                )
            )
            continue
        data_age = age_text(account.last_success_at, now)
        if account.consecutive_failures:
            banners.append(
                Banner(
                    "error",
                    f"Polling account {account.name} failed "
                    f"{account.consecutive_failures} time"
                    f"{'s' if account.consecutive_failures != 1 else ''} in a row (last "
                    f"{age_text(account.last_error_at, now)}): {account.last_error} "
                    f"The clusters below show what was polled {data_age}.",
                )
            )
        elif account.is_stale(now):
            banners.append(
                Banner(
                    "error",
                    f"No poll of account {account.name} for {data_age.removesuffix(' ago')}: "
                    "is the Celery beat or worker down? Its clusters are shown as unknown.",
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
                f"NKS stopped listing this cluster {age_text(cluster.gone_at, now)}: it is "
                "gone. What the dashboard last saw is kept below.",
            )
        )
    elif cluster.last_error:
        banners.append(
            Banner(
                "error",
                f"The last poll could not fetch everything about this cluster "
                f"({age_text(cluster.last_error_at, now)}): {cluster.last_error} Parts not "
                f"fetched are as of {age_text(cluster.refreshed_at, now)}.",
            )
        )
    elif cluster.is_stale(now) and not cluster.account.is_stale(now):
        banners.append(
            Banner(
                "error",
                f"This cluster's data is {age_text(cluster.refreshed_at, now)}: shown as unknown.",
            )
        )
    return banners
