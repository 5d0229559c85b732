"""Re-encrypt every stored secret with the first key of SECRETS_ENCRYPTION_KEYS."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from dashboard.encryption import RotationResult, rotate_stored_secrets


class Command(BaseCommand):
    help = (
        "Re-encrypt every stored secret (kubeconfigs, NKS passwords and tokens) with the first "
        "key of SECRETS_ENCRYPTION_KEYS, and print how many rows changed. Rotate a key by "
        "putting the new one first, running this, then removing the old one."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        result: RotationResult = rotate_stored_secrets()
        for model_label, field_name, changed in result.per_column:
            self.stdout.write(f"{model_label}.{field_name}: {changed} row(s) re-encrypted")
        self.stdout.write(f"Re-encrypted {result.changed} row(s) with the first key.")
        if result.unreadable:
            raise CommandError(
                f"{len(result.unreadable)} secret(s) could not be decrypted with any key and "
                "were left as they are: "
                + ", ".join(result.unreadable)
                + ". Add the key that encrypted them to SECRETS_ENCRYPTION_KEYS and run this "
                "again, or enter those secrets again."
            )
