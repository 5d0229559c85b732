"""Data-migration steps shared by the apps that store secrets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dashboard.encryption import CIPHERTEXT_PREFIX, decrypt, encrypt


def encrypt_plaintext_columns(app_label: str, model_name: str, *fields: str) -> Callable[..., None]:
    """A RunPython step that encrypts the plain-text values of these columns.

    It runs while the columns are still plain TextFields, so it sees the stored text as it is;
    values already carrying the ciphertext prefix are left alone, so running it twice is
    harmless.
    """

    def forwards(apps: Any, schema_editor: Any) -> None:
        model = apps.get_model(app_label, model_name)
        for row in model.objects.values("pk", *fields).iterator():
            changed = {
                field: encrypt(row[field])
                for field in fields
                if row[field] and not row[field].startswith(CIPHERTEXT_PREFIX)
            }
            if changed:
                model.objects.filter(pk=row["pk"]).update(**changed)

    return forwards


def decrypt_columns(app_label: str, model_name: str, *fields: str) -> Callable[..., None]:
    """The reverse step: back to plain text (for a downgrade), column by column."""

    def backwards(apps: Any, schema_editor: Any) -> None:
        model = apps.get_model(app_label, model_name)
        for row in model.objects.values("pk", *fields).iterator():
            changed = {
                field: decrypt(row[field])
                for field in fields
                if row[field] and row[field].startswith(CIPHERTEXT_PREFIX)
            }
            if changed:
                model.objects.filter(pk=row["pk"]).update(**changed)

    return backwards
