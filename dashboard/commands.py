"""Management commands that need the dashboard's tables check for them first.

Run against a database that was never migrated, is behind this code, cannot be reached, or
belongs to something else, a command would otherwise die with a traceback from deep inside
the ORM (`no such table: auth_user`). `DatabaseCommand` says what is wrong in one line, names
the database (never its password) and exits non-zero before the command's own work starts.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.utils.translation import gettext, ngettext

# Exit status of a command refused for its database: 1 is the command's own failures.
DATABASE_NOT_READY = 2


def database_name() -> str:
    """Which database the settings point at, as a person recognises it, without secrets."""
    config = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"SQLite {config['NAME']}"
    host = config.get("HOST") or "localhost"
    port = f":{config['PORT']}" if config.get("PORT") else ""
    return f"{connection.display_name} {config['NAME']} on {host}{port}"


def database_problem() -> str | None:
    """Why the dashboard's tables cannot be used as they are, in one line; None when they can."""
    name = database_name()
    try:
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as error:
        # The first line only: drivers add hints and the statement on later lines.
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return gettext("Cannot use the database (%(database)s): %(reason)s.") % {
            "database": name,
            "reason": reason,
        }
    if not plan:
        return None
    if not executor.loader.applied_migrations:
        return gettext(
            "The database (%(database)s) has none of the dashboard's tables: it was never "
            "migrated, or it is another application's. Run `manage.py migrate` first, or set "
            "DATABASE_URL to the dashboard's database."
        ) % {"database": name}
    migration, _backwards = plan[0]
    return ngettext(
        "The database (%(database)s) is %(count)d migration behind this code (%(first)s). "
        "Run `manage.py migrate` first.",
        "The database (%(database)s) is %(count)d migrations behind this code (first: "
        "%(first)s). Run `manage.py migrate` first.",
        len(plan),
    ) % {"database": name, "count": len(plan), "first": f"{migration.app_label}.{migration.name}"}


class DatabaseCommand(BaseCommand):
    """A command that reads or writes the dashboard's tables."""

    def execute(self, *args: Any, **options: Any) -> str | None:
        problem = database_problem()
        if problem is not None:
            raise CommandError(problem, returncode=DATABASE_NOT_READY)
        return super().execute(*args, **options)
