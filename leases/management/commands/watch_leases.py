from __future__ import annotations

import logging
import signal
import threading
from types import FrameType
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import connection
from django.utils.translation import gettext as _

from dashboard.commands import DatabaseCommand
from leases.models import KubeCluster
from leases.services import run_watcher

logger = logging.getLogger(__name__)

# SIGTERM is what service managers and `kill` send; SIGINT is Ctrl-C, and also `kill -INT`
# to a job a shell started in the background, where SIGINT starts out ignored.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Command(DatabaseCommand):
    help = (
        "Watch Leases and Nodes in the foreground with the same loop the workers run (for "
        "debugging and scripts). Takes the cluster's lock, so it never runs beside a worker's "
        "watcher. SIGTERM or SIGINT stops it cleanly: the lock is released and the cluster "
        "marked disconnected."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", help="Only this cluster (default: every enabled one).")
        parser.add_argument(
            "--seconds", type=float, default=None, help="Stop after this many seconds."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        clusters = KubeCluster.objects.filter(enabled=True)
        if options["cluster"]:
            clusters = KubeCluster.objects.filter(name=options["cluster"])
            if not clusters.exists():
                raise CommandError(
                    _("No cluster named %(name)s.") % {"name": repr(options["cluster"])}
                )
        ids = list(clusters.values_list("id", flat=True))
        if not ids:
            raise CommandError(_("No enabled cluster. Add one with add_kube_cluster."))
        if not connection.in_atomic_block:
            # Given back while the watchers run: each holds its cluster's one connection, and
            # this thread needs none until they end.
            connection.close()
        stop = threading.Event()
        busy: list[int] = []

        def watch(cluster_id: int) -> None:
            if not run_watcher(cluster_id, stop=stop, seconds=options["seconds"]):
                busy.append(cluster_id)

        previous = _stop_on_signals(stop)
        threads = [threading.Thread(target=watch, args=(cluster_id,)) for cluster_id in ids]
        try:
            for thread in threads:
                thread.start()
            # Joined with a timeout: the main thread must wake up to run signal handlers.
            for thread in threads:
                while thread.is_alive():
                    thread.join(timeout=0.5)
        except KeyboardInterrupt:
            # A second Ctrl-C (the handler gives SIGINT back to Python after the first):
            # still wait, so the locks are released, but say why it takes a moment.
            stop.set()
            self.stderr.write(_("Stopping: releasing the watchers' locks…"))
            for thread in threads:
                thread.join()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if busy:
            names = ", ".join(
                KubeCluster.objects.filter(id__in=busy).values_list("name", flat=True)
            )
            raise CommandError(
                _("Already watched by a worker: %(names)s. Stop it first.") % {"names": names}
            )


def _stop_on_signals(stop: threading.Event) -> dict[int, Any]:
    """Turn SIGTERM and SIGINT into a clean stop: without this, SIGTERM ends the process at
    once, leaving the cluster "connected" and its lock held until the TTL runs out."""
    previous: dict[int, Any] = {}
    if threading.current_thread() is not threading.main_thread():
        return previous  # only the main thread may set handlers (call_command from a thread)

    def handle(signum: int, frame: FrameType | None) -> None:
        logger.info("%s received: stopping the watchers", signal.Signals(signum).name)
        stop.set()
        # A second SIGINT interrupts the wait (KeyboardInterrupt); a second SIGTERM too.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)

    for signum in STOP_SIGNALS:
        previous[signum] = signal.signal(signum, handle)
    return previous


def _raise_keyboard_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
