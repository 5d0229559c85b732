"""Admin of the dashboard's own records, and what every app's admin shares.

``WriteOnlySecretsAdmin`` is the one rule for secrets in admin: an encrypted column is never
displayed, at any permission level. Django shows a field its reader may not change from the
model's (decrypted) value, which skips the write-only widgets; so every secret column is
replaced, wherever a page would show it, by "set" or "not set" (and when admin last changed
it, if its history says), and only someone who may change the row gets the input to replace
it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from axes.admin import AccessAttemptAdmin
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.text import format_lazy
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from dashboard.encryption import EncryptedTextField, secret_problem
from dashboard.models import ApiToken, SsoIdentity, UserPreference, WorkerHeartbeat
from dashboard.timefmt import local_moment_text

SecretDisplay = Callable[[models.Model], str]


def secret_field_names(model: type[models.Model]) -> list[str]:
    return [
        field.name for field in model._meta.concrete_fields if isinstance(field, EncryptedTextField)
    ]


def last_changed_in_admin(obj: models.Model, field: models.Field[Any, Any]) -> LogEntry | None:
    """The newest admin history entry that names this field among those it changed.

    The history records the changed fields by their form labels, untranslated: the field's
    name or verbose name, in any case.
    """
    names = {field.name.lower(), str(field.verbose_name).lower()}
    entries = LogEntry.objects.filter(
        content_type=ContentType.objects.get_for_model(obj, for_concrete_model=False),
        object_id=str(obj.pk),
        action_flag=CHANGE,
    ).select_related("user")
    for entry in entries.order_by("-action_time", "-pk")[:50]:
        try:
            changes = json.loads(entry.change_message or "[]")
        except ValueError:
            continue
        for change in changes if isinstance(changes, list) else ():
            fields = change.get("changed", {}).get("fields", []) if isinstance(change, dict) else []
            if any(str(label).lower() in names for label in fields):
                return entry
    return None


def secret_state(obj: models.Model, name: str) -> str:
    """What a page may say of a secret: whether one is stored, never what it is."""
    value = getattr(obj, name, "")
    if secret_problem(value) is not None:
        return gettext("set, but no configured key decrypts it: enter it again")
    if not value:
        return gettext("not set")
    entry = last_changed_in_admin(obj, obj._meta.get_field(name)) if obj.pk else None
    if entry is None:
        return gettext("set")
    return gettext("set (last changed %(when)s by %(who)s)") % {
        "when": local_moment_text(entry.action_time),
        "who": entry.user.get_username(),
    }


class WriteOnlySecretsAdmin(admin.ModelAdmin):
    """A model admin whose encrypted columns are never displayed, to anyone.

    Each secret column in the fields, fieldsets or list columns becomes a read-only "set /
    not set" line; a reader who may change the row also gets the write-only input (the form
    keeps the stored value when it is left blank).
    """

    def secret_displays(self) -> dict[str, SecretDisplay]:
        # One function per column, made once: Django finds read-only fields by identity.
        displays: dict[str, SecretDisplay] | None = self.__dict__.get("_secret_displays")
        if displays is None:
            displays = {name: self._make_display(name) for name in secret_field_names(self.model)}
            self.__dict__["_secret_displays"] = displays
        return displays

    def _make_display(self, name: str) -> SecretDisplay:
        def display(obj: models.Model) -> str:
            return secret_state(obj, name)

        verbose_name = self.model._meta.get_field(name).verbose_name
        display.__name__ = f"{name}_state"
        display.short_description = format_lazy("{} ({})", verbose_name, _("stored"))  # type: ignore[attr-defined]
        return display

    def _secret_safe(self, names: Sequence[Any], with_inputs: bool | None) -> list[Any]:
        displays = self.secret_displays()
        safe: list[Any] = []
        for name in names:
            if isinstance(name, list | tuple):
                safe.append(tuple(self._secret_safe(name, with_inputs)))
            elif isinstance(name, str) and name in displays:
                safe.extend(self._secret_line(name, with_inputs))
            else:
                safe.append(name)
        return safe

    def _secret_line(self, name: str, with_inputs: bool | None) -> list[Any]:
        """The line(s) shown for one secret column; None means the add page (input only)."""
        if with_inputs is None:
            return [name]
        display = self.secret_displays()[name]
        return [display, name] if with_inputs else [display]

    def get_fieldsets(self, request: HttpRequest, obj: models.Model | None = None) -> Any:
        may_write = None if obj is None else self.has_change_permission(request, obj)
        return [
            (title, {**options, "fields": self._secret_safe(options["fields"], may_write)})
            for title, options in super().get_fieldsets(request, obj)
        ]

    def get_readonly_fields(self, request: HttpRequest, obj: models.Model | None = None) -> Any:
        return [*super().get_readonly_fields(request, obj), *self.secret_displays().values()]

    def get_list_display(self, request: HttpRequest) -> Any:
        return self._secret_safe(super().get_list_display(request), with_inputs=False)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = (
        "prefix",
        "user",
        "name",
        "scope",
        "created_at",
        "last_used_at",
        "revoked_at",
    )
    list_filter = ("scope", "revoked_at")
    search_fields = ("prefix", "user__username", "name")
    # The scope is chosen when the token is issued (create_api_token --scope), where the
    # operator check runs; widening it here would skip that check. Issue a new token instead.
    readonly_fields = ("prefix", "user", "scope", "created_at", "last_used_at")
    fields = ("prefix", "user", "name", "scope", "created_at", "last_used_at", "revoked_at")
    actions = ("revoke",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Tokens are shown once at creation, which admin cannot do safely: use the
        # create_api_token command.
        return False

    def has_change_permission(self, request: HttpRequest, obj: ApiToken | None = None) -> bool:
        # Revocation is final: a revoked token's page only shows it (the model refuses to
        # clear revoked_at too).
        if obj is not None and obj.revoked_at is not None:
            return False
        return super().has_change_permission(request, obj)

    @admin.action(description=_("Revoke selected tokens"), permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(
            request,
            ngettext("Revoked %(count)d token.", "Revoked %(count)d tokens.", count)
            % {"count": count},
            messages.SUCCESS,
        )


@admin.register(WorkerHeartbeat)
class WorkerHeartbeatAdmin(admin.ModelAdmin):
    list_display = ("queue", "seen_at", "worker")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(UserPreference)
class UserPreferenceAdmin(admin.ModelAdmin):
    list_display = ("user", "language", "time_zone", "time_zone_offered", "updated_at")
    list_filter = ("language", "time_zone_offered")
    search_fields = ("user__username", "time_zone")
    readonly_fields = ("updated_at",)


@admin.register(SsoIdentity)
class SsoIdentityAdmin(admin.ModelAdmin):
    """Links accounts to people at the provider; a link decides who signs in as whom.

    Adding a link is how an existing local account (a break-glass superuser, an account with a
    password) is opened to single sign-on, so only superusers may add, change or remove one.
    """

    list_display = ("user", "subject", "issuer", "created_at", "last_login_at")
    search_fields = ("user__username", "subject")
    raw_id_fields = ("user",)
    fields = ("user", "issuer", "subject", "created_at", "last_login_at")
    readonly_fields = ("created_at", "last_login_at")

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, str]:
        initial = super().get_changeform_initial_data(request)
        initial.setdefault("issuer", settings.OIDC_ISSUER or "")
        return initial

    def has_add_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return bool(request.user.is_superuser)

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return bool(request.user.is_superuser)


class GuardedAccessAttemptAdmin(AccessAttemptAdmin):
    """django-axes' lockouts, whose one action (deleting expired attempts) anyone who may
    view them could run: it takes the permission to delete them."""

    def has_cleanup_permission(self, request: HttpRequest) -> bool:
        return self.has_delete_permission(request)

    @admin.action(description=_("Clean up expired attempts"), permissions=["cleanup"])
    def cleanup_expired_attempts(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        super().cleanup_expired_attempts(request, queryset)


if admin.site.is_registered(AccessAttempt):  # axes registers it when AXES_ENABLE_ADMIN
    admin.site.unregister(AccessAttempt)
    admin.site.register(AccessAttempt, GuardedAccessAttemptAdmin)
