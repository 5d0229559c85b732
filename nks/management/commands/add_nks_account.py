from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext

from dashboard.commands import DatabaseCommand
from dashboard.env import BadEnvironment, env_optional
from nks.accounts import client_for
from nks.client import NksError
from nks.services import AccountConfigError, register_nks_account


class Command(DatabaseCommand):
    help = (
        "Add an NKS account for the dashboard to poll. With identity credentials the password "
        "is read from NKS_PASSWORD (or the file named by NKS_PASSWORD_FILE), never from the "
        "command line. A fixed token may be given with --token, but NKS_TOKEN (or "
        "NKS_TOKEN_FILE) is safer: command lines are visible to other users of the machine. "
        "Secrets are stored, never shown again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="Short name shown on every page (letters, digits, -).")
        parser.add_argument("--api-url", required=True, help="The region's NKS API base URL.")
        parser.add_argument("--identity-url", default="", help="Identity service base URL.")
        parser.add_argument("--tenant-id", default="", help="Tenant (project) ID.")
        parser.add_argument("--username", default="", help="NHN Cloud user (e-mail).")
        parser.add_argument(
            "--token",
            default="",
            help="A fixed token instead of identity credentials (prefer NKS_TOKEN).",
        )
        parser.add_argument(
            "--replace", action="store_true", help="Update the account if it exists already."
        )
        parser.add_argument(
            "--check",
            action="store_true",
            help="List the account's clusters once to prove the credentials work.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        identity = any(options[key] for key in ("identity_url", "tenant_id", "username"))
        try:
            token = options["token"] or ("" if identity else env_optional("NKS_TOKEN") or "")
            password = (env_optional("NKS_PASSWORD") or "") if identity else ""
        except BadEnvironment as error:
            raise CommandError(str(error)) from None
        if identity and not password:
            raise CommandError(
                gettext(
                    "Set NKS_PASSWORD (or NKS_PASSWORD_FILE) in the environment: the password "
                    "is never taken from the command line."
                )
            )
        if not identity and not token:
            raise CommandError(
                gettext(
                    "Give --identity-url, --tenant-id and --username (password in "
                    "NKS_PASSWORD), or a token in NKS_TOKEN (or --token)."
                )
            )
        try:
            account, created = register_nks_account(
                options["name"],
                api_url=options["api_url"],
                identity_url=options["identity_url"],
                tenant_id=options["tenant_id"],
                username=options["username"],
                password=password,
                token=token,
                replace=options["replace"],
            )
        except AccountConfigError as error:
            raise CommandError(str(error)) from None
        done = (
            gettext("Added NKS account %(name)s; beat polls it within seconds.")
            if created
            else gettext("Updated NKS account %(name)s; beat polls it within seconds.")
        )
        self.stdout.write(done % {"name": repr(account.name)})
        if options["check"]:
            try:
                clusters = client_for(account).list_clusters()
            except NksError as error:
                raise CommandError(
                    gettext("The account was saved, but NKS said: %(error)s") % {"error": error}
                ) from None
            self.stdout.write(
                gettext("Credentials work: %(count)s cluster(s) listed.") % {"count": len(clusters)}
            )
