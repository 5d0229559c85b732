"""A throw-away PostgreSQL database for a benchmark, on the server of DATABASE_URL, and a
child process per size, each with a database of its own."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

PREFIX = "bench_"


def add_database_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db-prefix",
        default=PREFIX,
        help="how the benchmark's databases are named (bench_...): give each person or run "
        "sharing a server its own, e.g. bench_alice_",
    )


def create_bench_database(name: str) -> tuple[str, str]:
    """(Re)create database `name`; returns its URL and the maintenance database's URL."""
    if not name.startswith(PREFIX) or not name.replace("_", "").isalnum():
        raise ValueError("benchmark databases are named bench_*, so nothing else is dropped")
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        sys.exit("Set DATABASE_URL to a PostgreSQL server (postgres://user@host:5432/db).")
    import psycopg

    admin = database_url(url, "postgres")
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        connection.execute(f"CREATE DATABASE {name}")
    return database_url(url, name), admin


def database_url(url: str, name: str) -> str:
    """`url` with another database."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def drop_bench_database(name: str, admin: str) -> None:
    import psycopg

    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def child_per_size(
    script: str,
    sizes: list[int],
    database: Callable[[int], str],
    child_args: list[str],
    env: dict[str, str],
    keep: bool = False,
    reuse: bool = False,
) -> dict[int, Any]:
    """Run `script --child <size> <child_args>` once per size, each on a database of its own
    (`database(size)`: re-created, dropped afterwards unless `keep`; with `reuse`, the one
    kept before), with `env` over ours less REDIS_*: the child prints its figures as JSON on
    its last line of output, its progress on stderr (passed on)."""
    results: dict[int, Any] = {}
    for size in sizes:
        name = database(size)
        if reuse:
            url = database_url(os.environ["DATABASE_URL"], name)
            admin = database_url(url, "postgres")
        else:
            url, admin = create_bench_database(name)
        child_env = {
            **{key: value for key, value in os.environ.items() if not key.startswith("REDIS_")},
            **env,
            "DATABASE_URL": url,
        }
        try:
            done = subprocess.run(
                [sys.executable, script, "--child", str(size), *child_args],
                env=child_env,
                capture_output=True,
                text=True,
                check=False,
                cwd=Path(script).resolve().parent.parent,
            )
            if done.returncode != 0:
                sys.exit(f"size {size} failed:\n{done.stdout}\n{done.stderr}")
            if done.stderr.strip():
                print(done.stderr.strip(), file=sys.stderr)
            results[size] = json.loads(done.stdout.strip().splitlines()[-1])
        finally:
            if not (keep or reuse):
                drop_bench_database(name, admin)
    return results
