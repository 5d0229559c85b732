"""Kubernetes clusters watched for Leases, the last observed state of each Lease, and history.

The API server owns the truth; these rows are what the watcher last saw, plus what only the
dashboard knows: when each holder change was observed and which changes it missed.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from dashboard.encryption import EncryptedTextField
from leases.freshness import is_current


class ResourceWatchState(models.TextChoices):
    """Where the watch of one resource (Nodes) of one cluster stands, in words."""

    NOT_STARTED = "not_started", _("not started")
    WATCHING = "watching", _("watching")
    RECONNECTING = "reconnecting", _("reconnecting")
    FORBIDDEN = "forbidden", _("forbidden (RBAC)")
    NOT_SERVED = "not_served", _("not served")
    ERROR = "error", _("error")


class KubeCluster(models.Model):
    class Source(models.TextChoices):
        KUBECONFIG = "kubeconfig", "kubeconfig"
        IN_CLUSTER = "in_cluster", _("in-cluster service account")

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
    # Set when the kubeconfig came from NKS (the "Watch this cluster" button): the cluster's
    # API address as NKS reported it. Its server must then be that host over https, at an
    # allowed address (leases/egress.py), and until a list completes its errors are shown
    # without the server's words. Blank for an operator's kubeconfig.
    nks_api_address = models.CharField(max_length=300, blank=True)
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
        default=0.0, help_text=_("Worst event-to-commit delay, last flush.")
    )
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    skipped_objects_total = models.BigIntegerField(
        default=0,
        help_text=_(
            "Objects from the API server skipped or cleaned because they could not be "
            "stored as sent (a NUL character, say)."
        ),
    )
    candidates_api = models.CharField(max_length=40, blank=True)
    # Why LeaseCandidates are missing, when they are: "forbidden" (RBAC), "not_served" (an
    # older API server), or "" while they are read fine or not yet asked for.
    candidates_problem = models.CharField(max_length=20, blank=True)

    # The Node watch of this cluster, beside the Lease watch (same lock, same worker).
    nodes_watch = models.CharField(
        max_length=20, choices=ResourceWatchState.choices, default=ResourceWatchState.NOT_STARTED
    )
    nodes_connected_since = models.DateTimeField(null=True, blank=True)
    nodes_last_list_at = models.DateTimeField(null=True, blank=True)
    nodes_last_event_at = models.DateTimeField(null=True, blank=True)
    nodes_resource_version = models.CharField(max_length=64, blank=True)
    nodes_events_total = models.BigIntegerField(default=0)
    nodes_relists_total = models.BigIntegerField(default=0)
    nodes_reconnects_total = models.BigIntegerField(default=0)
    nodes_lag_seconds = models.FloatField(default=0.0)
    nodes_last_error = models.TextField(blank=True)
    nodes_last_error_at = models.DateTimeField(null=True, blank=True)

    # The as-of moment of each resource's data (leases/freshness.py): the latest moment at
    # which the watcher knows its view matched the API server (a completed list, a stream
    # proved current against a probe of the server). Past it, nothing is known: a lease
    # whose expiry falls after it is "unknown", never "expired".
    leases_as_of = models.DateTimeField(null=True, blank=True)
    nodes_as_of = models.DateTimeField(null=True, blank=True)
    # Since when each resource has been observed without a gap (as-of moments no further
    # apart than WATCH_STALE_SECONDS). An expiry before it fell in unobserved time: a live
    # holder could not renew while its API server was frozen, so it is given one lease
    # duration from here before a rule judges it.
    leases_observed_since = models.DateTimeField(null=True, blank=True)
    nodes_observed_since = models.DateTimeField(null=True, blank=True)

    # Objects the API server sent over their size cap (leases/kube/bounded.py): not
    # ingested, so the operator must see that some are missing and which one was last.
    # The name is the server's text, bounded; the size in bytes (at least, for a line that
    # never ended).
    leases_cut_total = models.BigIntegerField(default=0)
    leases_last_cut = models.CharField(max_length=510, blank=True)
    leases_last_cut_bytes = models.BigIntegerField(default=0)
    leases_last_cut_at = models.DateTimeField(null=True, blank=True)
    nodes_cut_total = models.BigIntegerField(default=0)
    nodes_last_cut = models.CharField(max_length=510, blank=True)
    nodes_last_cut_bytes = models.BigIntegerField(default=0)
    nodes_last_cut_at = models.DateTimeField(null=True, blank=True)
    # LeaseCandidates are listed again every few seconds: how many the latest list left out.
    candidates_cut = models.IntegerField(default=0)
    candidates_last_cut = models.CharField(max_length=510, blank=True)
    candidates_last_cut_bytes = models.BigIntegerField(default=0)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def is_stale(self, now: datetime | None = None) -> bool:
        """The cluster's lease data is not known to be current: its as-of moment is older
        than WATCH_STALE_SECONDS (leases.freshness), or no watch is connected."""
        if not self.enabled:
            return False
        if not self.connected:
            return True
        return not is_current(self.leases_as_of, now or timezone.now())

    def nodes_stale(self, now: datetime | None = None) -> bool:
        """The same for the cluster's Node data."""
        if not self.enabled:
            return False
        return not is_current(self.nodes_as_of, now or timezone.now())

    def data_age(self, now: datetime | None = None) -> timedelta | None:
        """How old the lease data is (None: never known)."""
        if self.leases_as_of is None:
            return None
        return max(timedelta(0), (now or timezone.now()) - self.leases_as_of)


class LeaseClass(models.TextChoices):
    NODE_HEARTBEAT = "node_heartbeat", _("node heartbeat")
    CONTROL_PLANE = "control_plane", _("control plane")
    APISERVER_IDENTITY = "apiserver_identity", _("API server identity")
    LEADER_ELECTION = "leader_election", _("leader election")


class LeaseLibrary(models.TextChoices):
    """Which leader-election library wrote a Lease (leases/leader_k8s.py recognises it)."""

    LEADER_K8S = "leader_k8s", "leader-k8s (bluetape4k)"
    COORDINATED = "coordinated", _("coordinated leader election")
    PLAIN = "plain", _("plain (client-go style)")


class LeaseState(models.TextChoices):
    HELD = "held", _("held")
    EXPIRED = "expired", _("expired")
    RELEASED = "released", _("released")
    # Not known: the cluster's data is stale, or the lease's expiry came after the data's
    # as-of moment (a renewal may be on its way). Never judged expired or held on a guess.
    UNKNOWN = "unknown", _("unknown")


def lease_state(
    holder: str, expires_at: datetime | None, now: datetime, as_of: datetime | None
) -> LeaseState:
    """Expiry is a matter of the clock, judged only by what is known: the same rule for rows,
    dicts and queries (leases.queries.state_sql).

    `as_of` is the cluster's lease data as-of moment (KubeCluster.leases_as_of): stale data
    says nothing of now, and a lease is expired only when its expiry is before `as_of`.
    """
    if not is_current(as_of, now):
        return LeaseState.UNKNOWN
    if not holder:
        return LeaseState.RELEASED
    if expires_at is not None and expires_at <= now:
        assert as_of is not None  # is_current
        return LeaseState.EXPIRED if expires_at <= as_of else LeaseState.UNKNOWN
    return LeaseState.HELD


# Held leases that expire within this are "expiring soon" on the overview, and on the
# Leases page whatever their duration.
EXPIRING_SOON = timedelta(seconds=10)
# ... and on the Leases page also those with less than a quarter of their duration left: a
# 40 s node lease after 30 s without renewal, an hour-long API server identity after 45 min.
EXPIRING_SOON_PARTS = 4


def soon_at(holder: str, expires_at: datetime | None, duration: int | None) -> datetime | None:
    """The moment a lease becomes "expiring soon" (leases.queries.expiring_soon), if it stays
    unrenewed: EXPIRING_SOON, or a quarter of its duration if longer, before its expiry.
    None for a lease nobody holds or without an expiry: the clock alone never makes it a
    problem. From this moment on, the lease is expiring soon, then expired."""
    if not holder or expires_at is None:
        return None
    share = (
        timedelta(microseconds=duration * (1_000_000 // EXPIRING_SOON_PARTS)) if duration else None
    )
    try:
        return expires_at - max(EXPIRING_SOON, share or EXPIRING_SOON)
    except OverflowError:
        # An expiry near year 1 that a client wrote: due since the beginning of time.
        return datetime.min.replace(tzinfo=UTC)


class LeaseQuerySet(models.QuerySet["Lease"]):
    def live(self) -> LeaseQuerySet:
        return self.filter(deleted_at__isnull=True)


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
    # metadata.annotations, bounded (leases/leader_k8s.py bounded_annotations): keys and
    # values cut, the rest dropped; `annotations_cut` counts what was cut or dropped.
    annotations = models.JSONField(default=dict, blank=True)
    annotations_cut = models.IntegerField(default=0)
    resource_version = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(null=True, blank=True)
    observed_at = models.DateTimeField(default=timezone.now)
    deleted_at = models.DateTimeField(null=True, blank=True)
    # The object itself is not kept: only the bounded fields above (a hostile API server's
    # megabytes of annotations would otherwise be stored, and shown, whole).

    # Who really leads, as leases/leader_k8s.py reads it when the lease is parsed.
    library = models.CharField(
        max_length=20, choices=LeaseLibrary.choices, default=LeaseLibrary.PLAIN
    )
    # The holder in human terms: leader-k8s's node id (and audit id), otherwise the
    # holderIdentity itself; "" while nobody holds the lease. Untrusted text.
    identity = models.TextField(blank=True)
    # leader-k8s's fencing token (the holderIdentity it wrote), "" for other libraries.
    token = models.CharField(max_length=64, blank=True)
    # A leader-k8s lease whose holderIdentity is not a leader-k8s token: someone else wrote it.
    foreign_writer = models.BooleanField(default=False)
    # A leader-k8s slot lease `<group>-slot-<n>`: its group's name and slot index.
    group_name = models.CharField(max_length=253, blank=True)
    group_slot = models.IntegerField(null=True, blank=True)
    # The name with its digit runs made comparable (dashboard/natural.py): worker-2 sorts
    # before worker-10.
    name_key = models.CharField(max_length=600, blank=True)
    # When a fencing token that had held this lease came back after another holder.
    fencing_reused_at = models.DateTimeField(null=True, blank=True)

    objects = LeaseQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "namespace", "name"], name="lease_unique_per_cluster"
            )
        ]
        # No index on renew_time or expires_at on purpose: every renewal changes both, and
        # an index on either would turn each renewal into an index write instead of a
        # cheap in-place (HOT) update. Expiry queries scan one cluster's leases instead, or
        # read the narrow LeaseDeadline beside it, whose index renewals may move.
        indexes = [
            models.Index(fields=["cluster", "lease_class"], name="lease_cluster_class"),
            # The overview's counts (leases.overview_queries._counts_from_schedule): live
            # leases per group as an index-only count, and the released ones alone. No
            # column a renewal writes is in them: renewals stay in-place (HOT) updates.
            models.Index(
                fields=["cluster", "lease_class"],
                name="lease_live_class",
                condition=models.Q(deleted_at__isnull=True),
            ),
            models.Index(
                fields=["cluster", "lease_class"],
                name="lease_released",
                condition=models.Q(deleted_at__isnull=True, holder=""),
            ),
            models.Index(fields=["namespace", "name"], name="lease_namespace_name"),
            models.Index(
                fields=["cluster", "namespace", "group_name"],
                name="lease_group",
                condition=~models.Q(group_name=""),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id}:{self.namespace}/{self.name}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Saved with its expiry schedule (LeaseDeadline): the ingest writes both in its
        own statements (leases.lease_rows); this is for rows saved one by one (admin,
        tests)."""
        super().save(*args, **kwargs)
        update_fields = kwargs.get("update_fields")
        if update_fields is None or set(update_fields) & _SCHEDULE_FIELDS:
            schedule_expiry([self])

    def state_at(self, now: datetime, as_of: datetime | bool | None = True) -> LeaseState:
        """Its state at `now`, judged by its cluster's lease data as-of moment (read from
        `self.cluster` unless given: select it with the lease)."""
        if as_of is True:
            cluster = self.cluster
            as_of = cluster.leases_as_of if cluster.enabled else None
        return lease_state(self.holder, self.expires_at, now, as_of or None)


# What a lease's expiry schedule is worked out from (`soon_at`).
_SCHEDULE_FIELDS = {"holder", "expires_at", "lease_duration_seconds"}


class LeaseDeadline(models.Model):
    """When a lease becomes a problem by the clock alone (`soon_at`), kept beside the lease.

    Expiry is time, not an event, but the moment is known in advance: a lease is expiring
    soon from `soon_at` on, and expired later still. Indexed, so that "which leases are
    expiring soon or expired now" reads only those (`soon_at <= now`), however many healthy
    leases there are. A side table and not a column of Lease: every renewal moves it, and
    an index on a Lease column that renewals move would make each renewal write an entry
    into every index of the wide lease table instead of an in-place (HOT) update; this
    narrow row has two indexes. Written with the lease by every path that writes
    renew_time or expires_at (leases.lease_rows, Lease.save, `schedule_expiry`).
    """

    lease = models.OneToOneField(
        Lease, on_delete=models.CASCADE, primary_key=True, related_name="deadline"
    )
    # None: nobody holds the lease, or it has no expiry.
    soon_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["soon_at"], name="lease_deadline_soon")]

    def __str__(self) -> str:
        return f"{self.lease_id}: soon at {self.soon_at}"


def schedule_expiry(leases: Iterable[Lease]) -> None:
    """Write the expiry schedule of leases written without it (bulk_create, save)."""
    rows = [
        LeaseDeadline(
            lease_id=lease.pk,
            soon_at=soon_at(lease.holder, lease.expires_at, lease.lease_duration_seconds),
        )
        for lease in leases
        if lease.pk is not None
    ]
    if rows:
        LeaseDeadline.objects.bulk_create(
            rows,
            batch_size=2000,
            update_conflicts=True,
            unique_fields=["lease"],
            update_fields=["soon_at"],
        )


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
    # The holders in human terms (Lease.identity) when the change was seen.
    from_identity = models.TextField(blank=True)
    to_identity = models.TextField(blank=True)
    # `to_holder` is a fencing token that held this lease before another holder did: a stale
    # holder wrote with an old view (leaders/fencing is broken).
    fencing_reused = models.BooleanField(default=False)

    class Meta:
        ordering = ["observed_at", "id"]
        indexes = [
            models.Index(fields=["lease", "observed_at"], name="transition_lease_time"),
            models.Index(fields=["observed_at"], name="transition_time"),
        ]

    def __str__(self) -> str:
        return f"{self.lease_id}: {self.from_holder!r} -> {self.to_holder!r}"


class LeaseHolderSpan(models.Model):
    """One holder's unbroken tenure of a leader-election or control-plane lease.

    Written by the ingestor: opened when a holder acquires (or is first seen), closed when
    it is taken over, releases, lets the lease expire (a late renewal by the same holder
    closes the span at the old expiry and opens a new one) or the lease is deleted.
    Availability (leases/availability.py) is the union of spans over the observed time.
    """

    lease = models.ForeignKey(Lease, on_delete=models.CASCADE, related_name="holder_spans")
    holder = models.TextField()
    identity = models.TextField(blank=True)
    started_at = models.DateTimeField()
    # None while the span is open: it then lasts until the lease's expires_at.
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["started_at", "id"]
        indexes = [
            models.Index(fields=["lease", "started_at"], name="holder_span_lease_time"),
            # Retention finds closed spans by their end (dashboard/retention.py).
            models.Index(fields=["ended_at"], name="holder_span_ended"),
        ]

    def __str__(self) -> str:
        return f"{self.lease_id}: {self.holder!r} {self.started_at} .. {self.ended_at}"


class WatchCoverage(models.Model):
    """A stretch of time during which a cluster's Lease watch was live.

    Time outside every stretch is unobserved: availability never counts it either way. The
    watcher opens a stretch when it (re)connects and moves `last_seen_at` on each status
    flush, so a killed worker's stretch simply stops growing.
    """

    cluster = models.ForeignKey(KubeCluster, on_delete=models.CASCADE, related_name="coverage")
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()

    class Meta:
        ordering = ["started_at", "id"]
        indexes = [models.Index(fields=["cluster", "started_at"], name="coverage_cluster_time")]

    def __str__(self) -> str:
        return f"{self.cluster_id}: {self.started_at} .. {self.last_seen_at}"


class LeaderGroup(models.Model):
    """What an admin knows of a leader-k8s slot group that its leases do not say.

    Groups themselves come from the leases (`Lease.group_name`); a row here records the
    group's expected size (leader-k8s's maxLeaders), which is written on no lease.
    """

    cluster = models.ForeignKey(KubeCluster, on_delete=models.CASCADE, related_name="leader_groups")
    namespace = models.CharField(max_length=253)
    name = models.CharField(max_length=253)
    expected_size = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        help_text=_("maxLeaders of the group's elector: the number of slots that should be held."),
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["cluster__name", "namespace", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "namespace", "name"], name="leader_group_unique_per_cluster"
            )
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id}:{self.namespace}/{self.name}"


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


# Labels OpenStack Magnum (under NKS) writes on every node it creates.
NODEGROUP_LABEL = "magnum.openstack.org/nodegroup"
ROLE_LABEL = "magnum.openstack.org/role"

# The node conditions the dashboard keeps; kubelets and add-ons may report others.
KEPT_NODE_CONDITIONS = (
    "Ready",
    "MemoryPressure",
    "DiskPressure",
    "PIDPressure",
    "NetworkUnavailable",
)


class ConditionStatus(models.TextChoices):
    """A node condition's status as Kubernetes reports it; "" when the node reports none."""

    TRUE = "True", "True"
    FALSE = "False", "False"
    UNKNOWN = "Unknown", "Unknown"
    # The three statuses are Kubernetes' own words, shown as written.
    MISSING = "", _("not reported")


class NodeQuerySet(models.QuerySet["Node"]):
    def present(self) -> NodeQuerySet:
        return self.filter(deleted_at__isnull=True)

    def in_nodegroup(self, nodegroup: str) -> NodeQuerySet:
        return self.filter(nodegroup_label=nodegroup)


class Node(models.Model):
    """A Kubernetes Node as the watcher last saw it, cut down to what the dashboard uses.

    Node objects are large (images, volumes, addresses, capacity); keeping all of it would
    multiply the write load of a 5,000-node cluster for nothing.
    """

    cluster = models.ForeignKey(KubeCluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=253)
    uid = models.CharField(max_length=64, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(null=True, blank=True)  # metadata.creationTimestamp
    # spec.providerID, e.g. openstack:///<instance-uuid> on NHN Cloud; untrusted text.
    provider_id = models.CharField(max_length=512, blank=True)
    unschedulable = models.BooleanField(default=False)  # cordoned
    taints = models.JSONField(default=list, blank=True)  # [{"key", "value", "effect"}]
    # The KEPT_NODE_CONDITIONS the node reports, by type: {"Ready": {"status", "reason",
    # "message", "last_transition_time"}}.
    conditions = models.JSONField(default=dict, blank=True)
    # Ready, copied out of `conditions` so pages and rules can filter on it in SQL.
    ready = models.CharField(
        max_length=8, choices=ConditionStatus.choices, default=ConditionStatus.MISSING, blank=True
    )
    ready_since = models.DateTimeField(null=True, blank=True)  # Ready's lastTransitionTime
    # Copied out of `labels` for the same reason; "" when the label is missing.
    nodegroup_label = models.CharField(max_length=253, blank=True)
    kubelet_version = models.CharField(max_length=64, blank=True)
    internal_address = models.CharField(max_length=64, blank=True)
    resource_version = models.CharField(max_length=64, blank=True)
    observed_at = models.DateTimeField(default=timezone.now)
    deleted_at = models.DateTimeField(null=True, blank=True)

    objects = NodeQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="node_unique_per_cluster")
        ]
        indexes = [
            models.Index(fields=["cluster", "nodegroup_label"], name="node_nodegroup"),
        ]

    def __str__(self) -> str:
        return f"{self.cluster_id}:{self.name}"


class NodeReadyChange(models.Model):
    """A change of a node's Ready condition seen by the watcher: history, like a holder change."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="ready_changes")
    from_status = models.CharField(max_length=8, choices=ConditionStatus.choices, blank=True)
    to_status = models.CharField(max_length=8, choices=ConditionStatus.choices, blank=True)
    reason = models.CharField(max_length=128, blank=True)
    message = models.TextField(blank=True)
    # Ready's lastTransitionTime as the kubelet (or node controller) wrote it.
    transitioned_at = models.DateTimeField(null=True, blank=True)
    observed_at = models.DateTimeField()

    class Meta:
        ordering = ["observed_at", "id"]
        indexes = [
            models.Index(fields=["node", "observed_at"], name="ready_change_node_time"),
            models.Index(fields=["observed_at"], name="ready_change_time"),
        ]

    def __str__(self) -> str:
        return f"{self.node_id}: {self.from_status or '-'} -> {self.to_status or '-'}"


class WatchWorker(models.Model):
    """A `watch` worker process as it last reported itself: the clusters are spread over the
    workers whose heartbeat is recent (leases/watcher_assignment.py)."""

    # "<host>:<pid>": the start of every lock owner (and `KubeCluster.watcher_id`) of its
    # watchers, so a cluster's watcher names its worker.
    name = models.CharField(max_length=200, unique=True)
    # The queue only this worker consumes: its own claims are sent there.
    queue = models.CharField(max_length=255)
    concurrency = models.PositiveIntegerField(default=0)
    # Watchers it runs or has claimed, at its last heartbeat.
    clusters = models.PositiveIntegerField(default=0)
    capacity = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField()
    # Written with the database's clock, and compared with it: workers' clocks may differ.
    heartbeat_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
