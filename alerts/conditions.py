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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Self

from django.utils import translation

from alerts.due_leases import DueLeases
from alerts.models import Incident, Rule, Severity, render_message
from dashboard.timefmt import format_duration, iso_utc


@dataclass(frozen=True, slots=True)
class Message:
    """A sentence about an incident, kept as an English message id with its values.

    Rules build titles, fact values and resolution notes with these: the English is stored
    as written (API, logs) and the id and values beside it, so each reader sees it in their
    language (`alerts.models.render_message`). Build them with `Message.gettext_noop` or
    `Message.ngettext`: makemessages reads those names, so the ids land in the catalog.
    Values are data (names, counts) and never translated; a `timedelta` value is a
    duration, written in the reader's language.
    """

    id: str
    args: Mapping[str, str] = field(default_factory=dict)
    durations: Mapping[str, float] = field(default_factory=dict)
    plural: str = ""
    count: int = 0
    # Values that are messages themselves (or lists of them, comma-separated), each in the
    # reader's language.
    lists: Mapping[str, tuple[Message, ...]] = field(default_factory=dict)

    @classmethod
    def gettext_noop(cls, message_id: str, /, **args: object) -> Self:
        return cls._build(message_id, args)

    @classmethod
    def ngettext(cls, singular: str, plural: str, count: int, /, **args: object) -> Self:
        return cls._build(singular, args, plural=plural, count=count)

    @classmethod
    def _build(
        cls, message_id: str, args: Mapping[str, object], *, plural: str = "", count: int = 0
    ) -> Self:
        values: dict[str, str] = {}
        durations: dict[str, float] = {}
        lists: dict[str, tuple[Message, ...]] = {}
        for name, value in args.items():
            if isinstance(value, timedelta):
                durations[name] = value.total_seconds()
            elif isinstance(value, Message):
                lists[name] = (value,)
            elif isinstance(value, list | tuple) and all(isinstance(v, Message) for v in value):
                lists[name] = tuple(value)
            else:
                values[name] = str(value)
        return cls(message_id, values, durations, plural, count, lists)

    def as_json(self) -> dict[str, Any]:
        # str(): a lazy label (another app's choices) is stored as its English text.
        data: dict[str, Any] = {"id": str(self.id), "args": dict(self.args)}
        if self.durations:
            data["durations"] = dict(self.durations)
        if self.plural:
            data["plural"], data["count"] = self.plural, self.count
        if self.lists:
            data["lists"] = {
                name: [part.as_json() for part in parts] for name, parts in self.lists.items()
            }
        return data

    @property
    def english(self) -> str:
        # Stored text is English whatever the process's language (LANGUAGE_CODE may be ko).
        with translation.override("en"):
            text = render_message(self.as_json())
        if text is not None:
            return text
        template = self.plural if self.plural and self.count != 1 else self.id
        lists = {
            name: ", ".join(part.english for part in parts) for name, parts in self.lists.items()
        }
        return template % {**self.args, **self.durations, **lists}


def english(text: str | Message) -> str:
    """What is stored as the English text of a title, fact or note."""
    return text.english if isinstance(text, Message) else text


def message_json(text: str | Message | None) -> dict[str, Any] | None:
    return text.as_json() if isinstance(text, Message) else None


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
    title: str | Message
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
    notes: dict[str, str | Message] = field(default_factory=dict)

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
    # Shared by every rule of one evaluation (alerts.due_leases); read anew when not given.
    due: DueLeases | None = None

    def due_leases(self) -> DueLeases:
        if self.due is None:
            self.due = DueLeases(self.now)
        return self.due

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
# details = {"facts": [{"label", "text"[, "text_message"][, "token"]} or {"label", "at": ISO}],
#            "items_label": str, "items": [str], "items_total": int[, "items_messages"],
#            "title_message": {...}, "resolution_message": {...}, ...rule-specific flags}
# Labels are English message ids (the callers mark them with gettext_noop), stored as the
# English they always were: readers translate them, old rows' labels included.


def fact(label: str, value: object) -> dict[str, Any]:
    if isinstance(value, Message):
        return {"label": label, "text": value.english, "text_message": value.as_json()}
    return {"label": label, "text": "" if value is None else str(value)}


def time_fact(label: str, moment: datetime | None) -> dict[str, Any]:
    if moment is None:
        return fact(label, Message.gettext_noop("never"))
    return {"label": label, "at": iso_utc(moment)}


def holder_fact(label: str, identity: str, token: str = "") -> dict[str, Any]:
    """Who held a lease in human terms, with its leader-k8s fencing token beside it (mail
    and the incident page show the token muted). `identity` falls back to the token: rows
    seen before identities were recorded carry only the raw holder."""
    holder = identity or token
    item = fact(label, holder if holder else Message.gettext_noop("nobody"))
    if token and token != item["text"]:
        item["token"] = token
    return item


def duration_fact(label: str, length: timedelta) -> dict[str, Any]:
    """A length of time, written in the reader's language."""
    # An id that is only a placeholder needs no catalog entry: it reads the same everywhere.
    return fact(label, Message("%(duration)s", durations={"duration": length.total_seconds()}))


def seconds_text(seconds: float) -> str:
    return format_duration(seconds)


def item_list(label: str, items: Sequence[str | Message]) -> dict[str, Any]:
    """The details' list: the first MAX_ITEMS of `items` under `label` (an English message id
    marked by the caller), and how many in all. Items that are messages keep their ids in
    ``items_messages`` (names are data and stay as they are)."""
    shown = items[:MAX_ITEMS]
    data: dict[str, Any] = {
        "items_label": label,
        "items": [english(item) for item in shown],
        "items_total": len(items),
    }
    if any(isinstance(item, Message) for item in shown):
        data["items_messages"] = [message_json(item) for item in shown]
    return data
