"""Indexes that serve the Cluster and Namespace sorts in natural name order.

The sorts compare `name_key` byte by byte (PostgreSQL's "C" collation; SQLite compares bytes
anyway), so the index must hold the same expression: Django's Index cannot name a collation
that exists on one database only, hence plain SQL per vendor. Without them the database sorts
every lease of a namespace on each refresh (0.1 ms became 14 ms on 15,000 leases).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

INDEXES = {
    "lease_cluster_natural": "(cluster_id, namespace, {name_key}, name)",
    "lease_namespace_natural": "(namespace, {name_key}, name, cluster_id)",
}


def create(apps: Any, schema_editor: Any) -> None:
    name_key = (
        'name_key COLLATE "C"' if schema_editor.connection.vendor == "postgresql" else "name_key"
    )
    for index, columns in INDEXES.items():
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {index} ON leases_lease "
            f"{columns.format(name_key=f'({name_key})')}"
        )


def drop(apps: Any, schema_editor: Any) -> None:
    for index in INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {index}")


class Migration(migrations.Migration):
    dependencies = [("leases", "0005_leader_elections")]

    operations = [migrations.RunPython(create, drop)]
