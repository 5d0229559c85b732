"""Migrations are safe for a rolling update, and the models have none missing.

The rule (what an older release running beside a migration cannot survive) is written out in
`tests/deploy/migration_safety.py`; the exceptions, each with its reason, are in
`deploy/migration-allowlist.toml`. `make test`, which CI runs, runs these.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from django.db.migrations import Migration

from tests.conftest import REPO_ROOT
from tests.deploy.migration_safety import (
    ALLOWLIST,
    Finding,
    check_plan,
    judge,
    project_plan,
    read_allowlist,
)


def test_no_migration_takes_away_what_the_previous_release_still_uses() -> None:
    findings = check_plan(project_plan())
    refused, _ = judge(findings, read_allowlist())
    assert refused == [], (
        "These migrations break the previous release while it still runs (rolling update, "
        "rollback). Expand first: add the new column or table (nullable or with db_default), "
        "write both, stop reading the old one; drop or rename it one release later and list "
        f"that contract step with its reason in {ALLOWLIST.relative_to(REPO_ROOT)}:\n  "
        + "\n  ".join(refused)
    )


def test_every_allowlist_entry_still_matches_a_migration() -> None:
    entries = read_allowlist()
    assert entries, "the allow-list was read empty"
    _, stale = judge(check_plan(project_plan()), entries)
    assert stale == [], "allowed, but no migration does it (remove the line):\n  " + "\n  ".join(
        stale
    )


def test_every_migration_file_of_the_project_is_checked() -> None:
    on_disk = {
        f"{path.parent.parent.name}.{path.stem}"
        for path in REPO_ROOT.glob("*/migrations/[0-9]*.py")
    }
    checked = {f"{app}.{migration.name}" for app, migration, own in project_plan() if own}
    assert on_disk, "no migration files found"
    assert checked == on_disk


# --- the checker against migrations it has never seen --------------------------------------

SYNTHETIC = {
    "0001_initial": """
        operations = [
            migrations.CreateModel(
                name="Widget",
                fields=[
                    ("id", models.BigAutoField(primary_key=True)),
                    ("name", models.CharField(max_length=100)),
                    ("note", models.TextField(null=True)),
                    ("size", models.IntegerField(default=0)),
                    ("code", models.CharField(max_length=20, db_column="code")),
                    ("old", models.TextField(default="")),
                    ("gone", models.TextField(default="")),
                ],
            ),
            # Added to the table made in this same migration: new to every release.
            migrations.AddField("widget", "fresh", models.IntegerField(default=0)),
            migrations.CreateModel(
                name="Part", fields=[("id", models.BigAutoField(primary_key=True))]
            ),
            migrations.CreateModel(
                name="Bin", fields=[("id", models.BigAutoField(primary_key=True))]
            ),
            migrations.CreateModel(
                name="Crate", fields=[("id", models.BigAutoField(primary_key=True))]
            ),
            migrations.CreateModel(
                name="Shadow",
                fields=[("id", models.BigAutoField(primary_key=True))],
                options={"proxy": True},
                bases=("synthetic.part",),
            ),
        ]
    """,
    "0002_safe": """
        dependencies = [("synthetic", "0001_initial")]
        operations = [
            migrations.AddField("widget", "maybe", models.TextField(null=True)),
            migrations.AddField("widget", "level", models.IntegerField(db_default=0)),
            migrations.AlterField("widget", "name", models.CharField(max_length=200)),
            migrations.AlterField("widget", "size", models.IntegerField(default=5)),
            # The column keeps its name: only the Python name changes.
            migrations.RenameField("widget", "code", "sku"),
            migrations.DeleteModel("Shadow"),
            # The README's first step of dropping a column: the model forgets it, the
            # column stays (nullable, so inserts without it succeed) for the release before.
            migrations.SeparateDatabaseAndState(
                database_operations=[
                    migrations.AlterField("widget", "old", models.TextField(null=True))
                ],
                state_operations=[migrations.RemoveField("widget", "old")],
            ),
            migrations.RunSQL(
                ["CREATE INDEX widget_name ON synthetic_widget (name)"],
                reverse_sql=["DROP TABLE synthetic_widget"],  # backwards only: never run
            ),
            migrations.RunSQL("ALTER TABLE synthetic_widget DROP CONSTRAINT widget_check"),
        ]
    """,
    "0003_bad": """
        dependencies = [("synthetic", "0002_safe")]
        operations = [
            migrations.RemoveField("widget", "gone"),
            migrations.RenameField("widget", "size", "width"),
            migrations.AlterField("widget", "note", models.TextField()),
            migrations.AlterField("widget", "name", models.CharField(max_length=50)),
            migrations.AlterField("widget", "fresh", models.BigIntegerField(default=0)),
            migrations.AddField("widget", "colour", models.CharField(max_length=9, default="")),
            migrations.AddField(
                "widget", "part", models.ForeignKey("synthetic.part", models.CASCADE)
            ),
            migrations.DeleteModel("Part"),
            migrations.RenameModel("Bin", "Box"),
            migrations.AlterModelTable("Crate", "synthetic_old_crates"),
            migrations.SeparateDatabaseAndState(
                database_operations=[migrations.RemoveField("widget", "maybe")]
            ),
            migrations.RunSQL("ALTER TABLE synthetic_widget DROP COLUMN level"),
            migrations.RunSQL([("ALTER TABLE synthetic_widget DROP name", None)]),
        ]
    """,
}


def _synthetic_plan(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[str, Migration, bool]]:
    """The synthetic migrations written as a package under `folder`, imported as Django
    imports migration files, never added to a real app."""
    # A name of its own per test: Python keeps imported modules for the whole run.
    package_name = f"synthetic_migrations_{uuid.uuid4().hex}"
    package = folder / package_name
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name, body in SYNTHETIC.items():
        (package / f"{name}.py").write_text(
            "from django.db import migrations, models\n\n\n"
            "class Migration(migrations.Migration):\n"
            + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ")
            + "\n"
        )
    monkeypatch.syspath_prepend(str(folder))
    plan = []
    for name in SYNTHETIC:
        module = importlib.import_module(f"{package_name}.{name}")
        plan.append(("synthetic", module.Migration(name, "synthetic"), True))
    return plan


def test_the_checker_refuses_each_kind_of_destructive_operation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    findings = check_plan(_synthetic_plan(tmp_path, monkeypatch))
    bad = "synthetic.0003_bad"
    assert findings == [
        Finding(bad, "drops column synthetic_widget.gone"),
        Finding(bad, "renames column synthetic_widget.size to width"),
        Finding(bad, "makes column synthetic_widget.note NOT NULL"),
        Finding(bad, "shortens column synthetic_widget.name to 50 characters"),
        Finding(bad, "changes column synthetic_widget.fresh from IntegerField to BigIntegerField"),
        Finding(bad, "adds NOT NULL column synthetic_widget.colour without db_default"),
        Finding(bad, "adds NOT NULL column synthetic_widget.part_id without db_default"),
        Finding(bad, "drops table synthetic_part"),
        Finding(bad, "renames table synthetic_bin to synthetic_box"),
        Finding(bad, "renames table synthetic_crate to synthetic_old_crates"),
        Finding(bad, "drops column synthetic_widget.maybe"),
        Finding(
            bad,
            "runs SQL that drops, renames or sets NOT NULL: "
            "ALTER TABLE synthetic_widget DROP COLUMN level",
        ),
        Finding(
            bad,
            "runs SQL that drops, renames or sets NOT NULL: ALTER TABLE synthetic_widget DROP name",
        ),
    ], "0001 and 0002 are safe; every operation of 0003 is not"


def test_an_allowlist_entry_allows_exactly_what_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    findings = check_plan(_synthetic_plan(tmp_path, monkeypatch))
    allowlist = tmp_path / "allow.toml"
    allowlist.write_text(
        textwrap.dedent(
            """
            [[allow]]
            migration = "synthetic.0003_bad"
            findings = [
              "drops column synthetic_widget.gone",
              "drops column synthetic_widget.never_there",
            ]
            reason = "The contract step: release 1.4 stopped reading gone."
            """
        )
    )
    refused, stale = judge(findings, read_allowlist(allowlist))
    assert "synthetic.0003_bad: drops column synthetic_widget.gone" not in refused
    assert len(refused) == len(findings) - 1
    assert stale == ["synthetic.0003_bad: drops column synthetic_widget.never_there"]


def test_an_allowlist_entry_without_a_reason_is_refused(tmp_path: Path) -> None:
    allowlist = tmp_path / "allow.toml"
    allowlist.write_text('[[allow]]\nmigration = "leases.0001_initial"\nfindings = []\n')
    with pytest.raises(ValueError, match="has no reason"):
        read_allowlist(allowlist)


# --- makemigrations --check ----------------------------------------------------------------


def _makemigrations_check(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`manage.py makemigrations --check --dry-run` in its own process, on a throw-away
    SQLite file (the command also reads the applied history of the configured database)."""
    base = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "DATABASE_", "REDIS_"))
    }
    base.update(DASHBOARD_VAR_DIR=str(tmp_path / "var"), **env)
    return subprocess.run(
        [sys.executable, "manage.py", "makemigrations", "--check", "--dry-run"],
        cwd=REPO_ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_models_and_migrations_agree(tmp_path: Path) -> None:
    result = _makemigrations_check(tmp_path)
    assert result.returncode == 0, (
        "models changed without a migration: run `python manage.py makemigrations` and "
        f"commit it\n{result.stdout}\n{result.stderr}"
    )
    assert "No changes detected" in result.stdout


def test_makemigrations_check_fails_on_a_model_without_its_migration(tmp_path: Path) -> None:
    """The command above fails the test when it should: a model no migration creates."""
    app = tmp_path / "driftapp"
    (app / "migrations").mkdir(parents=True)
    (app / "__init__.py").write_text("")
    (app / "migrations" / "__init__.py").write_text("")
    (app / "models.py").write_text(
        "from django.db import models\n\n\n"
        "class Gauge(models.Model):\n"
        "    reading = models.IntegerField()\n"
    )
    (tmp_path / "drift_settings.py").write_text(
        "from dashboard.settings import *  # noqa: F403\n\n"
        'INSTALLED_APPS = [*INSTALLED_APPS, "driftapp"]  # noqa: F405\n'
    )
    result = _makemigrations_check(
        tmp_path,
        DJANGO_SETTINGS_MODULE="drift_settings",
        PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO_ROOT)]),
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "driftapp" in result.stdout and "Create model Gauge" in result.stdout
