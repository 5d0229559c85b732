from __future__ import annotations

from collections import Counter
from typing import Any

from django.contrib import admin, messages
from django.contrib.auth import get_permission_codename
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from dashboard.admin import WriteOnlySecretsAdmin
from nks.forms import NksAccountForm
from nks.models import NksAccount, NksCluster, NksEvent, NksNodegroup, ResizeRequest
from nks.resize_progress import GiveUp, give_up_resize

POLL_STATUS_FIELDS = (
    "last_poll_at",
    "last_success_at",
    "last_poll_seconds",
    "last_poll_calls",
    "last_error",
    "last_error_kind",
    "last_error_at",
    "consecutive_failures",
    "polls_total",
    "poll_failures_total",
    "next_poll_at",
)


@admin.register(NksAccount)
class NksAccountAdmin(WriteOnlySecretsAdmin):
    """Accounts; the password and token are write-only (never rendered back)."""

    form = NksAccountForm
    list_display = ("name", "enabled", "api_url", "last_success_at", "consecutive_failures")
    list_filter = ("enabled",)
    search_fields = ("name", "api_url")
    readonly_fields = POLL_STATUS_FIELDS
    fieldsets = (
        (None, {"fields": ("name", "enabled", "api_url")}),
        (
            _("Identity credentials"),
            {"fields": ("identity_url", "tenant_id", "username", "password")},
        ),
        (_("Or a fixed token"), {"fields": ("token", "clear_token")}),
        (_("Polling"), {"fields": POLL_STATUS_FIELDS}),
    )

    def get_fieldsets(self, request: HttpRequest, obj: NksAccount | None = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        if obj is None or self.has_change_permission(request, obj):
            return fieldsets
        # "Clear token" is a form box, not a column: a reader has nothing to see in it.
        return [
            (title, {**options, "fields": [f for f in options["fields"] if f != "clear_token"]})
            for title, options in fieldsets
        ]


class ReadOnlyAdmin(admin.ModelAdmin):
    """Observed data: NKS owns it, so admin only shows it."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(NksCluster)
class NksClusterAdmin(ReadOnlyAdmin):
    list_display = ("name", "account", "status", "health", "health_status", "polled_at", "gone_at")
    list_filter = ("account", "health", "freshness")
    search_fields = ("name", "uuid")
    list_select_related = ("account",)


@admin.register(NksNodegroup)
class NksNodegroupAdmin(ReadOnlyAdmin):
    list_display = ("name", "cluster", "status", "node_count", "ready", "not_ready", "gone_at")
    search_fields = ("name", "uuid", "cluster__name")
    list_select_related = ("cluster",)


@admin.register(NksEvent)
class NksEventAdmin(ReadOnlyAdmin):
    list_display = ("type", "state", "resource_name", "cluster", "nks_created_at")
    list_filter = ("state", "type")
    list_select_related = ("cluster",)


@admin.register(ResizeRequest)
class ResizeRequestAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "nodegroup_name",
        "cluster",
        "from_count",
        "to_count",
        "username",
        "state",
        "created_at",
    )
    list_filter = ("state", "source")
    search_fields = ("nodegroup_name", "username", "reason")
    list_select_related = ("cluster",)
    actions = ("give_up",)

    def has_give_up_permission(self, request: HttpRequest) -> bool:
        # Rows are read-only here (NKS and the resize service write them), yet giving up
        # changes one: it takes the model's change permission, like any change.
        opts = self.opts
        codename = get_permission_codename("change", opts)
        return request.user.has_perm(f"{opts.app_label}.{codename}")

    @admin.action(description=_("Give up following"), permissions=["give_up"])
    def give_up(self, request: HttpRequest, queryset: QuerySet[ResizeRequest]) -> None:
        outcomes = Counter(
            give_up_resize(pk, request.user.get_username())
            for pk in queryset.values_list("pk", flat=True)
        )
        ended, unfollowed = outcomes[GiveUp.ENDED], outcomes[GiveUp.UNFOLLOWED]
        if ended:
            self.message_user(
                request,
                ngettext(
                    "Ended %(count)s request: nothing had been sent to NKS.",
                    "Ended %(count)s requests: nothing had been sent to NKS.",
                    ended,
                )
                % {"count": ended},
                messages.SUCCESS,
            )
        if unfollowed:
            self.message_user(
                request,
                ngettext(
                    "Stopped following %(count)s request. NKS may still be resizing: it stays "
                    "in flight, and no other resize of its nodegroup starts, until NKS shows "
                    "the nodegroup no longer updating.",
                    "Stopped following %(count)s requests. NKS may still be resizing: they stay "
                    "in flight, and no other resize of their nodegroups starts, until NKS shows "
                    "the nodegroups no longer updating.",
                    unfollowed,
                )
                % {"count": unfollowed},
                messages.WARNING,
            )
        if not (ended or unfollowed):
            self.message_user(
                request, gettext("Nothing to give up: those requests have ended."), messages.INFO
            )
