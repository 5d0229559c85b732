from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from nks.models import NksAccount
from nks.poller import poll_account


class Command(BaseCommand):
    help = "Poll NKS accounts once, now, in the foreground, and print what was found."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--account", help="Only this account (default: every enabled one).")

    def handle(self, *args: Any, **options: Any) -> None:
        accounts = NksAccount.objects.order_by("name")
        if options["account"]:
            accounts = accounts.filter(name=options["account"])
            if not accounts.exists():
                raise CommandError(f"No NKS account named {options['account']!r}.")
        else:
            accounts = accounts.filter(enabled=True)
        ids = list(accounts.values_list("pk", flat=True))
        if not ids:
            raise CommandError("No NKS account to poll: add one with add_nks_account.")
        failed = []
        for account_id in ids:
            result = poll_account(account_id)
            if not result.polled:
                self.stdout.write(f"{result.account}: another poll is running; skipped.")
            elif result.error:
                failed.append(result.account)
                self.stdout.write(
                    f"{result.account}: FAILED after {result.seconds:.1f} s: {result.error}"
                )
            else:
                store = result.store
                assert store is not None
                self.stdout.write(
                    f"{result.account}: {store.clusters} cluster(s), {store.nodegroups} "
                    f"nodegroup(s), {store.gone} gone, {store.events_written} event(s) written, "
                    f"{store.cluster_errors} cluster(s) with errors; {result.http_calls} HTTP "
                    f"calls in {result.seconds:.2f} s."
                )
                if store.skipped:
                    self.stdout.write(
                        f"  seen through another account, left there: {', '.join(store.skipped)}"
                    )
        if failed:
            raise CommandError(f"Polling failed for: {', '.join(failed)}.")
