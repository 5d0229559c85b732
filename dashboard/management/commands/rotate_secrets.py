"""Re-encrypt every stored secret with the first key of SECRETS_ENCRYPTION_KEYS."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError
from django.utils.translation import gettext

from dashboard.commands import DatabaseCommand
from dashboard.encryption import RotationResult, rotate_stored_secrets


class Command(DatabaseCommand):
    help = (
        "Re-encrypt every stored secret (kubeconfigs, NKS passwords and tokens) with the first "
        "key of SECRETS_ENCRYPTION_KEYS, and print how many rows changed. Rotate a key by "
        "putting the new one first, running this, then removing the old one."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        result: RotationResult = rotate_stored_secrets()
        for model_label, field_name, changed in result.per_column:
            self.stdout.write(
                gettext("%(column)s: %(count)d row(s) re-encrypted")
                % {"column": f"{model_label}.{field_name}", "count": changed}
            )
        self.stdout.write(
            gettext("Re-encrypted %(count)d row(s) with the first key.") % {"count": result.changed}
        )
        if result.unreadable:
            raise CommandError(
                gettext(
                    "%(count)d secret(s) could not be decrypted with any key and were left as"
                    " they are: %(secrets)s. Add the key that encrypted them to"
                    " SECRETS_ENCRYPTION_KEYS and run this again, or enter those secrets again."
                )
                % {"count": len(result.unreadable), "secrets": ", ".join(result.unreadable)}
            )
