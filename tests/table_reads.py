"""What PostgreSQL has read of a table in the open transaction: the rows-read tests' count.

The scale tests assert that a page, a region or a rule reads the same rows of a table with
few and with many healthy leases; PostgreSQL counts each backend's reads per table
(`pg_stat_xact_user_tables`: sequential reads plus index fetches), no other backend's in it.
"""

from __future__ import annotations

from django.db import connection


def rows_read(table: str = "leases_lease") -> int:
    """Rows of `table` this connection has read in its open transaction (PostgreSQL only)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
            "FROM pg_stat_xact_user_tables WHERE relname = %s",
            [table],
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0
