"""Rules over leader elections: leader-k8s slot groups and fencing tokens.

See `alerts.conditions` for the contract. Like the other lease rules, a cluster whose
watcher is stale opens nothing and resolves nothing here: its leases look expired by the
clock while nobody sees the renewals. Holder identities and tokens are whatever a client
wrote: they go into facts and items (escaped in every body), never into a title, which
becomes the mail subject.

The group rules read only the groups that can matter (`_unstaffed_candidates`,
`_degraded_candidates`): a group whose every slot renews on time is never read, so an
evaluation's cost does not grow with healthy groups.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.urls import reverse
from django.utils.translation import gettext_noop

from alerts.conditions import (
    Condition,
    Message,
    RuleContext,
    RuleOutcome,
    duration_fact,
    fact,
    holder_fact,
    item_list,
    time_fact,
)
from alerts.lease_rules import CLUSTER_DISABLED, CLUSTER_REMOVED, kube_clusters
from alerts.models import Rule
from dashboard.links import lease_url
from leases.groups import GroupKey, GroupState, SlotState, leader_groups
from leases.models import KubeCluster, LeaderGroup, LeaseTransition
from leases.presenters.groups import group_url

# How long a fencing_token_reused incident stays open after the last reuse, unless the
# rule's window says otherwise: long enough to be read in the morning, since the reuse
# itself is over in a moment and nothing later "clears" it.
FENCING_WINDOW_DEFAULT = timedelta(hours=24)


def _group_grace(ctx: RuleContext, group: GroupState) -> timedelta:
    """The rule's grace, else ALERT_LEASE_GRACE_SECONDS, else one more leaseDurationSeconds
    of the group's slots: any candidate could have taken a slot within it, and none did."""
    fixed = ctx.config.grace_seconds
    if fixed is None:
        fixed = settings.ALERT_LEASE_GRACE_SECONDS
    if fixed is not None:
        return timedelta(seconds=fixed)
    durations = [lease.lease_duration_seconds or 0 for lease in group.leases]
    return timedelta(seconds=max(durations, default=0))


def _slot_items(group: GroupState) -> list[Message]:
    items = []
    for slot in group.slots:
        if slot.lease is None:
            items.append(Message.gettext_noop("slot %(index)s: never seen", index=slot.index))
            continue
        # The slot state's label is translated by the leases part's catalog.
        state = Message(str(slot.state.label))
        lease = slot.lease
        who = lease.identity or lease.holder
        if slot.state == SlotState.EXPIRED and lease.token:
            item = Message.gettext_noop(
                "slot %(index)s: %(state)s, last held by %(holder)s (token %(token)s)",
                index=slot.index,
                state=state,
                holder=who,
                token=lease.token,
            )
        elif slot.state == SlotState.EXPIRED:
            item = Message.gettext_noop(
                "slot %(index)s: %(state)s, last held by %(holder)s",
                index=slot.index,
                state=state,
                holder=who,
            )
        elif slot.state == SlotState.HELD:
            item = Message.gettext_noop(
                "slot %(index)s: %(state)s by %(holder)s", index=slot.index, state=state, holder=who
            )
        else:
            item = Message.gettext_noop("slot %(index)s: %(state)s", index=slot.index, state=state)
        items.append(item)
    return items


def _size(group: GroupState) -> Message:
    """`leases.presenters.groups.size_text` as a message (the same ids, so the leases part's
    catalog translates it)."""
    if group.expected is not None:
        return Message("%(expected)s expected", {"expected": str(group.expected)})
    return Message(
        "≥ %(size)s slot (highest slot seen)",
        {"size": str(group.least_size)},
        plural="≥ %(size)s slots (highest slot seen)",
        count=group.least_size,
    )


def _group_facts(group: GroupState, grace: timedelta) -> list[dict[str, object]]:
    return [
        fact(
            gettext_noop("Group"),
            Message.gettext_noop(
                "%(group)s (leases %(name)s-slot-<n>)",
                group=f"{group.namespace}/{group.name}",
                name=group.name,
            ),
        ),
        fact(
            gettext_noop("Slots held"),
            Message.gettext_noop("%(held)s of %(size)s", held=group.held, size=_size(group)),
        ),
        fact(gettext_noop("Slots seen"), len(group.seen)),
        duration_fact(gettext_noop("Grace before alerting"), grace),
    ]


def _group_key(rule: Rule, group: GroupState) -> str:
    return f"{rule}:{group.cluster}/{group.namespace}/{group.name}"


def _group_notes(
    ctx: RuleContext, outcome: RuleOutcome, groups: dict[str, GroupState], rule: Rule
) -> None:
    names = {cluster.name: cluster for cluster in kube_clusters().values()}
    for incident in ctx.ending(outcome):
        group = groups.get(incident.key)
        cluster = names.get(incident.cluster)
        if cluster is None:
            note = CLUSTER_REMOVED
        elif not cluster.enabled:
            note = CLUSTER_DISABLED
        elif group is None:
            note = Message.gettext_noop("the group's slot leases were deleted")
        elif rule == Rule.LEADER_GROUP_DEGRADED and not group.held:
            note = Message.gettext_noop("no slot is held any more: see leader_group_unstaffed")
        elif rule == Rule.LEADER_GROUP_DEGRADED and group.expected is None:
            note = Message.gettext_noop("the group's expected size was cleared")
        else:
            note = Message.gettext_noop(
                "%(held)s of %(size)s held again", held=group.held, size=_size(group)
            )
        outcome.notes[incident.key] = note


def _open_incident_groups(ctx: RuleContext, rule: Rule) -> set[GroupKey]:
    """The groups of the rule's open incidents: read, so that each resolves with the right
    note (held again, or gone)."""
    if not ctx.unresolved:
        return set()
    ids = dict(KubeCluster.objects.values_list("name", "id"))
    found = set()
    for incident in ctx.unresolved.values():
        cluster_id = ids.get(incident.cluster)
        prefix = f"{rule}:{incident.cluster}/"
        if cluster_id is None or not incident.key.startswith(prefix):
            continue  # a removed cluster's incident resolves without its group
        namespace, _, name = incident.key.removeprefix(prefix).partition("/")
        found.add((cluster_id, namespace, name))
    return found


def _unstaffed_candidates(ctx: RuleContext) -> set[GroupKey]:
    """The groups that may have no slot held at `ctx.now`, and those with an open incident.

    A group with no slot held has every slot expired, released or of unknown state. An
    expired slot, or one whose expiry passed after its data's as-of moment, is due by its
    expiry schedule (LeaseDeadline.soon_at <= now); a released one has no schedule (None);
    a stale cluster's groups are frozen by the cluster, not read. Both come from the
    evaluation's due leases (`alerts.due_leases`, read once by id for every rule): a group
    whose slots renew on time is not read, not even through the group index.
    """
    due = ctx.due_leases()
    found = _open_incident_groups(ctx, Rule.LEADER_GROUP_UNSTAFFED)
    found.update(
        (lease.cluster_id, lease.namespace, lease.group_name)
        for lease in [*due.due(ctx.now), *due.released()]
        if lease.is_slot
    )
    return found


def _degraded_candidates(ctx: RuleContext) -> set[GroupKey]:
    """The groups an admin recorded an expected size for (the rule judges no other), and
    those with an open incident (a size cleared resolves it)."""
    recorded = LeaderGroup.objects.filter(expected_size__isnull=False).values_list(
        "cluster_id", "namespace", "name"
    )
    return {*recorded, *_open_incident_groups(ctx, Rule.LEADER_GROUP_DEGRADED)}


def leader_group_unstaffed(ctx: RuleContext) -> RuleOutcome:
    """No slot of a leader-k8s group held (expired or released) for longer than the grace.

    Since: when the last slot stopped being held (its expiry, or when its release was seen).
    One incident per group; resolves when any slot is held again or the group is gone.
    """
    outcome = RuleOutcome()
    groups = {
        _group_key(Rule.LEADER_GROUP_UNSTAFFED, group): group
        for group in leader_groups(ctx.now, enabled_only=True, keys=_unstaffed_candidates(ctx))
    }
    observed = _observed_since()
    for key, group in groups.items():
        if group.cluster in ctx.stale_kube_clusters or group.held:
            continue
        if not group.known or _settling(group, observed, now=ctx.now):
            outcome.freeze(key)  # a slot whose state is not known may be held: no verdict
            continue
        outcome.add(
            _group_condition(
                ctx,
                key,
                group,
                Message.gettext_noop(
                    "leader group %(group)s: no slot held", group=f"{group.namespace}/{group.name}"
                ),
                group.unstaffed_since(),
            )
        )
    ctx.freeze_clusters(outcome, ctx.stale_kube_clusters)
    _group_notes(ctx, outcome, groups, Rule.LEADER_GROUP_UNSTAFFED)
    return outcome


def _observed_since() -> dict[int, datetime | None]:
    """Each cluster's start of its observed stretch: one query for all the groups."""
    return dict(KubeCluster.objects.values_list("id", "leases_observed_since"))


def _settling(group: GroupState, observed: dict[int, datetime | None], *, now: datetime) -> bool:
    """The group's cluster came back from unobserved time (a stall, an outage, a new
    watcher) less than a lease duration ago: its holders may not have renewed yet, so an
    expired slot says nothing of them (alerts.lease_rules.vouched)."""
    since = observed.get(group.cluster_id)
    if since is None:
        return False
    longest = max((lease.lease_duration_seconds or 0 for lease in group.leases), default=0)
    return now < since + timedelta(seconds=longest)


def _group_condition(
    ctx: RuleContext, key: str, group: GroupState, title: Message, since: datetime | None
) -> Condition:
    """A group rule's condition: the group's facts and slots, held for the group's grace."""
    grace = _group_grace(ctx, group)
    return Condition(
        key=key,
        title=title,
        cluster=group.cluster,
        since=since,
        hold=grace,
        link=group_url(group.cluster, group.namespace, group.name),
        details={
            "facts": _group_facts(group, grace),
            **item_list(gettext_noop("Slots"), _slot_items(group)),
        },
    )


def leader_group_degraded(ctx: RuleContext) -> RuleOutcome:
    """Fewer slots held than the expected size an admin recorded, for longer than the grace.

    Only groups with an expected size (leader-k8s writes maxLeaders on no lease, so without
    it "fewer than expected" means nothing). With no slot held at all it is
    leader_group_unstaffed's incident instead: one cause, one incident.
    """
    outcome = RuleOutcome()
    groups = {
        _group_key(Rule.LEADER_GROUP_DEGRADED, group): group
        for group in leader_groups(ctx.now, enabled_only=True, keys=_degraded_candidates(ctx))
    }
    observed = _observed_since()
    for key, group in groups.items():
        if group.cluster in ctx.stale_kube_clusters or group.expected is None:
            continue
        if not 0 < group.held < group.expected:
            continue
        if not group.known or _settling(group, observed, now=ctx.now):
            outcome.freeze(key)
            continue
        outcome.add(
            _group_condition(
                ctx,
                key,
                group,
                Message.ngettext(
                    "leader group %(group)s: %(held)s of %(expected)s slot held",
                    "leader group %(group)s: %(held)s of %(expected)s slots held",
                    group.expected,
                    group=f"{group.namespace}/{group.name}",
                    held=group.held,
                    expected=group.expected,
                ),
                group.degraded_since(),
            )
        )
    ctx.freeze_clusters(outcome, ctx.stale_kube_clusters)
    _group_notes(ctx, outcome, groups, Rule.LEADER_GROUP_DEGRADED)
    return outcome


# --- fencing_token_reused --------------------------------------------------------------------


def _reuse_timeline(
    reuse: LeaseTransition,
) -> tuple[LeaseTransition | None, LeaseTransition | None]:
    """The reused token's first tenure and the takeover by the holder in between, both seen
    before the reuse and in one order: first held < the other took over < seen again.

    The order is the one the ingestor wrote the changes in (observed_at, then id), which
    within a lease's life is the API server's (leases/fencing.py); the times are the moments
    they were seen, never an acquireTime a client wrote: a stale holder writes its old one
    back, and mixing the two clocks is how a token came out first holding the lease after
    the takeover that ended its tenure."""
    changes = LeaseTransition.objects.filter(lease_id=reuse.lease_id).only("observed_at")
    between = None
    if reuse.from_holder:
        between = (
            changes.filter(to_holder=reuse.from_holder, observed_at__lte=reuse.observed_at)
            .exclude(observed_at=reuse.observed_at, pk__gte=reuse.pk)
            .order_by("-observed_at", "-id")
            .first()
        )
    bound = between or reuse
    first = (
        changes.filter(to_holder=reuse.to_holder, observed_at__lte=bound.observed_at)
        .exclude(observed_at=bound.observed_at, pk__gte=bound.pk)
        .order_by("observed_at", "id")
        .first()
    )
    return first, between


def _seen_at(transition: LeaseTransition | None) -> datetime | None:
    return None if transition is None else transition.observed_at


def fencing_token_reused(ctx: RuleContext) -> RuleOutcome:
    """A leader-k8s fencing token held a lease again after another holder did: a stale
    holder wrote with an old view, so fencing is broken and two nodes may act as leader.

    One incident per lease, opened by the first reuse within ``window_seconds`` (default
    24 h) and kept open while a reuse happened within it; ``grace_seconds`` delays it
    (default none). Names both holders, their node ids, and when each held.
    """
    now, outcome = ctx.now, RuleOutcome()
    window = (
        timedelta(seconds=ctx.config.window_seconds)
        if ctx.config.window_seconds
        else FENCING_WINDOW_DEFAULT
    )
    grace = timedelta(seconds=ctx.config.grace_seconds or 0)
    clusters = kube_clusters()
    reuses: dict[int, list[LeaseTransition]] = defaultdict(list)
    rows = (
        LeaseTransition.objects.filter(
            fencing_reused=True, observed_at__gt=now - window, lease__cluster__enabled=True
        )
        .select_related("lease")
        .only(
            "lease_id",
            "from_holder",
            "to_holder",
            "from_identity",
            "to_identity",
            "observed_at",
            "lease__cluster_id",
            "lease__namespace",
            "lease__name",
        )
        .order_by("lease_id", "observed_at", "id")
    )
    for row in rows:
        reuses[row.lease_id].append(row)
    for seen in reuses.values():
        lease = seen[-1].lease
        cluster = clusters[lease.cluster_id].name
        if cluster in ctx.stale_kube_clusters:
            continue
        reuse = seen[-1]
        earlier, between = _reuse_timeline(reuse)
        where = f"{lease.namespace}/{lease.name}"
        outcome.add(
            Condition(
                key=f"{Rule.FENCING_TOKEN_REUSED}:{cluster}/{where}",
                title=Message.gettext_noop("%(lease)s: fencing token reused", lease=where),
                cluster=cluster,
                since=seen[0].observed_at,
                hold=grace,
                link=lease_url(reverse("leases:index"), cluster, lease.namespace, lease.name),
                details={
                    "facts": [
                        fact(gettext_noop("Lease"), where),
                        holder_fact(
                            gettext_noop("Reused token's holder (node id)"),
                            reuse.to_identity,
                            reuse.to_holder,
                        ),
                        time_fact(
                            gettext_noop("That token first held the lease"), _seen_at(earlier)
                        ),
                        holder_fact(
                            gettext_noop("Holder in between (node id)"),
                            reuse.from_identity,
                            reuse.from_holder,
                        ),
                        time_fact(
                            gettext_noop("The holder in between took over"), _seen_at(between)
                        ),
                        time_fact(gettext_noop("The old token was seen again"), reuse.observed_at),
                        fact(
                            gettext_noop("Token reuses"),
                            Message.gettext_noop(
                                "%(count)s in the last %(window)s", count=len(seen), window=window
                            ),
                        ),
                        fact(
                            gettext_noop("Meaning"),
                            Message.gettext_noop(
                                "a holder wrote with a stale view after another had taken the "
                                "lease: fencing is broken, and two nodes may both have acted as "
                                "leader"
                            ),
                        ),
                    ],
                    "token": reuse.to_holder,
                },
            )
        )
    ctx.freeze_clusters(outcome, ctx.stale_kube_clusters)
    _fencing_notes(ctx, outcome, window)
    return outcome


def _fencing_notes(ctx: RuleContext, outcome: RuleOutcome, window: timedelta) -> None:
    names = {cluster.name: cluster for cluster in kube_clusters().values()}
    for incident in ctx.ending(outcome):
        cluster = names.get(incident.cluster)
        if cluster is None:
            note = CLUSTER_REMOVED
        elif not cluster.enabled:
            note = CLUSTER_DISABLED
        else:
            note = Message.gettext_noop("no fencing token came back for %(window)s", window=window)
        outcome.notes[incident.key] = note
