from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.core.management.base import BaseCommand, CommandError, CommandParser

from dashboard.models import ApiToken
from dashboard.services import issue_api_token


class Command(BaseCommand):
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
            raise CommandError(f"No user named {username!r}.") from None
        if not user.is_active:
            raise CommandError(f"User {username!r} is inactive; activate it first.")
        try:
            _token, plain = issue_api_token(user, name=name, scope=scope)
        except PermissionDenied as refused:
            raise CommandError(
                f"{refused} Add the user to the operators group first, or issue a read token."
            ) from None
        # The plain token goes to stdout alone so scripts can capture it.
        self.stdout.write(plain)
        self.stderr.write(
            f"Scope: {scope}. Keep this token now: it cannot be shown again."
            " Revoke it in admin under API tokens."
        )
