"""Admin for alert rules, incidents, the outbox, silences, subscriptions and channels.

An alert channel's URL and signing secret are write-only here: the form never renders them
back (a blank field on edit keeps the stored value), and no list or page shows them.
"""

from __future__ import annotations

import zoneinfo
from typing import Any
from urllib.parse import urlsplit

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from alerts import delivery
from alerts.channels.planning import queue_test_message
from alerts.models import (
    AlertChannel,
    AlertRule,
    AlertSubscription,
    ChannelKind,
    DeliveryState,
    Incident,
    IncidentEvent,
    Notification,
    Rule,
    Severity,
    Silence,
)
from alerts.rules import RULE_SPECS
from dashboard.admin import WriteOnlySecretsAdmin
from dashboard.forms import write_only_secret

RECENT_NOTIFICATIONS = 20


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

    @admin.display(description=_("severity"))
    def severity_shown(self, obj: AlertRule) -> str:
        if obj.severity:
            return str(obj.get_severity_display())
        default = RULE_SPECS[Rule(obj.rule)].severity
        return gettext("%(severity)s (default)") % {"severity": Severity(default).label}

    @admin.display(description=_("what it checks, and what its fields mean"))
    def what_it_checks(self, obj: AlertRule) -> str:
        spec = RULE_SPECS[Rule(obj.rule)]
        unused = gettext("not used by this rule.")
        # Each field's sentence whole, so a translation may order its words freely.
        return " ".join(
            [
                str(spec.summary),
                gettext("Grace: %(help)s") % {"help": spec.grace_help or unused},
                gettext("Threshold: %(help)s") % {"help": spec.threshold_help or unused},
                gettext("Window: %(help)s") % {"help": spec.window_help or unused},
            ]
        )

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
    list_display = (
        "id",
        "kind",
        "channel",
        "group",
        "subject",
        "state",
        "attempts",
        "created_at",
        "sent_at",
    )
    list_filter = ("state", "kind", "channel")
    list_select_related = ("channel",)
    search_fields = ("subject", "group")
    actions = ["retry_now"]

    def get_readonly_fields(self, request: HttpRequest, obj: object = None) -> list[str]:
        return [field.name for field in Notification._meta.fields] + ["incidents"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description=_("Retry now (failed or waiting ones)"), permissions=["change"])
    def retry_now(self, request: HttpRequest, queryset: QuerySet[Notification]) -> None:
        retried = sum(
            delivery.retry_notification_now(pk)
            for pk in queryset.filter(
                state__in=[DeliveryState.FAILED, DeliveryState.PENDING]
            ).values_list("pk", flat=True)
        )
        self.message_user(
            request,
            ngettext(
                "%(count)d notification will be sent by the next sweep.",
                "%(count)d notifications will be sent by the next sweep.",
                retried,
            )
            % {"count": retried},
            messages.INFO,
        )


@admin.register(Silence)
class SilenceAdmin(admin.ModelAdmin):
    list_display = ("key", "starts_at", "ends_at", "created_by", "reason")
    search_fields = ("key", "reason")


@admin.register(AlertSubscription)
class AlertSubscriptionAdmin(admin.ModelAdmin):
    list_display = ("user", "enabled", "min_severity", "updated_at")
    list_filter = ("enabled", "min_severity")


def validate_channel_url(value: str) -> None:
    """http or https with a host: anything else cannot be an incoming webhook."""
    try:
        parts = urlsplit(value)
        host = parts.hostname
    except ValueError:
        raise forms.ValidationError(_("Enter a valid http or https URL.")) from None
    if parts.scheme not in ("http", "https"):
        raise forms.ValidationError(_("The URL must start with http:// or https://."))
    if not host:
        raise forms.ValidationError(_("The URL must name a host."))


class AlertChannelForm(forms.ModelForm):
    # Write-only: PasswordInput never renders a value back (render_value=False), and a
    # blank field on edit keeps what is stored.
    url = write_only_secret(
        _(
            "The incoming webhook's URL. Write-only: it is never shown again; leave blank "
            "to keep the stored one."
        ),
        label=_("URL"),
    )
    signing_secret = write_only_secret(
        _(
            "Generic webhook only: the HMAC-SHA256 key for the X-Dashboard-Signature header. "
            "Write-only; leave blank to keep the stored one."
        ),
        label=_("signing secret"),
    )
    rules = forms.MultipleChoiceField(
        label=_("rules"),
        choices=Rule.choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=_("Only incidents of these rules; none ticked: every rule."),
    )
    clusters = forms.CharField(
        label=_("clusters"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_("Only incidents of these clusters, comma- or newline-separated; empty: all."),
    )

    class Meta:
        model = AlertChannel
        fields = (
            "name",
            "kind",
            "url",
            "signing_secret",
            "enabled",
            "rules",
            "min_severity",
            "clusters",
            "language",
            "time_zone",
            "max_per_minute",
        )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Never put the stored secrets into the form's initial data (they would be rendered
        # by any widget that shows its value).
        self.initial.pop("url", None)
        self.initial.pop("signing_secret", None)
        self.initial["clusters"] = "\n".join(self.instance.clusters or [])
        # A reader who may only view the channel gets a form without these fields.
        help_texts = {
            "time_zone": _("Times in its messages, e.g. Asia/Seoul; empty: TIME_ZONE."),
            "language": _("Empty: ALERT_EMAIL_LANGUAGE."),
            "max_per_minute": _(
                "More messages than this in a minute wait, and fold into one summary; 0: no limit."
            ),
        }
        for name, help_text in help_texts.items():
            if name in self.fields:
                self.fields[name].help_text = help_text

    def clean_url(self) -> str:
        value: str = self.cleaned_data.get("url", "")
        if not value:
            if self.instance.pk and self.instance.url:
                return str(self.instance.url)
            raise forms.ValidationError(_("A channel needs its URL."))
        validate_channel_url(value)
        return value

    def clean_signing_secret(self) -> str:
        value: str = self.cleaned_data.get("signing_secret", "")
        return value or (str(self.instance.signing_secret) if self.instance.pk else "")

    def clean_clusters(self) -> list[str]:
        text = self.cleaned_data.get("clusters", "") or ""
        names = [part.strip() for part in text.replace(",", "\n").splitlines()]
        return list(dict.fromkeys(name for name in names if name))

    def clean_time_zone(self) -> str:
        value = (self.cleaned_data.get("time_zone") or "").strip()
        if value:
            try:
                zoneinfo.ZoneInfo(value)
            except (zoneinfo.ZoneInfoNotFoundError, ValueError):
                raise forms.ValidationError(_("Not a known time zone (e.g. Asia/Seoul).")) from None
        return value

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("kind") == ChannelKind.WEBHOOK and not cleaned.get("signing_secret"):
            self.add_error(
                "signing_secret", _("A generic webhook signs every message: set a secret.")
            )
        return cleaned


@admin.register(AlertChannel)
class AlertChannelAdmin(WriteOnlySecretsAdmin):
    form = AlertChannelForm
    list_display = (
        "name",
        "kind",
        "enabled",
        "min_severity",
        "rules_shown",
        "language",
        "max_per_minute",
        "last_sent",
    )
    list_filter = ("kind", "enabled")
    search_fields = ("name",)
    readonly_fields = ("recent_notifications",)
    actions = ["send_test_message"]

    def get_fields(self, request: HttpRequest, obj: AlertChannel | None = None) -> list[str]:
        fields = list(AlertChannelForm.Meta.fields)
        return [*fields, "recent_notifications"] if obj is not None else fields

    @admin.display(description=_("rules"))
    def rules_shown(self, obj: AlertChannel) -> str:
        if not obj.rules:
            return gettext("all")
        return ", ".join(str(Rule(rule).label) for rule in obj.rules if rule in Rule.values)

    @admin.display(description=_("last sent"))
    def last_sent(self, obj: AlertChannel) -> object:
        row = (
            obj.notifications.filter(sent_at__isnull=False, folded_into__isnull=True)
            .order_by("-sent_at")
            .values_list("sent_at", flat=True)
            .first()
        )
        return row or "-"

    @admin.display(description=_("recent messages"))
    def recent_notifications(self, obj: AlertChannel) -> SafeString | str:
        rows = list(obj.notifications.order_by("-created_at", "-id")[:RECENT_NOTIFICATIONS])
        if not rows:
            return gettext("None yet.")
        # Every value is escaped by format_html; the endpoint's answer is its text, shown.
        body = format_html_join(
            "",
            '<tr><td><a href="{}">#{}</a></td><td>{}</td><td>{}</td><td>{}</td>'
            "<td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    reverse("admin:alerts_notification_change", args=[row.pk]),
                    row.pk,
                    row.created_at,
                    row.get_kind_display(),
                    row.get_state_display()
                    + (f" (#{row.folded_into_id})" if row.folded_into_id else ""),
                    row.attempts,
                    row.last_error or "-",
                    row.last_response or "-",
                )
                for row in rows
            ),
        )
        return format_html(
            "<table><thead><tr><th>#</th><th>{}</th><th>{}</th><th>{}</th><th>{}</th>"
            "<th>{}</th><th>{}</th></tr></thead><tbody>{}</tbody></table>",
            gettext("created"),
            gettext("kind"),
            gettext("state"),
            gettext("attempts"),
            gettext("last error"),
            gettext("last response"),
            body,
        )

    @admin.action(description=_("Send a test message (through the outbox)"), permissions=["change"])
    def send_test_message(self, request: HttpRequest, queryset: QuerySet[AlertChannel]) -> None:
        channels = list(queryset)
        for channel in channels:
            queue_test_message(channel)
        count = len(channels)
        self.message_user(
            request,
            ngettext(
                "A test message to %(count)d channel is queued: its page lists how it went.",
                "Test messages to %(count)d channels are queued: their pages list how they went.",
                count,
            )
            % {"count": count},
            messages.INFO,
        )
