"""The serve-until-Ctrl-C loop both fake-server management commands share."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Protocol

from django.core.management.base import CommandError


class Startable(Protocol):
    def start(self) -> object: ...

    def stop(self) -> None: ...


def serve_until_signalled(
    server: Startable,
    *,
    address: str,
    on_started: Callable[[], None],
    on_stopped: Callable[[], None],
) -> None:
    """Start `server`, call `on_started`, and wait for SIGINT or SIGTERM (honcho sends it)."""
    try:
        server.start()
    except OSError as exc:
        raise CommandError(f"Cannot listen on {address}: {exc.strerror or exc}") from exc
    stopping = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    try:
        on_started()
        # A timed wait keeps the main thread responsive to signals on every platform.
        while not stopping.wait(timeout=0.5):
            pass
    finally:
        server.stop()
        on_stopped()
