"""NKS accounts, the last observed state of their clusters and nodegroups, history, and resizes.

NKS owns the truth; these rows are what the poller last saw (kept, marked stale, when a poll
fails), a health sample per poll, NKS's own operation history, and what only the dashboard
knows: which engineer asked for which resize, and what became of it.

Fields other apps read (alerts, the overview):

* ``NksAccount.last_success_at`` / ``is_stale(now)`` / ``last_error``: is polling working?
* ``NksCluster.health`` (verdict at the last poll) and ``effective_health(now)`` (the same, but
  ``unknown`` when the dashboard's own data is stale): use the latter to alert.
* ``NksNodegroup.ready`` / ``not_ready`` / ``node_status``: per-nodegroup node readiness.
* ``ResizeRequest.state`` (``ResizeState``), ``is_in_flight``, ``finished_at``, ``error``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from dashboard.encryption import EncryptedTextField
from dashboard.service_urls import ServiceURLField
from nks.enums import EventState, Freshness, OperationPhase


def stale_after() -> timedelta:
    """How old polled data may be before it is shown as stale: three missed polls, >= 90 s."""
    return timedelta(seconds=max(90, 3 * settings.NKS_POLL_SECONDS))


# Freshness (NKS's health_status) and EventState are NKS's own values, classified by the
# client: defined once in nks.enums, which knows no Django, and stored here by their choices.


class Health(models.TextChoices):
    """The dashboard's verdict on a cluster or nodegroup, from NKS's health report.

    ``UNKNOWN`` whenever the report cannot be trusted (health data STALE/ROTTEN, an unknown
    ``health_status`` such as the guide's "HEALTHY", unreadable fields): silence is never health.
    """

    DOWN = "down", _("down")
    DEGRADED = "degraded", _("degraded")
    UNKNOWN = "unknown", _("unknown")
    HEALTHY = "healthy", _("healthy")


# Worst first: the order of the clusters page.
HEALTH_RANK = {Health.DOWN: 0, Health.DEGRADED: 1, Health.UNKNOWN: 2, Health.HEALTHY: 3}


def nks_url_problem(url: str) -> str | None:
    """Why the dashboard must not send an account's credentials to ``url``, or None.

    Never quotes the URL: user info in it is exactly what must not reach a page or a mail.
    """
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError:
        return gettext("The URL is not a valid URL.")
    if "@" in parts.netloc:
        # It would show in every error naming the host, and from there in incidents and mail.
        return gettext(
            "The URL must not contain a user name or password; give the credentials in their "
            "own fields."
        )
    if settings.PRODUCTION and parts.scheme != "https":
        return gettext(
            "The URL must start with https:// in production (the password and "
            "tokens would travel in clear)."
        )
    return None


class NksAccount(models.Model):
    """One NKS region and project, with the credentials the poller uses.

    Either identity credentials (identity URL, tenant, user, password: tokens are issued and
    renewed) or a fixed token. ``password`` and ``token`` are secrets: never rendered, logged
    or put in error messages.
    """

    name = models.SlugField(max_length=63, unique=True)
    enabled = models.BooleanField(default=True)
    api_url = ServiceURLField(
        _("API URL"), max_length=300, help_text=_("The region's NKS API base URL.")
    )
    identity_url = ServiceURLField(
        _("identity URL"),
        max_length=300,
        blank=True,
        help_text=_("Identity service base URL (tokens from POST {identity_url}/v2.0/tokens)."),
    )
    tenant_id = models.CharField(_("tenant ID"), max_length=64, blank=True)
    username = models.CharField(max_length=254, blank=True)
    # Secrets: encrypted at rest (dashboard.encryption).
    password = EncryptedTextField(blank=True)
    token = EncryptedTextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    # Poll status, written by the poller.
    next_poll_at = models.DateTimeField(null=True, blank=True)
    last_poll_at = models.DateTimeField(
        null=True, blank=True, help_text=_("Last poll, any result.")
    )
    last_success_at = models.DateTimeField(
        null=True, blank=True, help_text=_("Last poll that listed the clusters.")
    )
    # Set while a poll of the account runs (under its lock), cleared when it ends however it
    # ends: a moment long past means the poll is stuck or its worker died mid-poll.
    poll_started_at = models.DateTimeField(
        null=True, blank=True, help_text=_("When the running poll started; empty between polls.")
    )
    last_poll_seconds = models.FloatField(null=True, blank=True)
    last_poll_calls = models.IntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_kind = models.CharField(max_length=20, blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    consecutive_failures = models.IntegerField(default=0)
    polls_total = models.BigIntegerField(default=0)
    poll_failures_total = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["name"]
        verbose_name = _("NKS account")

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        problems = {
            field: problem
            for field in ("api_url", "identity_url")
            if getattr(self, field) and (problem := nks_url_problem(getattr(self, field)))
        }
        if problems:
            raise ValidationError(problems)
        identity = [self.identity_url, self.tenant_id, self.username, self.password]
        if self.token and any(identity):
            raise ValidationError("Give either a token or identity credentials, not both.")
        if not self.token and not all(identity):
            raise ValidationError(
                "Give either a token, or all of identity URL, tenant ID, username and password."
            )

    def is_stale(self, now: datetime | None = None) -> bool:
        """No successful poll lately: every cluster of the account shows old data."""
        if not self.enabled:
            return False
        if self.last_success_at is None:
            return True
        return (now or timezone.now()) - self.last_success_at > stale_after()

    def credentials_fingerprint(self) -> tuple[Any, ...]:
        return (
            self.api_url,
            self.identity_url,
            self.tenant_id,
            self.username,
            self.password,
            self.token,
        )


class NksClusterQuerySet(models.QuerySet["NksCluster"]):
    def live(self) -> NksClusterQuerySet:
        return self.filter(gone_at__isnull=True)


class NksCluster(models.Model):
    """A cluster as last polled. Kept, with ``gone_at`` set, when NKS stops listing it.

    Raw NKS strings (``status``, ``health_status``, ``api_status``, ``node_status``) are kept as
    sent; ``freshness`` and ``health`` are the classified readings. ``refreshed_at`` is the
    last poll that fetched everything about the cluster without an error; ``last_error`` the
    failure of the latest poll (cleared by a clean one).
    """

    account = models.ForeignKey(NksAccount, on_delete=models.CASCADE, related_name="clusters")
    uuid = models.CharField(max_length=64, unique=True)
    name = models.CharField(max_length=255)
    status = models.CharField(max_length=64, blank=True)
    status_reason = models.TextField(blank=True)

    health_status = models.CharField(
        max_length=64, blank=True, help_text=_("As NKS sent it: FRESH, STALE, ROTTEN, or anything.")
    )
    freshness = models.CharField(
        max_length=10, choices=Freshness.choices, default=Freshness.UNKNOWN
    )
    health = models.CharField(max_length=10, choices=Health.choices, default=Health.UNKNOWN)
    health_timestamp = models.DateTimeField(
        null=True, blank=True, help_text=_("When NKS last refreshed the health data.")
    )
    api = models.CharField(max_length=32, blank=True, help_text=_("OK / NOT_OK as sent."))
    api_status = models.CharField(max_length=64, blank=True)
    api_ok = models.BooleanField(null=True)
    node_status = models.CharField(max_length=64, blank=True)
    health_problem = models.TextField(
        blank=True, help_text=_("Why the health report was unreadable.")
    )

    node_count = models.IntegerField(null=True, blank=True)
    nodes_ready = models.IntegerField(null=True, blank=True)
    nodes_not_ready = models.IntegerField(null=True, blank=True)
    # Per-node readiness from "<node>.Ready" keys, when NKS sends them: {node name: bool|None}.
    node_readiness = models.JSONField(default=dict, blank=True)

    kube_version = models.CharField(max_length=64, blank=True)
    kube_version_status = models.CharField(max_length=64, blank=True)
    platform_version = models.CharField(max_length=64, blank=True)
    availability_zone = models.CharField(max_length=64, blank=True)
    api_address = models.CharField(max_length=300, blank=True)
    node_addresses = models.JSONField(default=list, blank=True)
    nks_created_at = models.DateTimeField(null=True, blank=True)
    nks_updated_at = models.DateTimeField(null=True, blank=True)

    first_seen_at = models.DateTimeField(default=timezone.now)
    polled_at = models.DateTimeField(
        null=True, blank=True, help_text=_("Last poll that listed it.")
    )
    refreshed_at = models.DateTimeField(null=True, blank=True)
    gone_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_kind = models.CharField(max_length=20, blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)

    # Set by "Watch this cluster's Leases"; a Lease source with the same name also matches.
    kube_cluster = models.ForeignKey(
        "leases.KubeCluster",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="nks_clusters",
    )

    objects = NksClusterQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        verbose_name = _("NKS cluster")
        indexes = [models.Index(fields=["account", "gone_at"], name="nkscluster_account_gone")]

    def __str__(self) -> str:
        return self.name

    @property
    def phase(self) -> OperationPhase:
        """The operation running on it, read from ``status`` as the client reads it."""
        return OperationPhase.classify(self.status)

    @property
    def in_progress(self) -> bool:
        return self.phase is OperationPhase.IN_PROGRESS

    def is_stale(self, now: datetime | None = None) -> bool:
        """The dashboard's data about the cluster may be old (NKS's own freshness aside)."""
        if self.gone_at is not None or self.last_error or self.refreshed_at is None:
            return True
        return (now or timezone.now()) - self.refreshed_at > stale_after()

    def effective_health(self, now: datetime | None = None) -> Health:
        """``health``, except unknown when the dashboard's data is stale or the cluster gone."""
        if self.gone_at is not None:
            return Health.UNKNOWN
        if self.polled_at is None or (now or timezone.now()) - self.polled_at > stale_after():
            return Health.UNKNOWN
        return Health(self.health)


class NksNodegroup(models.Model):
    """A nodegroup as last polled. Kept, with ``gone_at`` set, when NKS stops listing it.

    ``ready``/``not_ready`` come from the cluster's health report (``nodegroup-stats``, or the
    per-node keys mapped to the nodegroup by name); None when NKS did not say. NKS names no
    node of a nodegroup: the nodes are the watched cluster's Node objects (``nks.node_picture``).
    """

    cluster = models.ForeignKey(NksCluster, on_delete=models.CASCADE, related_name="nodegroups")
    uuid = models.CharField(max_length=64)
    name = models.CharField(max_length=255)
    role = models.CharField(max_length=32, blank=True)
    is_default = models.BooleanField(default=False)
    status = models.CharField(max_length=64, blank=True)
    status_reason = models.TextField(blank=True)
    node_count = models.IntegerField(null=True, blank=True)
    min_node_count = models.IntegerField(null=True, blank=True)
    max_node_count = models.IntegerField(null=True, blank=True)
    autoscaler_enabled = models.BooleanField(null=True)
    autoscaler_min = models.IntegerField(null=True, blank=True)
    autoscaler_max = models.IntegerField(null=True, blank=True)
    ready = models.IntegerField(null=True, blank=True)
    not_ready = models.IntegerField(null=True, blank=True)
    node_status = models.CharField(max_length=64, blank=True)
    kube_version = models.CharField(max_length=64, blank=True)
    flavor_id = models.CharField(max_length=64, blank=True)
    image_id = models.CharField(max_length=64, blank=True)
    node_addresses = models.JSONField(default=list, blank=True)
    nks_created_at = models.DateTimeField(null=True, blank=True)
    nks_updated_at = models.DateTimeField(null=True, blank=True)
    first_seen_at = models.DateTimeField(default=timezone.now)
    polled_at = models.DateTimeField(null=True, blank=True)
    detail_fetched_at = models.DateTimeField(null=True, blank=True)
    gone_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["cluster_id", "name"]
        verbose_name = _("NKS nodegroup")
        constraints = [
            models.UniqueConstraint(fields=["cluster", "uuid"], name="nodegroup_unique_per_cluster")
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id}:{self.name}"

    @property
    def phase(self) -> OperationPhase:
        """The operation running on it, read from ``status`` as the client reads it."""
        return OperationPhase.classify(self.status)

    @property
    def in_progress(self) -> bool:
        return self.phase is OperationPhase.IN_PROGRESS

    @property
    def is_worker(self) -> bool:
        return self.role.lower() == "worker"


class HealthSample(models.Model):
    """A cluster's health as one poll saw it: the history behind the 24 h strip.

    ``nodegroups`` maps a nodegroup name to {"ready", "not_ready", "node_status"}.
    """

    cluster = models.ForeignKey(NksCluster, on_delete=models.CASCADE, related_name="samples")
    taken_at = models.DateTimeField()
    health = models.CharField(max_length=10, choices=Health.choices)
    health_status = models.CharField(max_length=64, blank=True)
    freshness = models.CharField(max_length=10, choices=Freshness.choices)
    health_timestamp = models.DateTimeField(null=True, blank=True)
    api_status = models.CharField(max_length=64, blank=True)
    node_status = models.CharField(max_length=64, blank=True)
    status = models.CharField(max_length=64, blank=True)
    nodes_ready = models.IntegerField(null=True, blank=True)
    nodes_not_ready = models.IntegerField(null=True, blank=True)
    nodegroups = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["taken_at", "id"]
        indexes = [
            models.Index(fields=["cluster", "taken_at"], name="sample_cluster_time"),
            models.Index(fields=["taken_at"], name="sample_time"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id} {self.health} at {self.taken_at:%Y-%m-%d %H:%M:%S}"


class NksEvent(models.Model):
    """One entry of a cluster's operation history (``/events``), upserted by its uuid."""

    cluster = models.ForeignKey(NksCluster, on_delete=models.CASCADE, related_name="events")
    uuid = models.CharField(max_length=64, unique=True)
    nodegroup = models.ForeignKey(
        NksNodegroup, on_delete=models.SET_NULL, null=True, blank=True, related_name="events"
    )
    resource_uuid = models.CharField(max_length=64, blank=True)
    resource_name = models.CharField(max_length=255, blank=True)
    resource_type = models.CharField(max_length=32, blank=True)
    type = models.CharField(max_length=64, blank=True)
    raw_state = models.CharField(max_length=32, blank=True)
    state = models.CharField(max_length=12, choices=EventState.choices)
    contents = models.TextField(blank=True)
    nks_created_at = models.DateTimeField(null=True, blank=True)
    nks_updated_at = models.DateTimeField(null=True, blank=True)
    first_seen_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-nks_created_at", "-id"]
        verbose_name = _("NKS event")
        indexes = [
            models.Index(fields=["cluster", "nks_created_at"], name="event_cluster_time"),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.state} ({self.resource_name})"

    @property
    def finished(self) -> bool:
        return self.state in (EventState.SUCCESS, EventState.FAIL)

    @property
    def duration(self) -> timedelta | None:
        if not self.finished or self.nks_created_at is None or self.nks_updated_at is None:
            return None
        return self.nks_updated_at - self.nks_created_at


class ResizeState(models.TextChoices):
    PENDING = "pending", _("queued")
    SUBMITTING = "submitting", _("sending to NKS")
    SUBMITTED = "submitted", _("accepted by NKS")
    IN_PROGRESS = "in_progress", _("in progress")
    UNCERTAIN = "uncertain", _("outcome unknown")
    SUCCEEDED = "succeeded", _("succeeded")
    FAILED = "failed", _("failed")


# A nodegroup has at most one request in these states (a database constraint).
IN_FLIGHT_STATES = (
    ResizeState.PENDING,
    ResizeState.SUBMITTING,
    ResizeState.SUBMITTED,
    ResizeState.IN_PROGRESS,
    ResizeState.UNCERTAIN,
)


class ResizeRequest(models.Model):
    """An engineer's (or a script's) resize of a nodegroup, and what became of it.

    States: ``pending`` (queued) -> ``submitting`` (the task claimed it and calls NKS, once)
    -> ``submitted`` (NKS answered 2xx) -> ``in_progress`` (the nodegroup is
    UPDATE_IN_PROGRESS or the matching event is IN_PROGRESS) -> ``succeeded`` / ``failed``.
    ``uncertain``: the call failed in a way that may still have reached NKS (a timeout, a
    5xx, a dropped connection); it is followed like a submitted one and becomes ``failed``
    only when NKS shows no sign of it. ``nks_called_at`` is set exactly when the one POST was
    sent; ``error`` holds NKS's reason for a failure.
    """

    class Source(models.TextChoices):
        FORM = "form", _("form")
        API = "api", "API"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        related_name="nks_resize_requests",
    )
    username = models.CharField(max_length=150, help_text=_("Kept when the user is deleted."))
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.FORM)
    cluster = models.ForeignKey(NksCluster, on_delete=models.PROTECT, related_name="resizes")
    nodegroup = models.ForeignKey(NksNodegroup, on_delete=models.PROTECT, related_name="resizes")
    nodegroup_name = models.CharField(max_length=255)
    from_count = models.IntegerField()
    to_count = models.IntegerField()
    nodes_to_remove = models.JSONField(default=list, blank=True)
    reason = models.TextField()
    state = models.CharField(
        max_length=12, choices=ResizeState.choices, default=ResizeState.PENDING
    )
    created_at = models.DateTimeField(default=timezone.now)
    nks_called_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    follow_until = models.DateTimeField(null=True, blank=True)
    last_checked_at = models.DateTimeField(null=True, blank=True)
    check_error = models.TextField(blank=True, help_text=_("Last failure to read progress back."))
    event = models.ForeignKey(
        NksEvent, on_delete=models.SET_NULL, null=True, blank=True, related_name="resizes"
    )
    error = models.TextField(blank=True)
    error_kind = models.CharField(max_length=20, blank=True)
    error_status = models.IntegerField(null=True, blank=True)
    # An admin gave up following it (nks.resize_progress.give_up_resize). Once NKS may have
    # been called it stays in flight, and keeps the one-resize guard, until NKS shows the
    # nodegroup no longer updating.
    given_up_by = models.CharField(max_length=150, blank=True)
    given_up_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["nodegroup"],
                condition=Q(state__in=IN_FLIGHT_STATES),
                name="one_resize_in_flight_per_nodegroup",
            ),
            models.CheckConstraint(
                condition=Q(from_count__gte=0) & Q(to_count__gte=1), name="resize_counts_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["state"], name="resize_state"),
            models.Index(fields=["cluster", "created_at"], name="resize_cluster_time"),
        ]

    def __str__(self) -> str:
        return f"resize #{self.pk} {self.nodegroup_name} {self.from_count}->{self.to_count}"

    @property
    def is_in_flight(self) -> bool:
        return self.state in IN_FLIGHT_STATES

    @property
    def scales_in(self) -> bool:
        return self.to_count < self.from_count
