"""Secrets encrypted at rest: kubeconfigs, NKS passwords and tokens.

Values are encrypted with Fernet (AES-128-CBC + HMAC-SHA256) through a MultiFernet built from
``SECRETS_ENCRYPTION_KEYS``: the first key encrypts, every key decrypts, so keys can be
rotated (add a new key first, run ``manage.py rotate_secrets``, then drop the old one).

Stored values carry a ``fernet:`` prefix, so a plain-text value left by an old release is
recognised and refused, never used as if it were decrypted. A value that no configured key
can decrypt reads as an :class:`UnreadableSecret`: empty, with the reason for the row's
status, and with its ciphertext kept so that saving the row does not destroy it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.db import models
from django.db.models import TextField
from django.db.models.functions import Cast

CIPHERTEXT_PREFIX = "fernet:"


class SecretUnreadable(Exception):
    """A stored secret cannot be decrypted; the message says why, never what it holds."""


class Ciphertext(str):
    """An already encrypted value: written to the database as it is, never encrypted again."""

    __slots__ = ()


class UnreadableSecret(Ciphertext):
    """What a secret column reads as when it cannot be decrypted: empty, with the reason.

    Its ciphertext is what gets written back if the row is saved, so a wrong or missing key
    never turns into a lost secret.
    """

    ciphertext: str
    reason: str

    def __new__(cls, ciphertext: str, reason: str) -> UnreadableSecret:
        value = super().__new__(cls, "")
        value.ciphertext = ciphertext
        value.reason = reason
        return value

    def __repr__(self) -> str:
        return f"UnreadableSecret({self.reason!r})"


def secret_problem(value: object) -> str | None:
    """Why a secret read from the database cannot be used, or None when it can."""
    return value.reason if isinstance(value, UnreadableSecret) else None


def validate_keys(keys: list[str], variable: str = "SECRETS_ENCRYPTION_KEYS") -> None:
    """Each key must be a Fernet key; the error says which one (by position, not by value)."""
    if not keys:
        raise ValueError(f"{variable} is empty: give at least one key.")
    for position, key in enumerate(keys, start=1):
        try:
            Fernet(key.encode("ascii"))
        except (ValueError, UnicodeEncodeError):
            raise ValueError(
                f"{variable}: key {position} of {len(keys)} is not a Fernet key (32 url-safe "
                'base64-encoded bytes; make one with `python -c "from cryptography.fernet '
                'import Fernet; print(Fernet.generate_key().decode())"`).'
            ) from None


def generate_key() -> str:
    return Fernet.generate_key().decode("ascii")


@functools.lru_cache(maxsize=4)
def _multi_fernet(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(key.encode("ascii")) for key in keys])


def _keys() -> tuple[str, ...]:
    # Read at every call (cheap, cached by value) so tests and rotations see the current keys.
    return tuple(settings.SECRETS_ENCRYPTION_KEYS)


def encrypt(plain: str) -> str:
    """The stored form of a secret; the empty string stays empty (no secret set)."""
    if plain == "":
        return ""
    token = _multi_fernet(_keys()).encrypt(plain.encode("utf-8"))
    return CIPHERTEXT_PREFIX + token.decode("ascii")


def decrypt(stored: str) -> str:
    if stored == "":
        return ""
    if not stored.startswith(CIPHERTEXT_PREFIX):
        raise SecretUnreadable(
            "The stored secret is not encrypted (left by an older release): run "
            "`manage.py migrate`, then enter the secret again if this persists."
        )
    try:
        return _multi_fernet(_keys()).decrypt(stored[len(CIPHERTEXT_PREFIX) :]).decode("utf-8")
    except (InvalidToken, UnicodeDecodeError):
        raise SecretUnreadable(
            "The stored secret cannot be decrypted with any key in SECRETS_ENCRYPTION_KEYS: "
            "the key that encrypted it is missing or wrong. Restore that key, or enter the "
            "secret again."
        ) from None


def is_current(stored: str) -> bool:
    """Encrypted with the first (current) key, so rotation has nothing to do."""
    if not stored.startswith(CIPHERTEXT_PREFIX):
        return stored == ""
    try:
        Fernet(_keys()[0].encode("ascii")).decrypt(stored[len(CIPHERTEXT_PREFIX) :])
    except InvalidToken:
        return False
    return True


def rotate(stored: str) -> str:
    """Re-encrypt with the first key (plain text left by an old release is encrypted)."""
    if stored == "":
        return ""
    if not stored.startswith(CIPHERTEXT_PREFIX):
        return encrypt(stored)
    try:
        token = _multi_fernet(_keys()).rotate(stored[len(CIPHERTEXT_PREFIX) :])
    except InvalidToken:
        raise SecretUnreadable(
            "cannot be decrypted with any key in SECRETS_ENCRYPTION_KEYS"
        ) from None
    return CIPHERTEXT_PREFIX + token.decode("ascii")


class EncryptedTextField(models.TextField):
    """A text column whose value is encrypted in the database and plain in Python.

    Encryption is randomised, so the column can only be compared with "" (no secret set).
    """

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> str | None:
        if value is None:
            return None
        try:
            return decrypt(value)
        except SecretUnreadable as error:
            return UnreadableSecret(value, str(error))

    def get_prep_value(self, value: Any) -> Any:
        if isinstance(value, UnreadableSecret):
            return value.ciphertext
        if isinstance(value, Ciphertext):
            return str.__str__(value)
        value = super().get_prep_value(value)
        if value is None:
            return None
        return encrypt(value)


def encrypted_fields() -> list[tuple[type[models.Model], str]]:
    """Every (model, field name) stored encrypted, for rotation and checks."""
    from django.apps import apps

    return [
        (model, model_field.name)
        for model in apps.get_models()
        for model_field in model._meta.concrete_fields
        if isinstance(model_field, EncryptedTextField)
    ]


@dataclass
class RotationResult:
    changed: int = 0
    per_column: list[tuple[str, str, int]] = field(default_factory=list)
    # "app.Model#pk.field" of secrets no configured key decrypts: left untouched.
    unreadable: list[str] = field(default_factory=list)


def rotate_stored_secrets() -> RotationResult:
    """Re-encrypt every secret not already under the first key; safe to run twice.

    Reads the stored ciphertext itself (cast to plain text, so the field does not decrypt
    it), and writes each row in its own small transaction: a rotation interrupted halfway
    leaves every row readable, since every old key still decrypts.
    """
    result = RotationResult()
    for model, field_name in encrypted_fields():
        changed = 0
        stored_rows = model.objects.annotate(
            stored=Cast(field_name, output_field=TextField())
        ).values_list("pk", "stored")
        for pk, stored in stored_rows.iterator():
            if not stored or is_current(stored):
                continue
            try:
                rotated = rotate(stored)
            except SecretUnreadable:
                result.unreadable.append(f"{model._meta.label}#{pk}.{field_name}")
                continue
            model.objects.filter(pk=pk).update(**{field_name: Ciphertext(rotated)})
            changed += 1
        result.per_column.append((model._meta.label, field_name, changed))
        result.changed += changed
    return result
