"""The overview page's NKS region: counts by verdict, the clusters that need a look, resizes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from dashboard.timefmt import iso_js
from nks import queries
from nks.models import Health
from nks.presenters.clusters import ClusterRow, clusters_page
from nks.presenters.common import Banner
from nks.presenters.resizes import ResizeRow, resize_rows

OVERVIEW_LIST_LIMIT = 10


@dataclass(slots=True)
class NksOverview:
    accounts: int
    banners: list[Banner]
    counts: list[tuple[Health, int]]  # worst verdict first
    attention: list[ClusterRow]
    more: int
    in_flight: list[ResizeRow]
    server_now: str


def nks_overview(now: datetime) -> NksOverview:
    page = clusters_page(now, include_gone=False)
    attention = [row for row in page.rows if row.health != Health.HEALTHY]
    return NksOverview(
        accounts=len(page.accounts),
        banners=page.banners,
        counts=list(page.counts.items()),
        attention=attention[:OVERVIEW_LIST_LIMIT],
        more=max(0, len(attention) - OVERVIEW_LIST_LIMIT),
        in_flight=resize_rows(queries.in_flight_resizes(), now),
        server_now=iso_js(now),
    )
