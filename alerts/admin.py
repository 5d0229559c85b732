from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from alerts import delivery
from alerts.models import (
    AlertRule,
    AlertSubscription,
    DeliveryState,
    Incident,
    IncidentEvent,
    Notification,
    Rule,
    Silence,
)
from alerts.rules import RULE_SPECS


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    list_display = (
        "rule",
        "enabled",
        "severity_shown",
        "grace_seconds",
        "threshold",
        "window_seconds",
        "recipients",
        "mail_default_recipients",
    )
    list_editable = ("enabled",)
    readonly_fields = ("rule", "what_it_checks", "updated_at")
    fields = (
        "rule",
        "what_it_checks",
        "enabled",
        "severity",
        "grace_seconds",
        "threshold",
        "window_seconds",
        "recipients",
        "mail_default_recipients",
        "updated_at",
    )

    @admin.display(description="severity")
    def severity_shown(self, obj: AlertRule) -> str:
        return obj.severity or f"{RULE_SPECS[Rule(obj.rule)].severity} (default)"

    @admin.display(description="what it checks, and what its fields mean")
    def what_it_checks(self, obj: AlertRule) -> str:
        spec = RULE_SPECS[Rule(obj.rule)]
        parts = [spec.summary]
        for label, text in (
            ("Grace", spec.grace_help),
            ("Threshold", spec.threshold_help),
            ("Window", spec.window_help),
        ):
            parts.append(f"{label}: {text or 'not used by this rule.'}")
        return " ".join(parts)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # one row per rule, created by migrate

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class IncidentEventInline(admin.TabularInline):
    model = IncidentEvent
    extra = 0
    can_delete = False
    readonly_fields = ("at", "kind", "text", "user")

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Incident)
class IncidentAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "state",
        "severity",
        "rule",
        "cluster",
        "title",
        "since",
        "resolved_at",
        "acknowledged_by",
    )
    list_filter = ("state", "severity", "rule")
    search_fields = ("key", "title", "cluster")
    inlines = [IncidentEventInline]

    def get_readonly_fields(self, request: HttpRequest, obj: object = None) -> list[str]:
        return [field.name for field in Incident._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = ("id", "kind", "group", "subject", "state", "attempts", "created_at", "sent_at")
    list_filter = ("state", "kind")
    search_fields = ("subject", "group")
    actions = ["retry_now"]

    def get_readonly_fields(self, request: HttpRequest, obj: object = None) -> list[str]:
        return [field.name for field in Notification._meta.fields] + ["incidents"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Retry now (failed or waiting ones)")
    def retry_now(self, request: HttpRequest, queryset: QuerySet[Notification]) -> None:
        retried = sum(
            delivery.retry_notification_now(pk)
            for pk in queryset.filter(
                state__in=[DeliveryState.FAILED, DeliveryState.PENDING]
            ).values_list("pk", flat=True)
        )
        self.message_user(
            request, f"{retried} notification(s) will be sent by the next sweep.", messages.INFO
        )


@admin.register(Silence)
class SilenceAdmin(admin.ModelAdmin):
    list_display = ("key", "starts_at", "ends_at", "created_by", "reason")
    search_fields = ("key", "reason")


@admin.register(AlertSubscription)
class AlertSubscriptionAdmin(admin.ModelAdmin):
    list_display = ("user", "enabled", "min_severity", "updated_at")
    list_filter = ("enabled", "min_severity")
