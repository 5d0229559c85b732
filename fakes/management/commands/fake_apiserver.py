"""`python manage.py fake_apiserver`: the demo cluster's Kubernetes API, no database needed."""

from __future__ import annotations

from argparse import ArgumentParser, ArgumentTypeError
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from fakes.kube.cloud_controller import CloudController, NksAccount, NksReader
from fakes.kube.demo_nodes import DEMO_NKS_CLUSTER
from fakes.kube.scenarios import make_scenario
from fakes.kube.server import FakeApiServer
from fakes.serving import Startable, serve_until_signalled


def _scenario(value: str) -> str:
    try:
        make_scenario(value)
    except ValueError as error:
        raise ArgumentTypeError(str(error)) from None
    return value


class _WithCloudController:
    """The server and the controller that follows NKS for it, started and stopped together."""

    def __init__(self, server: FakeApiServer, controller: CloudController) -> None:
        self.server = server
        self.controller = controller

    def start(self) -> object:
        self.server.start()
        return self.controller.start()

    def stop(self) -> None:
        self.controller.stop()
        self.server.stop()


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
        parser.add_argument(
            "--nks-url",
            metavar="URL",
            help=f"the fake NKS whose {DEMO_NKS_CLUSTER} cluster the demo scenario plays: its "
            "Nodes then follow that cluster's nodegroup resizes, as a cloud-controller-manager "
            "does (signed in as the fake NKS demo's published account, which setup_demo uses)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        server = FakeApiServer(
            options["host"], options["port"], token=options["token"], scenario=options["scenario"]
        )
        served: Startable = server
        follows = ""
        if options["nks_url"]:
            if options["scenario"] != "demo" or server.scenario_runner is None:
                raise CommandError("--nks-url goes with --scenario demo (the NKS cluster it plays)")
            try:
                reader = NksReader(NksAccount.demo(options["nks_url"]), DEMO_NKS_CLUSTER)
            except ValueError as error:
                raise CommandError(f"--nks-url: {error}") from None
            served = _WithCloudController(server, CloudController(server.scenario_runner, reader))
            follows = f"; Nodes follow {DEMO_NKS_CLUSTER}'s nodegroups at {options['nks_url']}"

        def on_started() -> None:
            served = ", ".join(
                ["v1 nodes", "coordination.k8s.io/v1 leases"]
                + [f"{version} leasecandidates" for version in server.candidate_versions]
            )
            self._echo(
                f"Fake Kubernetes API server ({server.kubernetes_version}) listening on "
                f"{server.url} - scenario {options['scenario']}; serving {served}"
                + ("; bearer token required" if options["token"] else "")
                + follows
            )
            if options["kubeconfig_out"] is not None:
                path = server.write_kubeconfig(options["kubeconfig_out"])
                self._echo(f"kubeconfig written to {path}")
            self._echo("Press Ctrl-C to stop.")

        serve_until_signalled(
            served,
            address=f"{options['host']}:{options['port']}",
            on_started=on_started,
            on_stopped=lambda: self._echo("Fake Kubernetes API server stopped."),
        )

    def _echo(self, line: str) -> None:
        self.stdout.write(line)
        # Under honcho or make the output is a pipe: flush so the URL shows up at once.
        self.stdout.flush()
