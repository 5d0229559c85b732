"""Indexes that let problems first read one page of the leases without a problem.

Those all rank alike, so they are in natural name order (name_key byte by byte, then name,
namespace, cluster): `lease_natural` serves it across clusters, `lease_cluster_name` within
one cluster (the filter names the cluster first). Neither holds a column a renewal moves,
so renewals stay in-place (HOT) updates. The fencing index holds only the few leases whose
token ever came back. Plain SQL per vendor for the "C" collation, as in 0006.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

INDEXES = {
    "lease_natural": "({name_key}, name, namespace, cluster_id)",
    "lease_cluster_name": "(cluster_id, {name_key}, name, namespace)",
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
    schema_editor.execute(
        "CREATE INDEX IF NOT EXISTS lease_fencing_reused ON leases_lease (fencing_reused_at) "
        "WHERE fencing_reused_at IS NOT NULL"
    )


def drop(apps: Any, schema_editor: Any) -> None:
    for index in [*INDEXES, "lease_fencing_reused"]:
        schema_editor.execute(f"DROP INDEX IF EXISTS {index}")


class Migration(migrations.Migration):
    dependencies = [("leases", "0011_lease_expiry_schedule")]

    operations = [migrations.RunPython(create, drop)]
