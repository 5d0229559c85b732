"""PostgreSQL timestamps parsed by psycopg's C loader instead of Django's pure-Python one.

Django 5.2 reads `timestamptz` with a loader derived from psycopg's pure-Python class (Django
ticket #36960), so every timestamp a query returns is parsed in Python: about 5 µs each, a
millisecond for the 200 of one Leases table refresh, which every open browser asks for every
few seconds. The loader below keeps Django's class and its time zone handling (Django's
cursors compare its `timezone`), and hands the parsing to psycopg's C loader when psycopg's
binary package provides one. Results are the same aware datetimes.
"""

from __future__ import annotations

from datetime import datetime, tzinfo
from functools import cache
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.postgresql.psycopg_any import BaseTzLoader
from psycopg import adapters
from psycopg.abc import AdaptContext
from psycopg.adapt import Loader
from psycopg.postgres import types
from psycopg.pq import Format
from psycopg.types.datetime import TimestamptzLoader

TIMESTAMPTZ_OID = types["timestamptz"].oid
_PROBE = b"2000-01-01 00:00:00+00"
# The class psycopg itself registers: the C one when psycopg[binary] is installed.
FAST_LOADER: type[Loader] = adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT) or TimestamptzLoader


class CParsedTzLoader(BaseTzLoader):  # type: ignore[misc]
    """Django's loader (same `timezone`, same result) with the C loader's parsing."""

    def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
        super().__init__(oid, context)
        fast = FAST_LOADER(oid, context)
        self._parse = fast.load
        if fast.load(_PROBE).tzinfo is self.timezone:
            # The session's time zone is Django's (UTC, as Django sets it): the C loader's
            # datetimes are already the ones `load` would make, so psycopg calls it directly,
            # without a Python call per value (300 per Leases table refresh).
            self.load = fast.load  # type: ignore[method-assign]

    def load(self, data: Any) -> datetime:
        return self._parse(data).replace(tzinfo=self.timezone)


@cache
def _loader_for(timezone: tzinfo | None) -> type[CParsedTzLoader]:
    return type("CParsedTzLoader", (CParsedTzLoader,), {"timezone": timezone})


def use_c_timestamp_parsing(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    """`connection_created` receiver: swap the new connection's timestamptz loader."""
    if connection.vendor != "postgresql" or FAST_LOADER is TimestamptzLoader:
        return
    adapters_map = connection.connection.adapters
    django_loader = adapters_map.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
    if not issubclass(django_loader, BaseTzLoader) or issubclass(django_loader, CParsedTzLoader):
        return
    adapters_map.register_loader("timestamptz", _loader_for(django_loader.timezone))
