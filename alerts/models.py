"""Alert rules, incidents, silences, subscriptions and the e-mails sent about them.

An incident is one occurrence of one condition, named by a dedup key such as
``lease_expired:prod/kube-system/kube-scheduler``. While the condition holds there is exactly
one unresolved incident per key: a partial unique index guarantees it, whatever number of
evaluations run at once. Every e-mail is first a `Notification` row; a Celery task sends it
(see `alerts.delivery.deliver_notification` for how a row is claimed and retried).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import models
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from dashboard.encryption import EncryptedTextField
from dashboard.timefmt import format_duration


class Rule(models.TextChoices):
    LEASE_EXPIRED = "lease_expired", _("lease expired")
    LEASE_FLAPPING = "lease_flapping", _("lease flapping")
    NODE_HEARTBEATS_EXPIRED = "node_heartbeats_expired", _("node heartbeats expired")
    CLUSTER_UNHEALTHY = "cluster_unhealthy", _("NKS cluster unhealthy")
    NODEGROUP_NOT_READY = "nodegroup_not_ready", _("NKS nodegroup not ready")
    NODEGROUP_MISMATCH = "nodegroup_mismatch", _("NKS and the cluster disagree")
    RESIZE_FAILED = "resize_failed", _("nodegroup resize failed")
    SOURCE_STALE = "source_stale", _("data source stale")
    NKS_POLL_STUCK = "nks_poll_stuck", _("NKS poll stuck")
    LEADER_GROUP_UNSTAFFED = "leader_group_unstaffed", _("leader group unstaffed")
    LEADER_GROUP_DEGRADED = "leader_group_degraded", _("leader group degraded")
    FENCING_TOKEN_REUSED = "fencing_token_reused", _("fencing token reused")


class Severity(models.TextChoices):
    CRITICAL = "critical", _("critical")
    WARNING = "warning", _("warning")


SEVERITY_RANK = {Severity.WARNING: 1, Severity.CRITICAL: 2}


def severity_rank(severity: str) -> int:
    # TextChoices members are str: a plain "critical" finds Severity.CRITICAL.
    return SEVERITY_RANK.get(severity, 0)  # type: ignore[call-overload]


def split_addresses(text: str) -> list[str]:
    """Addresses from a comma-, semicolon- or newline-separated list, in order, once each."""
    seen: set[str] = set()
    addresses = []
    for part in text.replace(";", ",").replace("\n", ",").split(","):
        address = part.strip()
        if address and address.lower() not in seen:
            seen.add(address.lower())
            addresses.append(address)
    return addresses


def validate_address_list(text: str) -> None:
    for address in split_addresses(text):
        try:
            validate_email(address)
        except ValidationError:
            raise ValidationError(
                _("%(address)s is not an e-mail address."),
                code="invalid",
                params={"address": repr(address)},
            ) from None


class AlertRule(models.Model):
    """Per-rule settings an administrator may change; empty fields use the defaults.

    One row per rule, created after migrate. What grace, threshold and window mean for each
    rule is in `alerts.rules.RULE_SPECS` (and shown in admin next to the field).
    """

    rule = models.CharField(max_length=40, choices=Rule.choices, unique=True)
    enabled = models.BooleanField(default=True)
    severity = models.CharField(
        max_length=10,
        choices=Severity.choices,
        blank=True,
        help_text=_("Empty: the rule's default."),
    )
    grace_seconds = models.PositiveIntegerField(
        null=True, blank=True, help_text=_("Empty: the default from the settings.")
    )
    threshold = models.PositiveIntegerField(
        null=True, blank=True, help_text=_("Empty: the default from the settings.")
    )
    window_seconds = models.PositiveIntegerField(
        null=True, blank=True, help_text=_("Empty: the default from the settings.")
    )
    recipients = models.TextField(
        blank=True,
        validators=[validate_address_list],
        help_text=_("Extra addresses for this rule's mail, comma- or newline-separated."),
    )
    mail_default_recipients = models.BooleanField(
        default=True,
        help_text=_("Also mail ALERT_EMAIL_TO. Users subscribed on their profile always get mail."),
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["rule"]

    def __str__(self) -> str:
        return self.get_rule_display()


class IncidentState(models.TextChoices):
    # Seen, but not yet for as long as the rule's grace: not shown, not mailed (Prometheus'
    # "pending"). A pending incident whose condition clears is deleted, not resolved.
    PENDING = "pending", _("pending")
    FIRING = "firing", _("open")
    RESOLVED = "resolved", _("resolved")


class Notice(models.TextChoices):
    """Whether an incident's opening (or resolution) is, was or will not be mailed."""

    NONE = "none", _("not applicable yet")
    WAITING = "waiting", _("waiting to be mailed")
    MAILED = "mailed", _("mailed")
    SKIPPED = "skipped", _("not mailed")


class Hold(models.TextChoices):
    """Why mail about an open incident is held back right now."""

    NONE = "", _("not held")
    SILENCED = "silenced", _("silenced")
    INHIBITED = "inhibited", _("inhibited: the cluster's API is down")


def render_message(message: object) -> str | None:
    """A message stored beside its English text, in the active language.

    `message` is ``{"id": msgid, "args": {name: text}}``, optionally with ``"plural"`` and
    ``"count"`` (an ngettext pair), ``"durations"`` ({name: seconds}, written in the
    reader's language) and ``"lists"`` ({name: [message, ...]}, joined by commas). None when
    there is none, it is malformed, or the translation's placeholders do not fit its values:
    the caller then shows the English as written.
    """
    if not isinstance(message, dict):
        return None
    message_id, args = message.get("id"), message.get("args") or {}
    durations = message.get("durations") or {}
    if not message_id or not isinstance(message_id, str):
        return None
    if not isinstance(args, dict) or not isinstance(durations, dict):
        return None
    try:
        values = {str(name): str(value) for name, value in args.items()}
        for name, seconds in durations.items():
            values[str(name)] = format_duration(float(seconds))
        for name, parts in (message.get("lists") or {}).items():
            texts = [render_message(part) for part in parts]
            if any(text is None for text in texts):
                return None
            # Translators: joins the items of a list inside a sentence, e.g. problems.
            values[str(name)] = gettext(", ").join(texts)  # type: ignore[arg-type]
        plural = message.get("plural")
        if plural and isinstance(plural, str):
            template = ngettext(message_id, plural, int(message.get("count", 0)))
        else:
            template = gettext(message_id)
        return template % values
    except (KeyError, TypeError, ValueError):
        return None


def render_label(label: object) -> str:
    """A stored label (an English message id without placeholders: a fact's, a list's) in
    the active language; a label no catalog knows reads as written."""
    text = render_message({"id": label}) if isinstance(label, str) and label else None
    return text if text is not None else str(label or "")


class IncidentQuerySet(models.QuerySet["Incident"]):
    def unresolved(self) -> IncidentQuerySet:
        return self.filter(resolved_at__isnull=True)

    def open(self) -> IncidentQuerySet:
        return self.filter(state=IncidentState.FIRING)

    def resolved(self) -> IncidentQuerySet:
        return self.filter(state=IncidentState.RESOLVED)


class Incident(models.Model):
    rule = models.CharField(max_length=40, choices=Rule.choices)
    # `<rule>:<what>`, e.g. lease_expired:prod/kube-system/kube-scheduler. Built from names
    # a cluster chose (untrusted text): shown escaped, never put in a mail header.
    key = models.CharField(max_length=700)
    state = models.CharField(
        max_length=10, choices=IncidentState.choices, default=IncidentState.PENDING
    )
    severity = models.CharField(max_length=10, choices=Severity.choices)
    # Grouping: incidents of one cluster opened close together share an e-mail.
    cluster = models.CharField(max_length=253, blank=True)
    title = models.CharField(max_length=500)
    # {"facts": [[label, value], ...], "items_label": str, "items": [str], "items_total": int}
    # plus rule-specific flags (e.g. "api_down").
    details = models.JSONField(default=dict, blank=True)
    link = models.CharField(max_length=2000, blank=True, help_text=_("Dashboard path to look at."))
    since = models.DateTimeField(help_text=_("When the condition started, as far as is known."))
    opened_at = models.DateTimeField(null=True, blank=True)
    last_seen_at = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolution = models.CharField(max_length=500, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    open_notice = models.CharField(max_length=10, choices=Notice.choices, default=Notice.WAITING)
    resolve_notice = models.CharField(max_length=10, choices=Notice.choices, default=Notice.NONE)
    hold = models.CharField(max_length=10, choices=Hold.choices, blank=True, default=Hold.NONE)
    last_mailed_at = models.DateTimeField(null=True, blank=True)

    objects = IncidentQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["key"],
                condition=models.Q(resolved_at__isnull=True),
                name="incident_one_unresolved_per_key",
            )
        ]
        indexes = [
            models.Index(fields=["state", "opened_at"], name="incident_state_opened"),
            models.Index(fields=["resolved_at"], name="incident_resolved_at"),
            models.Index(fields=["key"], name="incident_key"),
            models.Index(fields=["rule", "state"], name="incident_rule_state"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.key}"

    def get_absolute_url(self) -> str:
        return reverse("alerts:incident", args=[self.pk])

    @property
    def full_title(self) -> str:
        return f"{self.cluster}: {self.title}" if self.cluster else self.title

    # Rules write English (the API, logs and old rows keep it) and, beside it in `details`,
    # the same as message ids with their values; these read it in the active language.

    @property
    def display_title(self) -> str:
        text = render_message((self.details or {}).get("title_message"))
        return self.title if text is None else text

    @property
    def display_full_title(self) -> str:
        title = self.display_title
        return f"{self.cluster}: {title}" if self.cluster else title

    @property
    def full_title_message(self) -> dict[str, Any] | str:
        """The full title as a stored message (see `render_message`), for a timeline entry's
        value; the English as written when the title has no message."""
        title = (self.details or {}).get("title_message")
        if not isinstance(title, dict):
            return self.full_title
        if not self.cluster:
            return title
        # An id that is only placeholders needs no catalog entry: it reads the same everywhere.
        return {
            "id": "%(cluster)s: %(title)s",
            "args": {"cluster": self.cluster},
            "lists": {"title": [title]},
        }

    @property
    def display_resolution(self) -> str:
        text = render_message((self.details or {}).get("resolution_message"))
        return self.resolution if text is None else text

    @property
    def display_items_label(self) -> str:
        details = self.details or {}
        return render_label(details.get("items_label", ""))

    def display_items(self, limit: int | None = None) -> list[str]:
        """The listed items (names as written; sentences in the active language)."""
        details = self.details or {}
        items = [str(item) for item in details.get("items", [])][:limit]
        messages = details.get("items_messages")
        if not isinstance(messages, list):
            return items
        return [
            text if (text := render_message(message)) is not None else item
            for item, message in zip(items, messages, strict=False)
        ] + items[len(messages) :]

    def display_facts(self) -> list[dict[str, str]]:
        """The facts with label and text in the active language: {label, text[, at][, token]}
        (``at``: an ISO moment the reader formats; then ``text`` is empty)."""
        facts = []
        for item in (self.details or {}).get("facts", []):
            if not isinstance(item, dict):
                continue
            text = render_message(item.get("text_message"))
            fact = {
                "label": render_label(item.get("label", "")),
                "text": str(item.get("text", "")) if text is None else text,
            }
            if item.get("at"):
                fact["at"] = str(item["at"])
            if item.get("token"):
                fact["token"] = str(item["token"])
            facts.append(fact)
        return facts

    @property
    def is_open(self) -> bool:
        return self.state == IncidentState.FIRING

    def duration(self, now: datetime | None = None) -> timedelta:
        """How long the condition lasted (or has lasted so far)."""
        end = self.resolved_at or now or timezone.now()
        return max(end - self.since, timedelta(0))


class IncidentEvent(models.Model):
    """The incident's timeline: what changed, when, and who did it (Healthchecks' flips)."""

    class Kind(models.TextChoices):
        OPENED = "opened", _("opened")
        UPDATED = "updated", _("updated")
        RESOLVED = "resolved", _("resolved")
        ACKNOWLEDGED = "acknowledged", _("acknowledged")
        UNACKNOWLEDGED = "unacknowledged", _("acknowledgement withdrawn")
        SILENCED = "silenced", _("silenced")
        UNSILENCED = "unsilenced", _("silence ended")
        HELD = "held", _("mail held back")
        MAIL = "mail", _("mail")

    incident = models.ForeignKey(Incident, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField()
    kind = models.CharField(max_length=20, choices=Kind.choices)
    # As written, in English (logs, the API, rows from before translations).
    text = models.CharField(max_length=1000, blank=True)
    # The same as a message id with its values, so each reader sees it in their language
    # (`display_text`): "mail held back: silenced by %(who)s until %(until)s".
    message = models.CharField(max_length=300, blank=True)
    message_args = models.JSONField(default=dict, blank=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["incident", "at"], name="incident_event_time")]

    def __str__(self) -> str:
        return f"{self.incident_id} {self.kind} at {self.at:%Y-%m-%d %H:%M:%S}"

    @property
    def display_text(self) -> str:
        """The entry in the active language; as written when it has no message id, or when
        a translation's placeholders do not fit its values."""
        if not self.message or not isinstance(self.message_args, dict):
            return self.text
        values = {}
        for name, value in self.message_args.items():
            # A value may be a message itself (a title, a note, a duration).
            text = render_message(value) if isinstance(value, dict) else str(value)
            if text is None:
                return self.text
            values[name] = text
        try:
            return gettext(self.message) % values
        except (KeyError, TypeError, ValueError):
            return self.text


class SilenceQuerySet(models.QuerySet["Silence"]):
    def active(self, now: datetime) -> SilenceQuerySet:
        return self.filter(starts_at__lte=now, ends_at__gt=now)


class Silence(models.Model):
    """No mail for a dedup key until `ends_at`, including incidents opened meanwhile."""

    key = models.CharField(max_length=700)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    reason = models.CharField(max_length=500, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(default=timezone.now)
    ended_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text=_("Who ended it early, if anyone."),
    )

    objects = SilenceQuerySet.as_manager()

    class Meta:
        ordering = ["-ends_at"]
        indexes = [models.Index(fields=["key", "ends_at"], name="silence_key_end")]

    def __str__(self) -> str:
        return f"{self.key} until {self.ends_at:%Y-%m-%d %H:%M}"


class AlertSubscription(models.Model):
    """A user's own choice to get alert mail at their account's address.

    Mail goes only to an address its reader proved to read: `confirmed_email` is the address
    whose confirmation link was followed, and it counts while it is the account's address.
    A changed address (on the subscription page, in admin, from the identity provider) is
    pending until its own link is followed.
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="alert_subscription"
    )
    enabled = models.BooleanField(default=True)
    min_severity = models.CharField(
        max_length=10,
        choices=Severity.choices,
        default=Severity.WARNING,
        help_text=_("Mail for incidents of this severity and worse."),
    )
    confirmed_email = models.EmailField(
        blank=True, help_text=_("The address confirmed by the link mailed to it.")
    )
    # When the last confirmation link was sent: one a minute at most, so the form cannot be
    # used to flood someone else's mailbox.
    confirmation_sent_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.user} ({'on' if self.enabled else 'off'}, {self.min_severity}+)"

    def is_confirmed(self, address: str) -> bool:
        """Whether `address` (the account's) is the one confirmed."""
        return bool(address) and self.confirmed_email == address


class NotificationKind(models.TextChoices):
    OPENED = "opened", _("opened")
    RESOLVED = "resolved", _("resolved")
    REMINDER = "reminder", _("reminder")


class DeliveryState(models.TextChoices):
    PENDING = "pending", _("waiting to be sent")
    SENDING = "sending", _("being sent")
    SENT = "sent", _("sent")
    FAILED = "failed", _("failed (gave up)")
    CANCELLED = "cancelled", _("cancelled (silenced)")


class ChannelKind(models.TextChoices):
    DOORAY = "dooray", _("Dooray! incoming webhook")
    SLACK = "slack", _("Slack incoming webhook")
    WEBHOOK = "webhook", _("generic JSON webhook (HMAC-SHA256 signed)")


class AlertChannel(models.Model):
    """A chat room or HTTP endpoint that gets alerts beside e-mail, through the same outbox.

    The URL of an incoming webhook is itself the credential (whoever has it can post), so it
    is a secret like a password: encrypted at rest, write-only in admin, never shown or
    logged (messages name the channel, never its URL).
    """

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=10, choices=ChannelKind.choices)
    url = EncryptedTextField(help_text=_("The webhook URL. Write-only: it is never shown again."))
    # The generic webhook's HMAC-SHA256 key; unused by Dooray! and Slack.
    signing_secret = EncryptedTextField(blank=True)
    enabled = models.BooleanField(default=True)
    # The channel's rules filter: incidents of these rules (empty: all) at this severity
    # and worse, of these clusters (empty: all).
    rules = models.JSONField(default=list, blank=True)
    min_severity = models.CharField(
        max_length=10, choices=Severity.choices, default=Severity.WARNING
    )
    clusters = models.JSONField(default=list, blank=True)
    language = models.CharField(max_length=10, blank=True, choices=settings.LANGUAGES)
    time_zone = models.CharField(max_length=64, blank=True)
    # Dooray! asks for at most about 10 messages a minute; more than this folds into one.
    max_per_minute = models.PositiveIntegerField(default=10)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"


class Notification(models.Model):
    """One e-mail or one channel message: rendered when planned, sent by a task, retried
    until delivered."""

    kind = models.CharField(max_length=10, choices=NotificationKind.choices)
    incidents = models.ManyToManyField(Incident, related_name="notifications")
    # The cluster whose incidents this mail groups ("" for reminder digests).
    group = models.CharField(max_length=253, blank=True)
    recipients = models.JSONField(default=list)
    subject = models.CharField(max_length=300)
    body_text = models.TextField()
    body_html = models.TextField()
    state = models.CharField(
        max_length=10, choices=DeliveryState.choices, default=DeliveryState.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField()
    next_attempt_at = models.DateTimeField()
    # A claim is a lease: a sender that died mid-send loses it when this passes.
    claimed_until = models.DateTimeField(null=True, blank=True)
    claim_token = models.CharField(max_length=32, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    # Null for e-mail; otherwise the channel this message goes to (recipients stay empty).
    channel = models.ForeignKey(
        AlertChannel,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="notifications",
    )
    # The language and time zone it was rendered in (mail: its recipients'; channel: its own).
    language = models.CharField(max_length=10, blank=True)
    time_zone = models.CharField(max_length=64, blank=True)
    # A channel message's body as posted (rendered when planned, like mail).
    payload = models.JSONField(default=dict, blank=True)
    # Sent inside another message: a rate-limited channel folds a storm into one summary.
    folded_into = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="folded"
    )
    # The endpoint's answer to the last attempt (status line and a bounded body), kept
    # for a permanent failure so an admin sees why.
    last_response = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["state", "next_attempt_at"], name="notification_due"),
            models.Index(fields=["group", "kind", "created_at"], name="notification_group"),
            # A channel's rate: its messages sent in the last minute.
            models.Index(fields=["channel", "sent_at"], name="notification_channel_sent"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.kind} {self.state}"


class EvaluatorStatus(models.Model):
    """When rules were last evaluated: a silent evaluator must show on the alerts page."""

    last_started_at = models.DateTimeField(null=True, blank=True)
    last_finished_at = models.DateTimeField(null=True, blank=True)
    last_duration_seconds = models.FloatField(default=0.0)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "evaluator status"

    def __str__(self) -> str:
        return f"evaluated at {self.last_finished_at}"
