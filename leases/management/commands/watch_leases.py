from __future__ import annotations

import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from leases.models import KubeCluster
from leases.services import run_watcher


class Command(BaseCommand):
    help = (
        "Watch Leases in the foreground with the same loop the workers run (for debugging "
        "and scripts). Takes the cluster's lock, so it never runs beside a worker's watcher."
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
                raise CommandError(f"No cluster named {options['cluster']!r}.")
        ids = list(clusters.values_list("id", flat=True))
        if not ids:
            raise CommandError("No enabled cluster. Add one with add_kube_cluster.")
        stop = threading.Event()
        busy: list[int] = []

        def watch(cluster_id: int) -> None:
            if not run_watcher(cluster_id, stop=stop, seconds=options["seconds"]):
                busy.append(cluster_id)

        threads = [threading.Thread(target=watch, args=(cluster_id,)) for cluster_id in ids]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(timeout=0.5)
        except KeyboardInterrupt:
            stop.set()
            for thread in threads:
                thread.join()
        if busy:
            names = ", ".join(
                KubeCluster.objects.filter(id__in=busy).values_list("name", flat=True)
            )
            raise CommandError(f"Already watched by a worker: {names}. Stop it first.")
