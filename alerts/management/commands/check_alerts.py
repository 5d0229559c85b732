from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from alerts import delivery, evaluation
from alerts.models import DeliveryState
from dashboard.commands import DatabaseCommand


class Command(DatabaseCommand):
    help = _(
        "Evaluate the alert rules once and send the e-mail that is due, in the foreground "
        "(what beat and the workers do every ALERT_EVAL_SECONDS)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--no-send", action="store_true", help=_("Plan notifications but do not send them.")
        )
        parser.add_argument(
            "--wait",
            type=float,
            default=float(evaluation.EVALUATION_LOCK_TTL),
            help=_("Seconds to wait for an evaluation that is running elsewhere (default 30)."),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        summary = evaluation.run_evaluation(dispatch=False, wait_seconds=options["wait"])
        if summary is None:
            raise CommandError(gettext("Another evaluation is running and did not finish in time."))
        self.stdout.write(
            ngettext(
                "Evaluated: %(opened)s opened, %(resolved)s resolved, %(updated)s updated, "
                "%(pending)s pending (within their grace); %(planned)s notification planned.",
                "Evaluated: %(opened)s opened, %(resolved)s resolved, %(updated)s updated, "
                "%(pending)s pending (within their grace); %(planned)s notifications planned.",
                len(summary.notifications),
            )
            % {
                "opened": len(summary.opened),
                "resolved": len(summary.resolved),
                "updated": summary.updated,
                "pending": summary.pending,
                "planned": len(summary.notifications),
            }
        )
        for error in summary.errors:
            self.stderr.write(gettext("Rule error: %(error)s") % {"error": error})
        if options["no_send"]:
            return
        results = delivery.send_due_notifications()
        if results:
            counts = ", ".join(
                gettext("%(count)s %(state)s") % {"count": count, "state": _state_label(state)}
                for state, count in sorted(results.items())
            )
            self.stdout.write(gettext("Sent what was due: %(counts)s.") % {"counts": counts})
        else:
            self.stdout.write(gettext("No notification was due."))


def _state_label(state: str) -> str:
    try:
        return str(DeliveryState(state).label)
    except ValueError:
        return state
