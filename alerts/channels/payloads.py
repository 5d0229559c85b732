"""What a channel message says, in each format: Dooray!, Slack and the generic webhook.

Built when the message is planned, in the channel's language and time zone (the caller
activates both), and stored on the row as posted, like a rendered e-mail. Names from the
clusters (leases, holders, NKS strings) are data: in Slack's mrkdwn `&`, `<` and `>` are
escaped (so a lease name cannot become a link or an @channel); Dooray! renders markdown, so
there its link and emphasis characters get a backslash (`dooray_escape`: a lease named
`[click](https://evil.example)` stays text), and control characters are shown as escapes; in
the webhook's JSON they are just strings, for machines, which must escape them for a format.
None of it ever reaches an HTTP header.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext, ngettext

from alerts.mail import absolute, incident_summary, iso, sort_incidents, visible
from alerts.models import ChannelKind, Incident, NotificationKind
from dashboard.timefmt import format_duration

PAYLOAD_VERSION = 1
# Incidents listed one by one in a chat message; the rest are counted, with a link.
CHAT_INCIDENTS = 10
# Incidents listed in a folded summary's chat message.
SUMMARY_TITLES = 5
# A webhook lists every incident, up to this many (a receiver must not need to page).
WEBHOOK_INCIDENTS = 1000
SLACK_TEXT_LIMIT = 2900  # a section block holds 3000 characters
FACTS_IN_CHAT = 6

COLORS = {
    # Dooray! takes colour names and hex; Slack's attachments are not used (blocks instead).
    "critical": "#d93025",
    "warning": "#f29900",
    "resolved": "#1e8e3e",
    "reminder": "#5f6368",
}


def slack_escape(text: object) -> str:
    """Data for Slack mrkdwn: only these three are control characters there (Slack's docs)."""
    return visible(text, 500).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


# CommonMark's link, autolink/HTML and emphasis characters, and the backslash itself.
_MARKDOWN = re.compile(r"([\\`*_~\[\]<>])")


def dooray_escape(text: object) -> str:
    """Data for Dooray!'s markdown: shown as written, never a link, an image or emphasis."""
    return _MARKDOWN.sub(r"\\\1", visible(text))


def _as_is(text: str) -> str:
    return text


def alerts_url() -> str:
    return absolute(reverse("alerts:index"))


def bot_name() -> str:
    return gettext("Lease dashboard")


def _local(moment: datetime | None) -> str:
    """A moment in the active zone (the channel's), with the zone's abbreviation."""
    if moment is None:
        return "-"
    local = timezone.localtime(moment)
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}"


def headline(kind: str, count: int) -> str:
    if kind == NotificationKind.OPENED:
        text = ngettext("%(count)d new incident", "%(count)d new incidents", count)
    elif kind == NotificationKind.RESOLVED:
        text = ngettext("%(count)d incident resolved", "%(count)d incidents resolved", count)
    else:
        text = ngettext(
            "%(count)d incident still open and not acknowledged",
            "%(count)d incidents still open and not acknowledged",
            count,
        )
    return text % {"count": count}


def _state_line(incident: Incident, now: datetime) -> str:
    if incident.resolved_at is not None:
        return gettext("Resolved at %(resolved)s, lasted %(lasted)s.") % {
            "resolved": _local(incident.resolved_at),
            "lasted": format_duration(incident.duration(now).total_seconds()),
        }
    return gettext("Since %(since)s (%(so_far)s so far).") % {
        "since": _local(incident.since),
        "so_far": format_duration(incident.duration(now).total_seconds()),
    }


def _lines(
    summary: Mapping[str, Any],
    incident: Incident,
    now: datetime,
    data: Callable[[str], str] = _as_is,
) -> list[str]:
    """The state, the resolution note (if any) and the first facts, in the active language.

    ``data`` escapes what the clusters wrote for the channel's format.
    """
    lines = [_state_line(incident, now)]
    if summary["resolution"]:
        lines.append(data(summary["resolution"]))
    lines += [f"{fact['label']}: {data(fact['text'])}" for fact in summary["facts"][:FACTS_IN_CHAT]]
    return lines


def _color(kind: str, incident: Incident) -> str:
    if kind == NotificationKind.RESOLVED or incident.resolved_at is not None:
        return COLORS["resolved"]
    if kind == NotificationKind.REMINDER:
        return COLORS["reminder"]
    return COLORS.get(incident.severity, COLORS["warning"])


def _incident_line(summary: Mapping[str, Any], data: Callable[[str], str] = _as_is) -> str:
    return gettext("[%(severity)s] %(title)s") % {
        "severity": summary["severity_label"],
        "title": data(summary["title"]),
    }


def _more_text(more: int) -> str:
    return ngettext(
        "…and %(count)d more incident: see the alerts page.",
        "…and %(count)d more incidents: see the alerts page.",
        more,
    ) % {"count": more}


# --- Dooray! ---------------------------------------------------------------------------------


def dooray(kind: str, incidents: Sequence[Incident], now: datetime) -> dict[str, Any]:
    """Dooray! incoming webhook: botName, text, and one attachment (title, link, colour) each."""
    ordered = sort_incidents(incidents)
    attachments: list[dict[str, Any]] = []
    for incident in ordered[:CHAT_INCIDENTS]:
        summary = incident_summary(incident, now)
        attachments.append(
            {
                "title": _incident_line(summary, dooray_escape),
                "titleLink": summary["url"],
                "text": "\n".join(_lines(summary, incident, now, dooray_escape)),
                "color": _color(kind, incident),
            }
        )
    more = len(ordered) - CHAT_INCIDENTS
    if more > 0:
        attachments.append(
            {"title": _more_text(more), "titleLink": alerts_url(), "color": COLORS["reminder"]}
        )
    return {
        "botName": bot_name(),
        "text": headline(kind, len(ordered)),
        "attachments": attachments,
    }


# --- Slack -----------------------------------------------------------------------------------


def _slack_section(text: str) -> dict[str, Any]:
    if len(text) > SLACK_TEXT_LIMIT:
        text = text[: SLACK_TEXT_LIMIT - 1] + "…"
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def slack(kind: str, incidents: Sequence[Incident], now: datetime) -> dict[str, Any]:
    """Slack incoming webhook: `text` (the notification's fallback) and blocks."""
    ordered = sort_incidents(incidents)
    title = headline(kind, len(ordered))
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title[:150]}}
    ]
    for incident in ordered[:CHAT_INCIDENTS]:
        summary = incident_summary(incident, now)
        lines = [f"*<{summary['url']}|{slack_escape(_incident_line(summary))}>*"]
        lines += [slack_escape(line) for line in _lines(summary, incident, now)]
        blocks.append(_slack_section("\n".join(lines)))
    more = len(ordered) - CHAT_INCIDENTS
    footer = gettext("Open the alerts page")
    if more > 0:
        footer = _more_text(more)
    blocks.append(
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": f"<{alerts_url()}|{slack_escape(footer)}>"}],
        }
    )
    first = ordered[0] if ordered else None
    text = title
    if first is not None:
        text = gettext("%(headline)s: %(title)s") % {
            "headline": title,
            "title": slack_escape(first.display_full_title),
        }
    return {"text": text, "blocks": blocks}


# --- Generic webhook -------------------------------------------------------------------------


def webhook_incident(incident: Incident, event: str | None = None) -> dict[str, Any]:
    """One incident as the webhook documents it (README, "Alert channels")."""
    facts = []
    for item in (incident.details or {}).get("facts", []):
        if isinstance(item, Mapping):
            fact = {"label": str(item.get("label", "")), "text": str(item.get("text", ""))}
            if item.get("at"):
                fact["at"] = str(item["at"])
            facts.append(fact)
    entry: dict[str, Any] = {
        "id": incident.pk,
        "key": incident.key,
        "rule": incident.rule,
        "severity": incident.severity,
        "state": incident.state,
        "title": incident.title,
        # The same in the channel's language (the English `title` stays for machines).
        "display_title": incident.display_full_title,
        "cluster": incident.cluster,
        "since": iso(incident.since),
        "opened": iso(incident.opened_at),
        "resolved": iso(incident.resolved_at),
        "acknowledged": incident.acknowledged_at is not None,
        "url": absolute(incident.get_absolute_url()),
        "link": absolute(incident.link),
        "facts": facts,
    }
    if event is not None:
        entry["event"] = event
    return entry


def webhook(kind: str, incidents: Sequence[Incident], now: datetime) -> dict[str, Any]:
    ordered = sort_incidents(incidents)
    return {
        "version": PAYLOAD_VERSION,
        "kind": kind,
        "generated_at": iso(now),
        "language": _language(),
        "text": headline(kind, len(ordered)),
        "alerts_url": alerts_url(),
        "incidents_total": len(ordered),
        "incidents": [webhook_incident(i) for i in ordered[:WEBHOOK_INCIDENTS]],
    }


def _language() -> str:
    return translation.get_language() or settings.LANGUAGE_CODE


BUILDERS = {ChannelKind.DOORAY: dooray, ChannelKind.SLACK: slack, ChannelKind.WEBHOOK: webhook}


def build(
    channel_kind: str, kind: str, incidents: Sequence[Incident], now: datetime
) -> dict[str, Any]:
    """The message about `incidents` in the channel's format (language and zone: the caller's)."""
    return BUILDERS[ChannelKind(channel_kind)](kind, incidents, now)


# --- A storm folded into one summary ---------------------------------------------------------


def summary_counts(parts: Iterable[tuple[str, Incident]]) -> dict[str, int]:
    counts = {kind.value: 0 for kind in NotificationKind}
    for kind, _ in parts:
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def summary_lines(counts: Mapping[str, int]) -> list[str]:
    """One short sentence per kind present ("12 incidents opened", "3 resolved")."""
    lines = []
    opened = counts.get(NotificationKind.OPENED, 0)
    resolved = counts.get(NotificationKind.RESOLVED, 0)
    reminded = counts.get(NotificationKind.REMINDER, 0)
    if opened:
        lines.append(
            ngettext("%(count)d incident opened", "%(count)d incidents opened", opened)
            % {"count": opened}
        )
    if resolved:
        lines.append(
            ngettext("%(count)d incident resolved", "%(count)d incidents resolved", resolved)
            % {"count": resolved}
        )
    if reminded:
        lines.append(
            ngettext(
                "%(count)d incident still open (reminder)",
                "%(count)d incidents still open (reminder)",
                reminded,
            )
            % {"count": reminded}
        )
    return lines


def summary(
    channel_kind: str, parts: Sequence[tuple[str, Incident]], messages: int, now: datetime
) -> dict[str, Any]:
    """One message standing for `messages` planned ones: counts, the first titles, a link.

    `parts` is (notification kind, incident) for every incident of every folded message,
    first planned first. Language and zone: the caller's (the channel's).
    """
    counts = summary_counts(parts)
    lines = summary_lines(counts)
    title = ngettext(
        "Alert summary: %(count)d message folded into one",
        "Alert summary: %(count)d messages folded into one",
        messages,
    ) % {"count": messages}
    seen: set[int] = set()
    unique: list[tuple[str, Incident]] = []
    for kind, incident in parts:
        if incident.pk not in seen:
            seen.add(incident.pk)
            unique.append((kind, incident))
    first = unique[:SUMMARY_TITLES]
    more = len(unique) - len(first)
    kind_ = ChannelKind(channel_kind)
    if kind_ == ChannelKind.WEBHOOK:
        return {
            "version": PAYLOAD_VERSION,
            "kind": "summary",
            "generated_at": iso(now),
            "language": _language(),
            "text": "\n".join([title, *lines]),
            "alerts_url": alerts_url(),
            "messages": messages,
            "counts": counts,
            "incidents_total": len(parts),
            "incidents": [
                webhook_incident(incident, event=kind)
                for kind, incident in parts[:WEBHOOK_INCIDENTS]
            ],
        }
    if kind_ == ChannelKind.DOORAY:
        attachments: list[dict[str, Any]] = [
            {
                "title": _incident_line(incident_summary(incident, now), dooray_escape),
                "titleLink": absolute(incident.get_absolute_url()),
                "color": _color(kind, incident),
            }
            for kind, incident in first
        ]
        attachments.append(
            {
                "title": _more_text(more) if more > 0 else gettext("Open the alerts page"),
                "titleLink": alerts_url(),
                "color": COLORS["reminder"],
            }
        )
        return {
            "botName": bot_name(),
            "text": "\n".join([title, *lines]),
            "attachments": attachments,
        }
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": title[:150]}},
        _slack_section("\n".join(slack_escape(line) for line in lines) or slack_escape(title)),
    ]
    listed = [
        f"• <{absolute(incident.get_absolute_url())}|"
        f"{slack_escape(_incident_line(incident_summary(incident, now)))}>"
        for _, incident in first
    ]
    if listed:
        blocks.append(_slack_section("\n".join(listed)))
    footer = _more_text(more) if more > 0 else gettext("Open the alerts page")
    blocks.append(
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": f"<{alerts_url()}|{slack_escape(footer)}>"}],
        }
    )
    return {"text": slack_escape(", ".join([title, *lines])), "blocks": blocks}


def probe_message(channel_kind: str, channel_name: str, now: datetime) -> dict[str, Any]:
    """The admin's "send test message": proves the URL, format and (webhook) signature."""
    text = gettext(
        "Test message from the lease dashboard to the channel %(name)s: it can reach you."
    ) % {"name": channel_name}
    kind_ = ChannelKind(channel_kind)
    if kind_ == ChannelKind.WEBHOOK:
        return {
            "version": PAYLOAD_VERSION,
            "kind": "test",
            "generated_at": iso(now),
            "language": _language(),
            "text": text,
            "alerts_url": alerts_url(),
            "incidents_total": 0,
            "incidents": [],
        }
    if kind_ == ChannelKind.DOORAY:
        text = gettext(
            "Test message from the lease dashboard to the channel %(name)s: it can reach you."
        ) % {"name": dooray_escape(channel_name)}
        return {"botName": bot_name(), "text": text, "attachments": []}
    return {"text": slack_escape(text), "blocks": [_slack_section(slack_escape(text))]}
