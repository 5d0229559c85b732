from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext

from dashboard.commands import DatabaseCommand
from nks.models import NksAccount
from nks.poller import poll_account


class Command(DatabaseCommand):
    help = "Poll NKS accounts once, now, in the foreground, and print what was found."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--account", help="Only this account (default: every enabled one).")

    def handle(self, *args: Any, **options: Any) -> None:
        accounts = NksAccount.objects.order_by("name")
        if options["account"]:
            accounts = accounts.filter(name=options["account"])
            if not accounts.exists():
                raise CommandError(
                    gettext("No NKS account named %(name)s.") % {"name": repr(options["account"])}
                )
        else:
            accounts = accounts.filter(enabled=True)
        ids = list(accounts.values_list("pk", flat=True))
        if not ids:
            raise CommandError(gettext("No NKS account to poll: add one with add_nks_account."))
        failed = []
        for account_id in ids:
            result = poll_account(account_id)
            if not result.polled:
                self.stdout.write(
                    gettext("%(account)s: another poll is running; skipped.")
                    % {"account": result.account}
                )
            elif result.error:
                failed.append(result.account)
                self.stdout.write(
                    gettext("%(account)s: FAILED after %(seconds).1f s: %(error)s")
                    % {"account": result.account, "seconds": result.seconds, "error": result.error}
                )
            else:
                store = result.store
                assert store is not None
                self.stdout.write(
                    gettext(
                        "%(account)s: %(clusters)s cluster(s), %(nodegroups)s nodegroup(s), "
                        "%(gone)s gone, %(events)s event(s) written, %(errors)s cluster(s) with "
                        "errors; %(calls)s HTTP calls in %(seconds).2f s."
                    )
                    % {
                        "account": result.account,
                        "clusters": store.clusters,
                        "nodegroups": store.nodegroups,
                        "gone": store.gone,
                        "events": store.events_written,
                        "errors": store.cluster_errors,
                        "calls": result.http_calls,
                        "seconds": result.seconds,
                    }
                )
                if store.skipped:
                    self.stdout.write(
                        "  "
                        + gettext("seen through another account, left there: %(clusters)s")
                        % {"clusters": ", ".join(store.skipped)}
                    )
        if failed:
            raise CommandError(
                gettext("Polling failed for: %(accounts)s.") % {"accounts": ", ".join(failed)}
            )
