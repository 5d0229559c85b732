"""`python manage.py fake_apiserver`: the demo cluster's Kubernetes API, no database needed."""

from __future__ import annotations

from argparse import ArgumentParser, ArgumentTypeError
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand

from fakes.kube.scenarios import make_scenario
from fakes.kube.server import FakeApiServer
from fakes.serving import serve_until_signalled


def _scenario(value: str) -> str:
    try:
        make_scenario(value)
    except ValueError as error:
        raise ArgumentTypeError(str(error)) from None
    return value


class Command(BaseCommand):
    help = (
        "Serve a fake Kubernetes API server (Leases, LeaseCandidates, Nodes) with a live scenario "
        "until Ctrl-C or SIGTERM. kubectl and client-go send no credentials to an http:// "
        "server, so use --token only with clients that do (the official Python client)."
    )
    # System checks may touch the database; a fake API server must start without one.
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
        parser.add_argument("--port", type=int, default=8001, help="port (0 picks a free one)")
        parser.add_argument(
            "--scenario",
            type=_scenario,
            default="demo",
            help="demo (the fake NKS staging-web cluster: its Nodes, Leases and troubles), "
            "nodes:N (node leases), cluster:N (Nodes and their leases) or empty",
        )
        parser.add_argument(
            "--kubeconfig-out", type=Path, metavar="FILE", help="write a kubeconfig (mode 0600)"
        )
        parser.add_argument("--token", help="require this bearer token (401 without it)")

    def handle(self, *args: Any, **options: Any) -> None:
        server = FakeApiServer(
            options["host"], options["port"], token=options["token"], scenario=options["scenario"]
        )

        def on_started() -> None:
            served = ", ".join(
                ["v1 nodes", "coordination.k8s.io/v1 leases"]
                + [f"{version} leasecandidates" for version in server.candidate_versions]
            )
            self._echo(
                f"Fake Kubernetes API server ({server.kubernetes_version}) listening on "
                f"{server.url} - scenario {options['scenario']}; serving {served}"
                + ("; bearer token required" if options["token"] else "")
            )
            if options["kubeconfig_out"] is not None:
                path = server.write_kubeconfig(options["kubeconfig_out"])
                self._echo(f"kubeconfig written to {path}")
            self._echo("Press Ctrl-C to stop.")

        serve_until_signalled(
            server,
            address=f"{options['host']}:{options['port']}",
            on_started=on_started,
            on_stopped=lambda: self._echo("Fake Kubernetes API server stopped."),
        )

    def _echo(self, line: str) -> None:
        self.stdout.write(line)
        # Under honcho or make the output is a pipe: flush so the URL shows up at once.
        self.stdout.flush()
