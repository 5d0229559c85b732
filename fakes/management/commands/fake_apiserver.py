"""`python manage.py fake_apiserver`: the demo cluster's Kubernetes API, no database needed."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from fakes.kube.cli import DESCRIPTION, ServeOptions, add_arguments, serve


class Command(BaseCommand):
    help = DESCRIPTION
    # System checks may touch the database; a fake API server must start without one.
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: ArgumentParser) -> None:
        add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        serve(ServeOptions.from_mapping(options), echo=self._echo)

    def _echo(self, line: str) -> None:
        self.stdout.write(line)
        # Under honcho or make the output is a pipe: flush so the URL shows up at once.
        self.stdout.flush()
