"""What a rule returns: conditions that hold now, by dedup key, and keys it cannot judge.

A rule is a function of a `RuleContext` (the clock, its configuration, its unresolved
incidents, which data sources are stale) that returns a `RuleOutcome`:

* ``firing``: the conditions that hold, by dedup key. Each says since when it holds (when the
  data knows, e.g. a lease's expiry) and how long it must hold before it is an incident
  (``hold``, the rule's grace). Without a known start, the first evaluation that saw it starts
  the clock: the incident is *pending* meanwhile, as with Prometheus' ``for:``.
* ``frozen``: keys of unresolved incidents the rule cannot judge now because the data about
  them is stale. They are neither resolved nor updated, and no new incident opens from that
  data: a dead watcher sees no renewals (every lease of its cluster looks expired by the
  clock) and no expiries either (nothing would ever look renewed). Such a cluster gets one
  ``source_stale`` incident instead; its lease incidents carry on when data is current again.
* ``notes``: for keys that stop firing, why (shown on the page and in the resolve mail).

Rules only read; `alerts.evaluation` turns outcomes into incidents.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from alerts.models import Incident, Rule, Severity
from dashboard.timefmt import format_duration, iso_utc

# Names of up to this many nodes are kept on an incident; the count is always exact.
MAX_ITEMS = 1000


@dataclass(frozen=True, slots=True)
class RuleConfig:
    """A rule's effective settings: the admin row's values, else the settings' defaults."""

    rule: Rule
    enabled: bool
    severity: Severity
    grace_seconds: int | None = None
    threshold: int | None = None
    window_seconds: int | None = None
    recipients: tuple[str, ...] = ()
    mail_default_recipients: bool = True


@dataclass(frozen=True, slots=True)
class Condition:
    key: str
    title: str
    cluster: str
    details: dict[str, Any]
    link: str = ""
    since: datetime | None = None
    hold: timedelta = timedelta(0)
    severity: Severity | None = None


@dataclass(slots=True)
class RuleOutcome:
    firing: dict[str, Condition] = field(default_factory=dict)
    frozen: set[str] = field(default_factory=set)
    notes: dict[str, str] = field(default_factory=dict)

    def add(self, condition: Condition) -> None:
        self.firing[condition.key] = condition

    def freeze(self, key: str) -> None:
        self.firing.pop(key, None)
        self.frozen.add(key)


@dataclass(slots=True)
class RuleContext:
    now: datetime
    config: RuleConfig
    unresolved: dict[str, Incident]
    stale_kube_clusters: set[str] = field(default_factory=set)

    def freeze_clusters(self, outcome: RuleOutcome, clusters: Iterable[str]) -> None:
        """Leave this rule's incidents in these clusters as they are (their data is stale)."""
        names = set(clusters)
        for key, incident in self.unresolved.items():
            if incident.cluster in names and key not in outcome.firing:
                outcome.frozen.add(key)

    def ending(self, outcome: RuleOutcome) -> list[Incident]:
        """Unresolved incidents that neither fire nor are frozen: they resolve now."""
        return [
            incident
            for key, incident in self.unresolved.items()
            if key not in outcome.firing and key not in outcome.frozen
        ]


# --- Details ---------------------------------------------------------------------------------
# details = {"facts": [{"label", "text"[, "token"]} or {"label", "at": ISO time}],
#            "items_label": str,
#            "items": [str], "items_total": int, ...rule-specific flags}


def fact(label: str, value: object) -> dict[str, str]:
    return {"label": label, "text": "" if value is None else str(value)}


def time_fact(label: str, moment: datetime | None) -> dict[str, str]:
    if moment is None:
        return {"label": label, "text": "never"}
    return {"label": label, "at": iso_utc(moment)}


def holder_fact(label: str, identity: str, token: str = "") -> dict[str, str]:
    """Who held a lease in human terms, with its leader-k8s fencing token beside it (mail
    and the incident page show the token muted). `identity` falls back to the token: rows
    seen before identities were recorded carry only the raw holder."""
    item = {"label": label, "text": identity or token or "nobody"}
    if token and token != item["text"]:
        item["token"] = token
    return item


def seconds_text(seconds: float) -> str:
    return format_duration(seconds)


def item_list(label: str, items: Sequence[str]) -> dict[str, Any]:
    """The details' list: the first MAX_ITEMS of `items` under `label`, and how many in all."""
    return {"items_label": label, "items": items[:MAX_ITEMS], "items_total": len(items)}
