"""The rule registry: what each rule checks, its default severity, and its configuration."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from alerts import election_rules, lease_rules, nks_node_rules, nks_rules, poll_rules
from alerts.conditions import RuleConfig, RuleContext, RuleOutcome
from alerts.models import AlertRule, Rule, Severity, split_addresses


def source_stale(ctx: RuleContext) -> RuleOutcome:
    """The dashboard's own data sources went quiet: Lease watchers and NKS polls.

    ``grace_seconds``: how long a watcher may write nothing (default
    ALERT_WATCH_STALE_SECONDS); ``threshold``: NKS poll intervals without a successful poll
    (default ALERT_NKS_STALE_POLLS). The dashboard alerting about itself is what makes its
    silence trustworthy.
    """
    outcome = RuleOutcome()
    watch_threshold = timedelta(
        seconds=settings.ALERT_WATCH_STALE_SECONDS
        if ctx.config.grace_seconds is None
        else ctx.config.grace_seconds
    )
    lease_rules.watchers_stale(ctx, outcome, watch_threshold)
    nks_rules.nks_sources_stale(ctx, outcome)
    return outcome


@dataclass(frozen=True, slots=True)
class RuleSpec:
    rule: Rule
    severity: Severity
    evaluate: Callable[[RuleContext], RuleOutcome]
    # Lazy: shown in the reader's language on the incident page and in admin.
    summary: str | Promise
    grace_help: str | Promise = ""
    threshold_help: str | Promise = ""
    window_help: str | Promise = ""


RULE_SPECS: dict[Rule, RuleSpec] = {
    spec.rule: spec
    for spec in (
        RuleSpec(
            Rule.LEASE_EXPIRED,
            Severity.CRITICAL,
            lease_rules.lease_expired,
            _("A leader-election or control-plane lease with a holder expired."),
            grace_help=_(
                "Seconds past expiry (default ALERT_LEASE_GRACE_SECONDS, else one more "
                "leaseDurationSeconds)."
            ),
        ),
        RuleSpec(
            Rule.LEASE_FLAPPING,
            Severity.WARNING,
            lease_rules.lease_flapping,
            _("A lease's holder keeps changing; resolves after a window without a change."),
            threshold_help=_("Holder changes that open it (default ALERT_FLAP_CHANGES)."),
            window_help=_("Window in seconds (default ALERT_FLAP_WINDOW_SECONDS)."),
        ),
        RuleSpec(
            Rule.NODE_HEARTBEATS_EXPIRED,
            Severity.CRITICAL,
            lease_rules.node_heartbeats_expired,
            _("Nodes stopped renewing their kube-node-lease lease (one incident per cluster)."),
            grace_help=_("Seconds past a node lease's expiry (default ALERT_NODE_GRACE_SECONDS)."),
            threshold_help=_("Least number of such nodes (default 1)."),
        ),
        RuleSpec(
            Rule.CLUSTER_UNHEALTHY,
            Severity.CRITICAL,
            nks_rules.cluster_unhealthy,
            _("An NKS cluster's API or nodes are not NORMAL, or its health data is STALE/ROTTEN."),
            grace_help=_("Seconds it must last (default ALERT_NKS_GRACE_POLLS poll intervals)."),
        ),
        RuleSpec(
            Rule.NODEGROUP_NOT_READY,
            Severity.WARNING,
            nks_rules.nodegroup_not_ready,
            _("An NKS nodegroup has nodes that are not ready (not judged while NKS updates it)."),
            grace_help=_("Seconds it must last (default ALERT_NKS_GRACE_POLLS poll intervals)."),
        ),
        RuleSpec(
            Rule.NODEGROUP_MISMATCH,
            Severity.WARNING,
            nks_node_rules.nodegroup_mismatch,
            _(
                "NKS's node count or ready:not-ready disagrees with the cluster's own Nodes and "
                "heartbeat Leases (no verdict while either side is stale)."
            ),
            grace_help=_("Seconds it must last (default 3 NKS poll intervals)."),
        ),
        RuleSpec(
            Rule.RESIZE_FAILED,
            Severity.WARNING,
            nks_rules.resize_failed,
            _("A nodegroup resize ended failed; open until a later resize of it succeeds."),
            window_help=_(
                "Seconds a failure stays open at most (default ALERT_RESIZE_FAILED_HOURS)."
            ),
        ),
        RuleSpec(
            Rule.LEADER_GROUP_UNSTAFFED,
            Severity.CRITICAL,
            election_rules.leader_group_unstaffed,
            _("No slot of a leader-k8s slot group is held: the group has no leader."),
            grace_help=_(
                "Seconds it must last (default ALERT_LEASE_GRACE_SECONDS, else one "
                "leaseDurationSeconds of its slots)."
            ),
        ),
        RuleSpec(
            Rule.LEADER_GROUP_DEGRADED,
            Severity.WARNING,
            election_rules.leader_group_degraded,
            _(
                "Fewer slots of a leader-k8s group are held than the expected size an admin "
                "recorded (on the group page or in admin); none held is leader_group_unstaffed."
            ),
            grace_help=_(
                "Seconds it must last (default ALERT_LEASE_GRACE_SECONDS, else one "
                "leaseDurationSeconds of its slots)."
            ),
        ),
        RuleSpec(
            Rule.FENCING_TOKEN_REUSED,
            Severity.CRITICAL,
            election_rules.fencing_token_reused,
            _(
                "A leader-k8s fencing token came back after another holder: a stale holder wrote, "
                "fencing is broken."
            ),
            grace_help=_("Seconds before it opens (default 0)."),
            window_help=_("Seconds it stays open after the last reuse (default 86400)."),
        ),
        RuleSpec(
            Rule.NKS_POLL_STUCK,
            Severity.WARNING,
            poll_rules.nks_poll_stuck,
            _(
                "An NKS poll has run far past its time limit (NKS_POLL_TIME_LIMIT_SECONDS): it "
                "was not stopped, or its worker died mid-poll. Open until a poll completes."
            ),
            grace_help=_(
                "Seconds a poll may run (default ALERT_NKS_POLL_STUCK_SECONDS, else twice "
                "NKS_POLL_TIME_LIMIT_SECONDS)."
            ),
        ),
        RuleSpec(
            Rule.SOURCE_STALE,
            Severity.CRITICAL,
            source_stale,
            _("The dashboard's own data is old: a Lease watcher or NKS polling went quiet."),
            grace_help=_(
                "Seconds a watcher may write nothing (default ALERT_WATCH_STALE_SECONDS)."
            ),
            threshold_help=_("NKS poll intervals without success (default ALERT_NKS_STALE_POLLS)."),
        ),
    )
}


def load_rule_configs() -> dict[Rule, RuleConfig]:
    """Every rule's effective configuration; a missing admin row means all defaults."""
    rows = {row.rule: row for row in AlertRule.objects.all()}
    configs = {}
    for rule, spec in RULE_SPECS.items():
        row = rows.get(rule)
        if row is None:
            configs[rule] = RuleConfig(rule=rule, enabled=True, severity=spec.severity)
            continue
        configs[rule] = RuleConfig(
            rule=rule,
            enabled=row.enabled,
            severity=Severity(row.severity) if row.severity else spec.severity,
            grace_seconds=row.grace_seconds,
            threshold=row.threshold,
            window_seconds=row.window_seconds,
            recipients=tuple(split_addresses(row.recipients)),
            mail_default_recipients=row.mail_default_recipients,
        )
    return configs


def ensure_rule_rows(apps: Any = None, **_: Any) -> None:
    """One admin row per rule (after every migrate), so each can be tuned without code."""
    if apps is not None:
        try:
            # A migrate of other apps only (`migrate auth`) leaves the rules' table unmade.
            apps.get_model("alerts", "AlertRule")
        except LookupError:
            return
    existing = set(AlertRule.objects.values_list("rule", flat=True))
    missing = [AlertRule(rule=rule) for rule in RULE_SPECS if rule not in existing]
    if missing:
        AlertRule.objects.bulk_create(missing, ignore_conflicts=True)
