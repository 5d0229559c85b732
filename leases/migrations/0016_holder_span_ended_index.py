"""An index on LeaseHolderSpan.ended_at: history retention finds closed spans by their end.

Built CONCURRENTLY on PostgreSQL: the spans table of a flapping fleet is large, and a plain
CREATE INDEX would block the watchers' span writes until it is done. Expand only: the
previous release never reads the index, so it runs beside this migration unharmed.
"""

from typing import Any

from django.db import migrations, models


class AddIndexConcurrentlyOnPostgres(migrations.AddIndex):
    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)
            return
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.add_index(model, self.index, concurrently=True)

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
            return
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.remove_index(model, self.index, concurrently=True)


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run inside a transaction.
    atomic = False

    dependencies = [
        ("leases", "0015_overview_count_indexes"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="leaseholderspan",
            index=models.Index(fields=["ended_at"], name="holder_span_ended"),
        ),
    ]
