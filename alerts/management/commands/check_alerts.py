from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from alerts import delivery, evaluation


class Command(BaseCommand):
    help = (
        "Evaluate the alert rules once and send the e-mail that is due, in the foreground "
        "(what beat and the workers do every ALERT_EVAL_SECONDS)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--no-send", action="store_true", help="Plan notifications but do not send them."
        )
        parser.add_argument(
            "--wait",
            type=float,
            default=float(evaluation.EVALUATION_LOCK_TTL),
            help="Seconds to wait for an evaluation that is running elsewhere (default 30).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        summary = evaluation.run_evaluation(dispatch=False, wait_seconds=options["wait"])
        if summary is None:
            raise CommandError("Another evaluation is running and did not finish in time.")
        self.stdout.write(
            f"Evaluated: {len(summary.opened)} opened, {len(summary.resolved)} resolved, "
            f"{summary.updated} updated, {summary.pending} pending (within their grace); "
            f"{len(summary.notifications)} notification(s) planned."
        )
        for error in summary.errors:
            self.stderr.write(f"Rule error: {error}")
        if options["no_send"]:
            return
        results = delivery.send_due_notifications()
        if results:
            counts = ", ".join(f"{count} {state}" for state, count in sorted(results.items()))
            self.stdout.write(f"Sent what was due: {counts}.")
        else:
            self.stdout.write("No notification was due.")
