from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext as _

from dashboard.commands import DatabaseCommand
from leases.services import ClusterConfigError, register_kube_cluster


class Command(DatabaseCommand):
    help = (
        "Register a Kubernetes cluster whose Leases the dashboard watches. The kubeconfig is "
        "stored as a secret and never shown again; it may hold a token or inline client "
        "certificate, never an exec plugin or a file path (see the README)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="Short name shown on every page (letters, digits, -).")
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--kubeconfig", type=Path, help="Path of a kubeconfig file.")
        source.add_argument(
            "--in-cluster",
            action="store_true",
            help="Use the pod's service account (when the dashboard runs inside the cluster).",
        )
        parser.add_argument("--context", default="", help="Context to use (default: current).")
        parser.add_argument(
            "--replace", action="store_true", help="Update the cluster if it exists already."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        name: str = options["name"]
        kubeconfig = ""
        if options["kubeconfig"] is not None:
            path: Path = options["kubeconfig"]
            try:
                kubeconfig = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise CommandError(
                    _("Cannot read the kubeconfig %(path)s: %(error)s")
                    % {"path": repr(str(path)), "error": exc}
                ) from None
        try:
            cluster, created = register_kube_cluster(
                name,
                kubeconfig=kubeconfig,
                context=options["context"],
                in_cluster=options["in_cluster"],
                replace=options["replace"],
            )
        except ClusterConfigError as error:
            raise CommandError(str(error)) from None
        if created:
            done = _("Added cluster %(name)s; a watch worker picks it up within seconds.")
        else:
            done = _("Updated cluster %(name)s; a watch worker picks it up within seconds.")
        self.stdout.write(done % {"name": repr(cluster.name)})
        if cluster.config_warning:
            # Accepted, but someone should fix it; the watchers page keeps saying so.
            self.stderr.write(_("Warning: %(warning)s") % {"warning": cluster.config_warning})
