"""The dashboard's own records: API tokens, SSO identities, worker heartbeats and the operator
permission."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

API_TOKEN_PREFIX = "ldb_"  # noqa: S105 - a public marker that makes leaked tokens greppable


def hash_api_token(token: str) -> str:
    # Tokens are 256 random bits, so a fast hash is enough: nothing to brute-force.
    return hashlib.sha256(token.encode()).hexdigest()


class ClusterActions(models.Model):
    """Holds the permission for actions that change clusters; has no table of its own."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [
            ("change_clusters", "Can take actions that change clusters (resize, add sources)"),
        ]

    def __str__(self) -> str:
        return "cluster actions"


class ApiTokenQuerySet(models.QuerySet["ApiToken"]):
    def active(self) -> ApiTokenQuerySet:
        return self.filter(revoked_at__isnull=True, user__is_active=True)

    def update(self, **kwargs: Any) -> int:
        # Revocation is final: no update may clear it (issue a new token instead).
        if "revoked_at" in kwargs and kwargs["revoked_at"] is None:
            raise ValueError("A revoked API token cannot be restored: issue a new one.")
        return super().update(**kwargs)


class ApiToken(models.Model):
    """A per-user bearer token for the JSON API. Only its hash is stored.

    A token carries a scope: ``read`` (the default) reaches every GET endpoint, ``write``
    also the endpoints that change clusters. The scope limits the token, never the user:
    a write token still needs a user with the permission for the action.
    """

    class Scope(models.TextChoices):
        # Ordered from least to most: each scope includes the ones before it.
        READ = "read", "read (GET endpoints)"
        WRITE = "write", "write (also resizes)"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100, blank=True, help_text="What the token is for.")
    prefix = models.CharField(
        max_length=12, help_text="The token's first characters, to recognise it."
    )
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)
    scope = models.CharField(
        max_length=10,
        choices=Scope,
        default=Scope.READ,
        help_text="read: GET endpoints only; write: also endpoints that change clusters.",
    )

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Revocation is final: saving a token whose row is revoked keeps it revoked.

        An instance read before someone revoked the row (an admin's open form, say) must not
        bring it back by saving its stale, empty ``revoked_at``.
        """
        update_fields = kwargs.get("update_fields")
        writes_revocation = update_fields is None or "revoked_at" in update_fields
        if self.pk is not None and self.revoked_at is None and writes_revocation:
            stored = (
                type(self)
                .objects.filter(pk=self.pk, revoked_at__isnull=False)
                .values_list("revoked_at", flat=True)
                .first()
            )
            if stored is not None:
                self.revoked_at = stored
        super().save(*args, **kwargs)

    @classmethod
    def issue(
        cls, user: models.Model, name: str = "", scope: str = Scope.READ
    ) -> tuple[ApiToken, str]:
        """Create a token; the plain text is returned once and never stored."""
        plain = API_TOKEN_PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(
            user=user,
            name=name,
            prefix=plain[:10],
            token_hash=hash_api_token(plain),
            scope=cls.Scope(scope),
        )
        return token, plain

    def has_scope(self, required: str) -> bool:
        """Whether this token's scope covers ``required`` (write covers read)."""
        order = list(self.Scope)
        return order.index(self.Scope(self.scope)) >= order.index(self.Scope(required))

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def revoke(self) -> None:
        if self.revoked_at is None:
            self.revoked_at = timezone.now()
            self.save(update_fields=["revoked_at"])


class WorkerHeartbeat(models.Model):
    """When a worker of each queue last ran a task: silent workers must show, not hide."""

    queue = models.CharField(max_length=50, unique=True)
    seen_at = models.DateTimeField()
    worker = models.CharField(max_length=200, blank=True)

    def __str__(self) -> str:
        return f"{self.queue} at {self.seen_at:%Y-%m-%d %H:%M:%S}"

    def age_seconds(self, now: timezone.datetime | None = None) -> float:
        return ((now or timezone.now()) - self.seen_at).total_seconds()


class UserPreference(models.Model):
    """What a person chose for themselves: the language and time zone pages and mail use.

    Blank means "not chosen": the language then follows the browser's Accept-Language and
    LANGUAGE_CODE, the time zone TIME_ZONE (see dashboard.preferences).
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="preference"
    )
    language = models.CharField(max_length=10, blank=True, choices=settings.LANGUAGES)
    time_zone = models.CharField(max_length=64, blank=True)
    # The browser's zone is offered once: after the answer (or a choice) it is not asked again.
    time_zone_offered = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.user}: {self.language or '-'} {self.time_zone or '-'}"


def normalize_issuer(issuer: str) -> str:
    """An issuer as stored and compared: `https://sso/realm/` and `https://sso/realm` are one."""
    return issuer.strip().rstrip("/")


class SsoIdentity(models.Model):
    """Which person at the OpenID provider an account belongs to: the token's (iss, sub).

    OpenID Connect Core §5.7: only ``sub`` with ``iss`` is unique and stable; a user name claim
    such as ``preferred_username`` is neither, so single sign-on finds accounts by this row
    alone. Single sign-on creates the row with the account it creates; an existing local
    account (a superuser, one with a password) is reached by SSO only after a superuser adds
    the row in the admin.
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identity"
    )
    issuer = models.CharField(
        max_length=255, help_text="The provider's issuer URL, as in the ID token's “iss”."
    )
    subject = models.CharField(
        max_length=255, help_text="The person's “sub” at that provider (not their user name)."
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    last_login_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        verbose_name = "single sign-on identity"
        verbose_name_plural = "single sign-on identities"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="sso_identity_unique_sub"),
        ]

    def __str__(self) -> str:
        return f"{self.user} = {self.subject} at {self.issuer}"

    def clean(self) -> None:
        # An admin may paste the issuer with a trailing slash; the backend looks it up without.
        self.issuer = normalize_issuer(self.issuer)
        self.subject = self.subject.strip()
