"""The resize audit page: every request, filtered, newest first."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from dashboard.timefmt import iso_js
from nks import queries
from nks.presenters.resizes import ResizeRow, resize_rows

AUDIT_PAGE_SIZE = 200


@dataclass(slots=True)
class AuditPage:
    rows: list[ResizeRow]
    total: int
    truncated: bool
    server_now: str


def resize_audit(filters: dict[str, str], now: datetime) -> AuditPage:
    requests = queries.filtered_resizes(filters)
    total = requests.count()
    return AuditPage(
        rows=resize_rows(requests[:AUDIT_PAGE_SIZE], now),
        total=total,
        truncated=total > AUDIT_PAGE_SIZE,
        server_now=iso_js(now),
    )
