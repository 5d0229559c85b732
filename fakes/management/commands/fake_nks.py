"""``manage.py fake_nks``: serve the demo NKS cloud (API and identity service) over HTTP."""

from __future__ import annotations

from argparse import ArgumentParser, ArgumentTypeError
from typing import Any

from django.core.management.base import BaseCommand

from fakes.nks import FakeNks
from fakes.nks.scenarios import scenario_names, validate_scenario
from fakes.serving import serve_until_signalled


def _scenario(value: str) -> str:
    try:
        return validate_scenario(value)
    except ValueError as exc:
        raise ArgumentTypeError(str(exc)) from None


class Command(BaseCommand):
    help = (
        "Serve a fake NKS API and identity service (the demo cloud) until Ctrl-C or SIGTERM. "
        f"Scenarios: {scenario_names()}."
    )
    # A fake cloud needs no database: skip the checks that would touch one.
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
        parser.add_argument("--port", type=int, default=8002, help="port (0 picks a free one)")
        parser.add_argument("--scenario", type=_scenario, default="demo", help=scenario_names())
        parser.add_argument(
            "--kube-server",
            default=None,
            help="Kubernetes API URL the generated kubeconfigs point at (the fake API server)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        fake = FakeNks(
            host=options["host"],
            port=options["port"],
            scenario=options["scenario"],
            # Long enough for a person to watch the resize's progress on the page.
            resize_delay=8.0,
            kube_server_url=options["kube_server"],
        )

        def on_started() -> None:
            clusters = ", ".join(c.name for c in list(fake.state.clusters.values())[:5])
            more = len(fake.state.clusters) - 5
            self.stdout.write(
                f"Fake NKS ({options['scenario']}) is serving.\n"
                f"  API URL:      {fake.url}\n"
                f"  Identity URL: {fake.identity_url}\n"
                f"  Tenant ID:    {fake.tenant_id}\n"
                f"  Username:     {fake.username}\n"
                f"  Password:     {fake.password}\n"
                f"  Clusters:     {clusters or '(none)'}{f' and {more} more' if more > 0 else ''}\n"
                "Press Ctrl-C to stop."
            )
            # Under honcho or make the output is a pipe: flush so the URLs show up at once.
            self.stdout.flush()

        serve_until_signalled(
            fake,
            address=f"{options['host']}:{options['port']}",
            on_started=on_started,
            on_stopped=lambda: self.stdout.write("Fake NKS stopped."),
        )
