"""Kubernetes clusters watched for Leases, the last observed state of each Lease, and history.

The API server owns the truth; these rows are what the watcher last saw, plus what only the
dashboard knows: when each holder change was observed and which changes it missed.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import models
from django.utils import timezone

from dashboard.encryption import EncryptedTextField

# A watcher that has not flushed for this long is stale: its data must not pass as current.
WATCHER_STALE_AFTER = timedelta(seconds=30)


class KubeCluster(models.Model):
    class Source(models.TextChoices):
        KUBECONFIG = "kubeconfig", "kubeconfig"
        IN_CLUSTER = "in_cluster", "in-cluster service account"

    name = models.SlugField(max_length=63, unique=True)
    enabled = models.BooleanField(default=True)
    source = models.CharField(max_length=20, choices=Source.choices, default=Source.KUBECONFIG)
    # A secret: it may hold tokens or client keys. Encrypted at rest; never rendered, logged
    # or put in errors.
    kubeconfig = EncryptedTextField(blank=True)
    # Something about the configuration an engineer should know, though it works (TLS
    # verification turned off); shown on the watchers page.
    config_warning = models.TextField(blank=True)
    context = models.CharField(max_length=253, blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    # Watcher status, written by whichever worker holds the cluster's lock.
    watcher_id = models.CharField(max_length=200, blank=True)
    connected = models.BooleanField(default=False)
    connected_since = models.DateTimeField(null=True, blank=True)
    last_event_at = models.DateTimeField(null=True, blank=True)
    last_flush_at = models.DateTimeField(null=True, blank=True)
    last_list_at = models.DateTimeField(null=True, blank=True)
    resource_version = models.CharField(max_length=64, blank=True)
    events_per_second = models.FloatField(default=0.0)
    events_total = models.BigIntegerField(default=0)
    reconnects_total = models.BigIntegerField(default=0)
    relists_total = models.BigIntegerField(default=0)
    lag_seconds = models.FloatField(
        default=0.0, help_text="Worst event-to-commit delay, last flush."
    )
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    skipped_objects_total = models.BigIntegerField(
        default=0,
        help_text="Objects from the API server skipped or cleaned because they could not be "
        "stored as sent (a NUL character, say).",
    )
    candidates_api = models.CharField(max_length=40, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def is_stale(self, now: datetime | None = None) -> bool:
        """No live watcher is writing: the cluster's lease data may be old."""
        if not self.enabled:
            return False
        if not self.connected or self.last_flush_at is None:
            return True
        return (now or timezone.now()) - self.last_flush_at > WATCHER_STALE_AFTER


class LeaseClass(models.TextChoices):
    NODE_HEARTBEAT = "node_heartbeat", "node heartbeat"
    CONTROL_PLANE = "control_plane", "control plane"
    APISERVER_IDENTITY = "apiserver_identity", "API server identity"
    LEADER_ELECTION = "leader_election", "leader election"


class LeaseState(models.TextChoices):
    HELD = "held", "held"
    EXPIRED = "expired", "expired"
    RELEASED = "released", "released"


def lease_state(holder: str, expires_at: datetime | None, now: datetime) -> LeaseState:
    """Expiry is a matter of the clock: the same rule for rows, dicts and queries."""
    if not holder:
        return LeaseState.RELEASED
    if expires_at is not None and expires_at <= now:
        return LeaseState.EXPIRED
    return LeaseState.HELD


class LeaseQuerySet(models.QuerySet["Lease"]):
    def live(self) -> LeaseQuerySet:
        return self.filter(deleted_at__isnull=True)

    def in_state(self, state: str, now: datetime) -> LeaseQuerySet:
        """Leases in a state at `now`: expiry is a matter of the clock, not of an event."""
        if state == LeaseState.RELEASED:
            return self.filter(holder="")
        held = self.exclude(holder="")
        if state == LeaseState.EXPIRED:
            return held.filter(expires_at__lte=now)
        if state == LeaseState.HELD:
            return held.filter(models.Q(expires_at__gt=now) | models.Q(expires_at__isnull=True))
        return self.none()


class Lease(models.Model):
    cluster = models.ForeignKey(KubeCluster, on_delete=models.CASCADE, related_name="leases")
    namespace = models.CharField(max_length=253)
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True)
    lease_class = models.CharField(max_length=24, choices=LeaseClass.choices)
    holder = models.TextField(blank=True)  # whatever a client wrote: untrusted text
    acquire_time = models.DateTimeField(null=True, blank=True)
    renew_time = models.DateTimeField(null=True, blank=True)
    lease_duration_seconds = models.IntegerField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    lease_transitions = models.IntegerField(null=True, blank=True)
    strategy = models.CharField(max_length=100, blank=True)
    preferred_holder = models.TextField(blank=True)
    labels = models.JSONField(default=dict, blank=True)
    resource_version = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(null=True, blank=True)
    observed_at = models.DateTimeField(default=timezone.now)
    deleted_at = models.DateTimeField(null=True, blank=True)
    raw = models.JSONField(default=dict, blank=True)

    objects = LeaseQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "namespace", "name"], name="lease_unique_per_cluster"
            )
        ]
        # No index on renew_time or expires_at on purpose: every renewal changes both, and
        # an index on either would turn each renewal into an index write instead of a
        # cheap in-place (HOT) update. Expiry queries scan one cluster's leases instead.
        indexes = [
            models.Index(fields=["cluster", "lease_class"], name="lease_cluster_class"),
            models.Index(fields=["namespace", "name"], name="lease_namespace_name"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id}:{self.namespace}/{self.name}"

    def state_at(self, now: datetime) -> LeaseState:
        return lease_state(self.holder, self.expires_at, now)


class LeaseTransition(models.Model):
    """A holder change seen by the watcher, or a gap where changes happened unseen."""

    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="transitions")
    from_holder = models.TextField(blank=True)
    to_holder = models.TextField(blank=True)
    observed_at = models.DateTimeField()
    acquire_time = models.DateTimeField(null=True, blank=True)
    lease_transitions = models.IntegerField(null=True, blank=True)
    # Holder changes that happened while nobody watched (leaseTransitions jumped further).
    missed = models.IntegerField(default=0)

    class Meta:
        ordering = ["observed_at", "id"]
        indexes = [
            models.Index(fields=["lease", "observed_at"], name="transition_lease_time"),
            models.Index(fields=["observed_at"], name="transition_time"),
        ]

    def __str__(self) -> str:
        return f"{self.lease_id}: {self.from_holder!r} -> {self.to_holder!r}"


class LeaseCandidate(models.Model):
    cluster = models.ForeignKey(KubeCluster, on_delete=models.CASCADE, related_name="candidates")
    namespace = models.CharField(max_length=253)
    name = models.CharField(max_length=253)
    lease_name = models.CharField(max_length=253)
    binary_version = models.CharField(max_length=64, blank=True)
    emulation_version = models.CharField(max_length=64, blank=True)
    strategy = models.CharField(max_length=100, blank=True)
    ping_time = models.DateTimeField(null=True, blank=True)
    renew_time = models.DateTimeField(null=True, blank=True)
    observed_at = models.DateTimeField(default=timezone.now)
    deleted_at = models.DateTimeField(null=True, blank=True)
    raw = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "namespace", "name"], name="candidate_unique_per_cluster"
            )
        ]
        indexes = [
            models.Index(fields=["cluster", "namespace", "lease_name"], name="candidate_lease"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} for {self.lease_name}"
