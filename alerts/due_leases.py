"""The leases whose expiry schedule has come, read once for all the rules of an evaluation.

Four rules start from the same leases: those due by the moment judged
(`LeaseDeadline.soon_at <= now`) and, for the group
rule, the released ones (no schedule). Each used to read them by primary key for itself, and
since the schedule says nothing of a lease's class, each read every due lease to keep its own
(`lease_expired` read a zone's 1,000 silent node leases to find its 40 leaders), or let the
planner find its own a cheaper way (the group rule: through the group index, every slot lease
of every healthy group). Here they are read once, with the few columns that tell them apart,
and each rule takes its candidates from them: it then reads only its own leases, fresh, after
the cluster rows it judges them by, or judges these rows by the clusters read just before
them (`node_heartbeats_expired`): either way the data's as-of moment is never newer than
the lease rows judged by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from leases.models import KubeCluster, Lease, LeaseDeadline, LeaseLibrary

# Leases read per query: a mass expiry (a zone's 5,000 nodes) costs a few queries, and
# SQLite's limit on a statement's parameters is never reached.
DUE_CHUNK = 2000


@dataclass(frozen=True, slots=True)
class DueLease:
    id: int
    soon_at: datetime | None  # None: no schedule (released)
    cluster_id: int
    namespace: str
    name: str
    lease_class: str
    library: str
    group_slot: int | None
    group_name: str
    holder: str
    expires_at: datetime | None
    lease_duration_seconds: int | None

    @property
    def is_slot(self) -> bool:
        """A slot of a leader-k8s group (`leases.groups.group_member_leases`)."""
        return (
            self.library == LeaseLibrary.LEADER_K8S
            and self.group_slot is not None
            and self.group_name != ""
        )


class DueLeases:
    """The live leases due by `moment` and the released ones, read at the first use."""

    def __init__(self, moment: datetime) -> None:
        self.moment = moment
        self._rows: list[DueLease] | None = None
        self._clusters: dict[int, KubeCluster] = {}

    def rows(self) -> list[DueLease]:
        if self._rows is None:
            # The clusters first: their as-of moments are then never newer than the rows,
            # and a rule may judge the rows by them (alerts.lease_rules.vouched).
            self._clusters = {
                cluster.pk: cluster for cluster in KubeCluster.objects.defer("kubeconfig")
            }
            self._rows = self._read()
        return self._rows

    def clusters(self) -> dict[int, KubeCluster]:
        """Every cluster, as read just before the rows."""
        self.rows()
        return self._clusters

    def at(self, moment: datetime) -> DueLeases:
        """These, or for a moment after the one read for, a read of their own."""
        return self if moment <= self.moment else DueLeases(moment)

    def due(self, moment: datetime) -> list[DueLease]:
        """Those due by `moment`, which is at most the moment read for (else read anew)."""
        if moment > self.moment:
            return self.at(moment).due(moment)
        return [row for row in self.rows() if row.soon_at is not None and row.soon_at <= moment]

    def released(self) -> list[DueLease]:
        return [row for row in self.rows() if row.soon_at is None]

    def _read(self) -> list[DueLease]:
        # Every lease with a holder that expires by the moment is among them (its soon_at
        # is at least EXPIRING_SOON before its expiry), and a renewing one is not: an index
        # range read of the narrow schedule. Ordered by soon_at on purpose: every renewal
        # moves the column forward, so PostgreSQL's statistics of it are always behind;
        # between two ANALYZEs every soon_at looks past, the planner expects every row to
        # match and, unordered, scans the table. In index order the index is the cheaper
        # plan, and it reads only the rows that match.
        schedule = dict(
            LeaseDeadline.objects.filter(soon_at__lte=self.moment)
            .order_by("soon_at")
            .values_list("lease_id", "soon_at")
        )
        schedule.update(
            LeaseDeadline.objects.filter(soon_at__isnull=True).values_list("lease_id", "soon_at")
        )
        ids = list(schedule)
        found: list[DueLease] = []
        for start in range(0, len(ids), DUE_CHUNK):
            # By primary key alone: no other index offers the planner a way round the ids.
            rows = (
                Lease.objects.live()
                .filter(pk__in=ids[start : start + DUE_CHUNK])
                .values_list(
                    "id",
                    "cluster_id",
                    "namespace",
                    "name",
                    "lease_class",
                    "library",
                    "group_slot",
                    "group_name",
                    "holder",
                    "expires_at",
                    "lease_duration_seconds",
                )
            )
            found.extend(DueLease(row[0], schedule[row[0]], *row[1:]) for row in rows)
        return found
