"""A throw-away PostgreSQL database for a benchmark, on the server of DATABASE_URL."""

from __future__ import annotations

import os
import sys
from urllib.parse import urlsplit, urlunsplit


def create_bench_database(name: str) -> tuple[str, str]:
    """(Re)create database `name`; returns its URL and the maintenance database's URL."""
    if not name.startswith("bench_"):
        raise ValueError("benchmark databases are named bench_*, so nothing else is dropped")
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        sys.exit("Set DATABASE_URL to a PostgreSQL server (postgres://user@host:5432/db).")
    import psycopg

    parts = urlsplit(url)
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        connection.execute(f"CREATE DATABASE {name}")
    return urlunsplit(parts._replace(path=f"/{name}")), admin


def drop_bench_database(name: str, admin: str) -> None:
    import psycopg

    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
