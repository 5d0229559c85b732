"""``manage.py fake_nks``: serve the demo NKS cloud (API and identity service) over HTTP."""

from __future__ import annotations

import signal
import threading
from argparse import ArgumentParser, ArgumentTypeError
from pathlib import Path
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from fakes.nks import FakeNks
from fakes.nks.scenarios import scenario_names, validate_scenario
from fakes.nks.state import FakeApiError


def _scenario(value: str) -> str:
    try:
        return validate_scenario(value)
    except ValueError as exc:
        raise ArgumentTypeError(str(exc)) from None


def _non_negative(value: str) -> float:
    number = float(value)
    if number < 0:
        raise ArgumentTypeError(f"{value} is negative")
    return number


def _positive(value: str) -> float:
    number = float(value)
    if number <= 0:
        raise ArgumentTypeError(f"{value} is not positive")
    return number


def _kubeconfig(value: str) -> tuple[str, Path]:
    cluster, separator, path = value.partition("=")
    if not separator or not cluster or not path:
        raise ArgumentTypeError(f"{value!r} is not CLUSTER=PATH")
    return cluster, Path(path)


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
            "--latency-ms", type=_non_negative, default=0.0, help="delay added to every answer"
        )
        parser.add_argument(
            "--token-ttl", type=_positive, default=60.0, help="token lifetime in seconds"
        )
        parser.add_argument(
            "--resize-delay",
            type=_non_negative,
            default=8.0,
            help="seconds a resize stays UPDATE_IN_PROGRESS",
        )
        parser.add_argument(
            "--health-speed",
            type=_positive,
            default=1.0,
            help="how fast legacy-batch's health data goes stale (2 = twice as fast)",
        )
        parser.add_argument(
            "--kube-server",
            default=None,
            help="Kubernetes API URL the generated kubeconfigs point at (the fake API server)",
        )
        parser.add_argument(
            "--kubeconfig",
            type=_kubeconfig,
            action="append",
            default=[],
            metavar="CLUSTER=PATH",
            help="serve this file as CLUSTER's kubeconfig (repeatable)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        kubeconfigs: dict[str, str] = {}
        for cluster, path in options["kubeconfig"]:
            try:
                kubeconfigs[cluster] = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise CommandError(f"Cannot read the kubeconfig for {cluster}: {exc}") from exc
        try:
            fake = FakeNks(
                host=options["host"],
                port=options["port"],
                scenario=options["scenario"],
                token_ttl=options["token_ttl"],
                latency=options["latency_ms"] / 1000,
                resize_delay=options["resize_delay"],
                health_speed=options["health_speed"],
                kube_server_url=options["kube_server"],
                kubeconfigs=kubeconfigs,
            )
        except (ValueError, FakeApiError) as exc:  # e.g. --kubeconfig names no such cluster
            raise CommandError(str(exc)) from exc
        try:
            fake.start()
        except OSError as exc:
            raise CommandError(
                f"Cannot listen on {options['host']}:{options['port']}: {exc.strerror or exc}"
            ) from exc

        stopping = threading.Event()

        def request_stop(signum: int, frame: FrameType | None) -> None:
            stopping.set()

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        clusters = ", ".join(cluster.name for cluster in list(fake.state.clusters.values())[:5])
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
        self.stdout.flush()
        try:
            # A timeout keeps the main thread responsive to signals on every platform.
            while not stopping.wait(timeout=1.0):
                pass
        finally:
            fake.stop()
            self.stdout.write("Fake NKS stopped.")
