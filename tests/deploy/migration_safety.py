"""Which migration operations an older release, still running beside them, cannot survive.

During a rolling update the previous release's web pods and workers keep serving on the new
schema until they are replaced, and a rollback runs the previous image on it too. So a
migration may only *expand* the schema; taking away what the previous release reads or
writes (the *contract* step) ships one release after the code stopped using it.

The rule, operation by operation (in `SeparateDatabaseAndState`, only its database
operations count, since the others change no table):

- ``RemoveField``: drops a column (a many-to-many field: its table).
- ``RenameField``: renames a column (unless its ``db_column`` keeps the name).
- ``DeleteModel``: drops a table (proxy and unmanaged models own none).
- ``RenameModel``, ``AlterModelTable``: rename a table (unless ``db_table`` keeps the name).
- ``AlterField`` that renames the column (a new ``db_column``), makes a nullable column NOT
  NULL (the previous release may write NULL), changes the column's type (another field
  class; a ``CharField`` made shorter, a ``DecimalField`` with fewer digits), or swaps the
  relation's target.
- ``AddField`` of a NOT NULL column without ``db_default`` to a table an earlier migration
  made: Django drops a ``default`` from the column once the rows are filled, so every
  ``INSERT`` of the previous release, which does not name the column, fails. Give it
  ``db_default`` (or ``null=True``). A table made in the same migration is new to everyone.
- ``RunSQL`` whose forward SQL drops a table or column, renames anything, or sets NOT NULL.

Not read (a reviewer's job): ``RunPython`` (a data migration that changes what a column
holds, such as encrypting it, is a contract step too), constraints and indexes (which make
no column disappear), and migrations of apps that are not this project's.

Every migration is checked, not only those since the last release: the repository has no
release tags, and with the shipped ones in the allow-list no baseline is needed (an edit to
a shipped migration that adds a finding fails as well).

A finding is allowed only when `deploy/migration-allowlist.toml` names its migration and its
exact text, with a reason: the contract step of an earlier expand, or a migration that
shipped before this rule. An entry that no longer matches anything is an error too, so the
list stays true.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import models
from django.db.migrations import Migration, operations
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.operations.base import Operation
from django.db.migrations.state import ModelState, ProjectState

from tests.conftest import REPO_ROOT

ALLOWLIST = REPO_ROOT / "deploy" / "migration-allowlist.toml"

# Forward SQL that takes away a table or a column, renames anything, or forbids NULL in a
# column; `ALTER TABLE t DROP c` needs no COLUMN keyword in PostgreSQL. A pattern cannot read
# every statement: it catches the usual forms, a reviewer reads the rest.
DESTRUCTIVE_SQL = re.compile(
    r"\bDROP\s+(TABLE|COLUMN)\b"
    r"|\bALTER\s+TABLE\s+(IF\s+EXISTS\s+)?(ONLY\s+)?\S+\s+DROP\s+(?!CONSTRAINT\b)"
    r"|\bRENAME\b"
    r"|\bSET\s+NOT\s+NULL\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Finding:
    migration: str  # "app_label.0007_name"
    text: str  # what it does, the allow-list's key: "drops column leases_lease.raw"

    def __str__(self) -> str:
        return f"{self.migration}: {self.text}"


@dataclass(frozen=True)
class Allowed:
    migration: str
    findings: tuple[str, ...]
    reason: str


def project_apps(root: Path = REPO_ROOT) -> set[str]:
    """The labels of this project's own apps (not Django's, not installed packages')."""
    from django.apps import apps

    venv = root / ".venv"
    return {
        config.label
        for config in apps.get_app_configs()
        if Path(config.path).resolve().is_relative_to(root)
        and not Path(config.path).resolve().is_relative_to(venv.resolve())
    }


def project_plan() -> list[tuple[str, Migration, bool]]:
    """Every installed migration in an order the graph allows, and whether it is checked.

    Read from the files (no database). Other apps' migrations take part in the state, so
    that a foreign key to `auth.User` resolves, but only this project's are checked.
    """
    own = project_apps()
    graph = MigrationLoader(None, ignore_no_migrations=True).graph
    order: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for leaf in sorted(graph.leaf_nodes()):
        for node in graph.forwards_plan(leaf):
            if node not in seen:
                seen.add(node)
                order.append(node)
    return [
        (app_label, graph.nodes[app_label, name], app_label in own) for app_label, name in order
    ]


def check_plan(plan: Iterable[tuple[str, Migration, bool]]) -> list[Finding]:
    """Walk the migrations in order, keeping the state each operation starts from; report
    on those marked to be checked."""
    state = ProjectState()
    findings: list[Finding] = []
    for app_label, migration, checked in plan:
        label = f"{app_label}.{migration.name}"
        created: set[tuple[str, str]] = set()
        for operation in migration.operations:
            after = state.clone()
            operation.state_forwards(app_label, after)
            if checked:
                for text in _problems(app_label, operation, state, after, created):
                    findings.append(Finding(label, text))
            if isinstance(operation, operations.CreateModel):
                created.add((app_label, operation.name_lower))
            state = after
    return findings


def _problems(
    app_label: str,
    operation: Operation,
    before: ProjectState,
    after: ProjectState,
    created: set[tuple[str, str]],
) -> Iterator[str]:
    if isinstance(operation, operations.SeparateDatabaseAndState):
        # Only the database side touches tables; walk it from the same starting state.
        state = before
        for inner in operation.database_operations:
            inner_after = state.clone()
            inner.state_forwards(app_label, inner_after)
            yield from _problems(app_label, inner, state, inner_after, created)
            state = inner_after
        return
    if isinstance(operation, operations.RunSQL):
        for statement in _sql_texts(operation.sql):
            if DESTRUCTIVE_SQL.search(statement):
                yield f"runs SQL that drops, renames or sets NOT NULL: {_one_line(statement)}"
        return
    if isinstance(operation, operations.RemoveField):
        model = before.models[app_label, operation.model_name_lower]
        field = model.fields[operation.name]
        if field.many_to_many:
            yield f"drops table of {_table(model)}.{operation.name}"
        else:
            yield f"drops column {_table(model)}.{_column(operation.name, field)}"
        return
    if isinstance(operation, operations.RenameField):
        old_model = before.models[app_label, operation.model_name_lower]
        new_model = after.models[app_label, operation.model_name_lower]
        old = _column(operation.old_name, old_model.fields[operation.old_name])
        new = _column(operation.new_name, new_model.fields[operation.new_name])
        if old != new:
            yield f"renames column {_table(old_model)}.{old} to {new}"
        return
    if isinstance(operation, operations.DeleteModel):
        model = before.models[app_label, operation.name_lower]
        if _owns_table(model):
            yield f"drops table {_table(model)}"
        return
    if isinstance(operation, operations.RenameModel):
        old_model = before.models[app_label, operation.old_name_lower]
        new_model = after.models[app_label, operation.new_name_lower]
        if _owns_table(old_model) and _table(old_model) != _table(new_model):
            yield f"renames table {_table(old_model)} to {_table(new_model)}"
        return
    if isinstance(operation, operations.AlterModelTable):
        old_model = before.models[app_label, operation.name_lower]
        new_model = after.models[app_label, operation.name_lower]
        if _owns_table(old_model) and _table(old_model) != _table(new_model):
            yield f"renames table {_table(old_model)} to {_table(new_model)}"
        return
    if isinstance(operation, operations.AlterField):
        model = before.models[app_label, operation.model_name_lower]
        yield from _altered(model, operation.name, model.fields[operation.name], operation.field)
        return
    if isinstance(operation, operations.AddField):
        key = (app_label, operation.model_name_lower)
        field = operation.field
        model = before.models[key]
        if (
            key not in created
            and _owns_table(model)
            and not field.many_to_many
            and not field.null
            and field.db_default is models.NOT_PROVIDED
        ):
            yield (
                f"adds NOT NULL column {_table(model)}.{_column(operation.name, field)} "
                "without db_default"
            )


def _altered(model: ModelState, name: str, old: models.Field, new: models.Field) -> Iterator[str]:
    table = _table(model)
    old_column, new_column = _column(name, old), _column(name, new)
    if old_column != new_column:
        yield f"renames column {table}.{old_column} to {new_column}"
    if old.null and not new.null:
        yield f"makes column {table}.{new_column} NOT NULL"
    if type(old) is not type(new):
        yield (
            f"changes column {table}.{new_column} from {type(old).__name__} to {type(new).__name__}"
        )
    elif isinstance(old, models.CharField) and (new.max_length or 0) < (old.max_length or 0):
        yield f"shortens column {table}.{new_column} to {new.max_length} characters"
    elif isinstance(old, models.DecimalField) and (
        (new.max_digits or 0) < (old.max_digits or 0)
        or (new.decimal_places or 0) < (old.decimal_places or 0)
    ):
        yield f"narrows column {table}.{new_column} to fewer digits"
    if old.is_relation and new.is_relation and _target(old) != _target(new):
        yield f"points column {table}.{new_column} at {_target(new)} instead of {_target(old)}"


def _target(field: models.Field) -> str:
    model = field.remote_field.model
    return model.lower() if isinstance(model, str) else model._meta.label_lower


def _column(name: str, field: models.Field) -> str:
    """The column a field of a migration state writes, as Django names it."""
    if field.db_column:
        return str(field.db_column)
    if field.many_to_one or field.one_to_one:
        return f"{name}_id"
    return name


def _table(model: ModelState) -> str:
    return str(model.options.get("db_table") or f"{model.app_label}_{model.name_lower}")


def _owns_table(model: ModelState) -> bool:
    return bool(model.options.get("managed", True)) and not model.options.get("proxy", False)


def _sql_texts(sql: Any) -> Iterator[str]:
    if isinstance(sql, str):
        yield sql
    elif isinstance(sql, list | tuple):
        for item in sql:
            # A (sql, params) pair or a plain statement.
            yield item[0] if isinstance(item, list | tuple) else str(item)


def _one_line(text: str) -> str:
    return " ".join(text.split())[:120]


def read_allowlist(path: Path = ALLOWLIST) -> list[Allowed]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    entries = []
    for entry in data.get("allow", []):
        reason = str(entry.get("reason", "")).strip()
        if not reason:
            raise ValueError(f"{path.name}: {entry.get('migration')} has no reason")
        entries.append(
            Allowed(
                migration=str(entry["migration"]),
                findings=tuple(str(text) for text in entry["findings"]),
                reason=reason,
            )
        )
    return entries


def judge(findings: Sequence[Finding], allowed: Sequence[Allowed]) -> tuple[list[str], list[str]]:
    """(findings no entry allows, entries or lines that allow nothing)."""
    allowed_pairs = {(entry.migration, text) for entry in allowed for text in entry.findings}
    found_pairs = {(finding.migration, finding.text) for finding in findings}
    refused = [
        str(finding)
        for finding in findings
        if (finding.migration, finding.text) not in allowed_pairs
    ]
    stale = [f"{migration}: {text}" for migration, text in sorted(allowed_pairs - found_pairs)]
    return refused, stale
