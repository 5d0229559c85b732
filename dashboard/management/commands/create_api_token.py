from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext

from dashboard.commands import DatabaseCommand
from dashboard.models import ApiToken
from dashboard.services import issue_api_token


class Command(DatabaseCommand):
    help = "Create an API token for USERNAME and print it once (only its hash is stored)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="What the token is for (shown in admin).")
        parser.add_argument(
            "--scope",
            choices=ApiToken.Scope.values,
            default=ApiToken.Scope.READ,
            help="read (default): GET endpoints only. write: also resizes; operators only.",
        )

    def handle(self, *args: Any, username: str, name: str, scope: str, **options: Any) -> None:
        user_model = get_user_model()
        try:
            user = user_model.objects.get(**{user_model.USERNAME_FIELD: username})
        except user_model.DoesNotExist:
            message = gettext("No user named %(username)r.")
            raise CommandError(message % {"username": username}) from None
        if not user.is_active:
            message = gettext("User %(username)r is inactive; activate it first.")
            raise CommandError(message % {"username": username})
        try:
            _token, plain = issue_api_token(user, name=name, scope=scope)
        except PermissionDenied as refused:
            raise CommandError(
                gettext(
                    "%(refused)s Add the user to the operators group first, or issue a read token."
                )
                % {"refused": refused}
            ) from None
        # The plain token goes to stdout alone so scripts can capture it.
        self.stdout.write(plain)
        self.stderr.write(
            gettext(
                "Scope: %(scope)s. Keep this token now: it cannot be shown again."
                " Revoke it in admin under API tokens."
            )
            % {"scope": scope}
        )
