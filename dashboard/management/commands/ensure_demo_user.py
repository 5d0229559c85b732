from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import CommandParser
from django.utils.translation import gettext

from dashboard.commands import DatabaseCommand
from dashboard.services import OPERATORS_GROUP


class Command(DatabaseCommand):
    help = (
        "Create a demo login (staff, in the operators group) when the database has no user "
        "yet, and print its password once. Does nothing otherwise; refuses in production."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="demo")

    def handle(self, *args: Any, username: str, **options: Any) -> None:
        if settings.PRODUCTION:
            self.stderr.write(gettext("Not creating a demo user in production."))
            return
        user_model = get_user_model()
        if user_model.objects.exists():
            return
        password = secrets.token_urlsafe(12)
        user = user_model.objects.create_superuser(username=username, email="", password=password)
        user.groups.add(Group.objects.get(name=OPERATORS_GROUP))
        self.stdout.write(
            self.style.SUCCESS(
                "\n  "
                + gettext(
                    "Demo login created. User: %(username)s   Password: %(password)s\n"
                    "  It is shown only this once; change it with"
                    " `python manage.py changepassword %(username)s`."
                )
                % {"username": username, "password": password}
                + "\n"
            )
        )
