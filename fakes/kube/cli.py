"""Command-line entry point shared by `manage.py fake_apiserver` and
`python -m fakes.kube` (the latter needs no Django settings at all)."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakes.kube.scenarios import make_scenario
from fakes.kube.server import DEFAULT_BOOKMARK_INTERVAL, FakeApiServer

DESCRIPTION = (
    "Serve a fake Kubernetes API server (Leases and LeaseCandidates) with a live scenario. "
    "kubectl and client-go send no credentials to an http:// server, so use --token only "
    "with clients that do (the official Python client); for kubectl apply/create pass "
    "--validate=false, as this server publishes no OpenAPI schema."
)


@dataclass(frozen=True, slots=True)
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8001
    scenario: str = "demo"
    kubeconfig_out: Path | None = None
    token: str | None = None
    candidates: bool = True
    alpha_candidates: bool = False
    bookmark_interval: float = DEFAULT_BOOKMARK_INTERVAL
    speed: float = 1.0
    seed: int | None = None
    verbose: bool = False

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any]) -> ServeOptions:
        kubeconfig_out = options.get("kubeconfig_out")
        return cls(
            host=options["host"],
            port=options["port"],
            scenario=options["scenario"],
            kubeconfig_out=Path(kubeconfig_out) if kubeconfig_out else None,
            token=options.get("token") or None,
            candidates=not options.get("no_candidates", False),
            alpha_candidates=bool(options.get("alpha_candidates", False)),
            bookmark_interval=options["bookmark_interval"],
            speed=options["speed"],
            seed=options.get("seed"),
            verbose=bool(options.get("verbose_requests", False)),
        )


def _scenario_name(value: str) -> str:
    try:
        make_scenario(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return value


def _positive_float(value: str) -> float:
    number = float(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return number


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=8001, help="port to listen on; 0 picks a free one"
    )
    parser.add_argument(
        "--scenario",
        type=_scenario_name,
        default="demo",
        help="demo (a small NKS-like cluster with troubles), nodes:N or empty",
    )
    parser.add_argument(
        "--kubeconfig-out", metavar="FILE", help="write a kubeconfig for this server (mode 0600)"
    )
    parser.add_argument("--token", help="require this bearer token (401 without it)")
    parser.add_argument(
        "--no-candidates",
        action="store_true",
        help="do not serve LeaseCandidates (404, like a cluster older than 1.33)",
    )
    parser.add_argument(
        "--alpha-candidates",
        action="store_true",
        help="also serve LeaseCandidates as coordination.k8s.io/v1alpha2",
    )
    parser.add_argument(
        "--bookmark-interval",
        type=_positive_float,
        default=DEFAULT_BOOKMARK_INTERVAL,
        help=f"seconds between watch BOOKMARK events (default {DEFAULT_BOOKMARK_INTERVAL:g})",
    )
    parser.add_argument(
        "--speed",
        type=_positive_float,
        default=1.0,
        help="scenario seconds per wall-clock second (default 1; more skews timestamps)",
    )
    parser.add_argument("--seed", type=int, help="seed for the demo's names and timings")
    parser.add_argument(
        "--verbose-requests", action="store_true", help="log every request to stderr"
    )


def serve(
    options: ServeOptions,
    *,
    echo: Callable[[str], None],
    stop: threading.Event | None = None,
) -> None:
    """Run until SIGINT/SIGTERM (or `stop` is set), then shut down cleanly."""
    if options.verbose:
        logging.basicConfig(level=logging.DEBUG, format="%(asctime)s %(message)s")
    candidate_versions: tuple[str, ...] = ()
    if options.candidates:
        candidate_versions = ("v1beta1", "v1alpha2") if options.alpha_candidates else ("v1beta1",)
    server = FakeApiServer(
        options.host,
        options.port,
        token=options.token,
        scenario=options.scenario,
        scenario_seed=options.seed,
        scenario_speed=options.speed,
        candidate_versions=candidate_versions,
        bookmark_interval=options.bookmark_interval,
    )
    stop = stop or threading.Event()
    previous_handlers: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signal_number in (signal.SIGINT, signal.SIGTERM):
            previous_handlers[signal_number] = signal.signal(signal_number, lambda *_: stop.set())
    server.start()
    try:
        served = ", ".join(
            ["coordination.k8s.io/v1 leases"]
            + [f"{version} leasecandidates" for version in candidate_versions]
        )
        echo(
            f"Fake Kubernetes API server ({server.kubernetes_version}) listening on {server.url}"
            f" - scenario {options.scenario}; serving {served}"
            + ("; bearer token required" if options.token else "")
        )
        if options.kubeconfig_out is not None:
            path = server.write_kubeconfig(options.kubeconfig_out)
            echo(f"kubeconfig written to {path} (KUBECONFIG={path} kubectl get leases -A)")
        echo("Press Ctrl-C to stop.")
        # A timed wait keeps the main thread responsive to signals on every platform.
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
        for signal_number, handler in previous_handlers.items():
            signal.signal(signal_number, handler)
        echo("Fake Kubernetes API server stopped.")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m fakes.kube", description=DESCRIPTION
    )
    add_arguments(parser)
    serve(
        ServeOptions.from_mapping(vars(parser.parse_args(argv))),
        echo=lambda line: print(line, flush=True),
    )
