"""Set up the test provider: a signing key, one client, and users with their groups.

Safe to run again: the client's redirect URIs (when given) and each named user's password,
e-mail, groups and preferred_username are replaced by what is given. Prints each named user's
`sub` ("subject NAME SUB"), which a test needs to link a dashboard account.
"""

from typing import Any

from django.contrib.auth.models import Group, User
from django.core.management import BaseCommand, call_command
from oidc_provider import settings as op_settings
from oidc_provider.models import Client, ResponseType, RSAKey
from op_site.models import Profile


class Command(BaseCommand):
    help = __doc__

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--client-id")
        parser.add_argument("--client-secret")
        parser.add_argument("--redirect-uri", action="append", default=[])
        parser.add_argument(
            "--user",
            action="append",
            default=[],
            help="name:password:group,group[:preferred_username] (groups may be empty;"
            " preferred_username defaults to the name)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        sub_generator = op_settings.get("OIDC_IDTOKEN_SUB_GENERATOR", import_str=True)
        if not RSAKey.objects.exists():
            call_command("creatersakey", stdout=self.stdout)
        if options["client_id"]:
            client, _ = Client.objects.update_or_create(
                client_id=options["client_id"],
                defaults={
                    "name": "Lease dashboard (tests)",
                    "client_type": "confidential",
                    "client_secret": options["client_secret"],
                    "jwt_alg": "RS256",
                    "require_consent": False,
                    "reuse_consent": True,
                },
            )
            if options["redirect_uri"]:
                client.redirect_uris = options["redirect_uri"]
                client.save()
            client.response_types.set([ResponseType.objects.get(value="code")])
        for spec in options["user"]:
            name, password, groups, *preferred = spec.split(":", 3)
            user, _ = User.objects.get_or_create(username=name)
            user.set_password(password)
            user.email = f"{name.replace(' ', '.')}@example.org"
            user.first_name = name.title()
            user.save()
            user.groups.set(
                [Group.objects.get_or_create(name=group)[0] for group in groups.split(",") if group]
            )
            Profile.objects.update_or_create(
                user=user, defaults={"preferred_username": "".join(preferred)}
            )
            self.stdout.write(f"subject {name} {sub_generator(user)}")
        self.stdout.write("seeded")
