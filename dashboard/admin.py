from __future__ import annotations

from django.conf import settings
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from dashboard.models import ApiToken, SsoIdentity, UserPreference, WorkerHeartbeat


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

    @admin.action(description=_("Revoke selected tokens"))
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
