"""Alert e-mails: subjects, plain-text and HTML bodies, and the message to send.

Lease names, holders and NKS strings are written by whoever runs a client in the cluster, so
they are data: control characters and line breaks are stripped from the subject (the only
header untrusted text ever reaches) and shown as visible escapes in bodies; the HTML body is
rendered with autoescaping. Every other header comes from our ids and settings.
"""

from __future__ import annotations

import unicodedata
import zoneinfo
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from email.utils import parseaddr
from typing import Any

from django.conf import settings
from django.core.mail import EmailMessage, EmailMultiAlternatives
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext, ngettext, pgettext, pgettext_lazy

from alerts.models import (
    DeliveryState,
    Incident,
    Notification,
    NotificationKind,
    Severity,
    severity_rank,
)
from dashboard.hostile_input import INVISIBLE_CATEGORIES, visible_text
from dashboard.timefmt import format_duration, iso_utc, mail_moment_text, relative_text

SUBJECT_LIMIT = 200
VALUE_LIMIT = 300
ITEMS_IN_MAIL = 50
# A subject's tag, in capitals in English so mail filters can match it.
TAGS = {
    NotificationKind.OPENED: pgettext_lazy("mail subject tag", "FIRING"),
    NotificationKind.RESOLVED: pgettext_lazy("mail subject tag", "RESOLVED"),
    NotificationKind.REMINDER: pgettext_lazy("mail subject tag", "REMINDER"),
}
_INVISIBLE = INVISIBLE_CATEGORIES


def clean_header_text(text: str, limit: int = SUBJECT_LIMIT) -> str:
    """One line of printable text: control, format and separator characters become spaces."""
    cleaned = "".join(
        " " if unicodedata.category(character) in _INVISIBLE else character for character in text
    )
    single = " ".join(cleaned.split())
    return single if len(single) <= limit else single[: limit - 1] + "…"


def visible(text: object, limit: int = VALUE_LIMIT) -> str:
    """Untrusted text for a mail body: control characters shown as escapes, length capped."""
    raw = "" if text is None else str(text)
    if len(raw) > limit:
        raw = raw[: limit - 1] + "…"
    return visible_text(raw)  # the same escapes the pages show


def absolute(path: str) -> str:
    if not path:
        return ""
    if path.startswith(("http://", "https://")):
        return path
    return f"{settings.DASHBOARD_URL}{path}"


def _fact_text(item: dict[str, Any], now: datetime) -> str:
    """A fact's value for mail: a moment in UTC and the reader's zone with its age, else the
    text (in the reader's language: `Incident.display_facts`)."""
    at = item.get("at")
    if at:
        moment = parse_datetime(str(at))
        if moment is not None:
            text = mail_moment_text(moment)
            if moment > now:
                return text
            return pgettext("a moment and how long ago it was", "%(moment)s, %(ago)s") % {
                "moment": text,
                "ago": relative_text((now - moment).total_seconds()),
            }
    return visible(item.get("text", ""))


def severity_label(severity: str) -> str:
    """The severity in the active language (the stored value stays English)."""
    try:
        return str(Severity(severity).label)
    except ValueError:
        return severity


def sort_incidents(incidents: Sequence[Incident]) -> list[Incident]:
    return sorted(incidents, key=lambda i: (-severity_rank(i.severity), i.since, i.pk))


def incident_context(incident: Incident, now: datetime) -> dict[str, Any]:
    """What mail shows of an incident, in the active language and zone (the recipient's)."""
    details = incident.details or {}
    items = [visible(name, 100) for name in incident.display_items(ITEMS_IN_MAIL)]
    total = int(details.get("items_total", len(details.get("items", []))) or 0)
    shown = items[:ITEMS_IN_MAIL]
    label = severity_label(incident.severity)
    return {
        "id": incident.pk,
        "title": visible(incident.display_full_title, 500),
        "severity": incident.severity,
        "severity_label": label,
        "severity_upper": label.upper(),
        "rule": str(incident.get_rule_display()),
        "since": mail_moment_text(incident.since),
        "opened": mail_moment_text(incident.opened_at),
        "resolved": mail_moment_text(incident.resolved_at),
        "so_far": format_duration(incident.duration(now).total_seconds()),
        "lasted": format_duration(incident.duration(now).total_seconds()),
        "resolution": visible(incident.display_resolution, 500),
        "facts": [
            {
                "label": visible(item.get("label", ""), 80),
                "text": _fact_text(item, now),
                # A leader-k8s fencing token, shown muted beside the holder's identity.
                "token": visible(item.get("token", ""), 80),
            }
            for item in incident.display_facts()
        ],
        "items_label": visible(incident.display_items_label, 100),
        "items": shown,
        "more": max(total - len(shown), 0),
        "items_total": total,
        "acknowledged_by": visible(incident.acknowledged_by.get_username(), 150)
        if incident.acknowledged_by
        else "",
        "url": absolute(incident.get_absolute_url()),
        "link": absolute(incident.link),
    }


def incident_summary(incident: Incident, now: datetime) -> dict[str, Any]:
    """One incident for a chat or webhook message, in the active language and zone.

    Keys (stable): ``title`` (with its cluster), ``severity`` (the stored value),
    ``severity_label`` (in words), ``facts`` ([{label, text}], a fencing token folded into
    the text), ``url`` (the incident page), ``link`` (the data behind it), ``resolution``,
    ``since`` and ``lasted`` (so far, while open). Names are data: made visible and bounded
    as in mail, escaping for a format is the caller's.
    """
    context = incident_context(incident, now)
    facts = []
    for item in context["facts"]:
        text = item["text"]
        if item["token"]:
            text = gettext("%(holder)s (token %(token)s)") % {
                "holder": text,
                "token": item["token"],
            }
        facts.append({"label": item["label"], "text": text})
    return {
        "title": context["title"],
        "severity": context["severity"],
        "severity_label": context["severity_label"],
        "facts": facts,
        "url": context["url"],
        "link": context["link"],
        "resolution": context["resolution"] if incident.resolved_at else "",
        "since": context["since"],
        "lasted": context["lasted"],
    }


def subject_for(kind: str, incidents: Sequence[Incident], now: datetime) -> str:
    """The subject in the active language: names in it are data, cleaned of control and
    line-break characters like every untrusted text that reaches a header."""
    first, count = incidents[0], len(incidents)
    values = {
        "tag": TAGS[NotificationKind(kind)],
        "title": first.display_full_title,
        "count": count,
        "more": count - 1,
    }
    if kind == NotificationKind.REMINDER and count == 1:
        text = gettext("[%(tag)s] 1 incident still open: %(title)s") % values
    elif kind == NotificationKind.REMINDER:
        text = (
            ngettext(
                "[%(tag)s] %(count)s incident still open: %(title)s (+%(more)s more)",
                "[%(tag)s] %(count)s incidents still open: %(title)s (+%(more)s more)",
                count,
            )
            % values
        )
    elif kind == NotificationKind.RESOLVED and count == 1:
        lasted = format_duration(first.duration(now).total_seconds())
        text = gettext("[%(tag)s] %(title)s (lasted %(lasted)s)") % {**values, "lasted": lasted}
    elif count == 1:
        text = gettext("[%(tag)s] %(title)s") % values
    else:
        text = gettext("[%(tag)s] %(title)s (+%(more)s more)") % values
    return clean_header_text(text)


def headline_for(kind: str, count: int) -> str:
    if kind == NotificationKind.OPENED:
        if count == 1:
            return gettext("New incident")
        text = ngettext("%(count)s new incident", "%(count)s new incidents", count)
    elif kind == NotificationKind.RESOLVED:
        if count == 1:
            return gettext("Incident resolved")
        text = ngettext("%(count)s incident resolved", "%(count)s incidents resolved", count)
    else:
        text = ngettext(
            "Still open and not acknowledged: %(count)s incident",
            "Still open and not acknowledged: %(count)s incidents",
            count,
        )
    return text % {"count": count}


@dataclass(frozen=True, slots=True)
class RenderedMail:
    subject: str
    text: str
    html: str


def render_notification(
    kind: str,
    incidents: Sequence[Incident],
    now: datetime,
    *,
    language: str | None = None,
    time_zone: str | None = None,
) -> RenderedMail:
    """The mail about `incidents` in `language` with times in `time_zone` (both default to
    the settings'): a notification is rendered once per language and zone of its readers."""
    with (
        translation.override(language or settings.LANGUAGE_CODE),
        timezone.override(zoneinfo.ZoneInfo(time_zone or settings.TIME_ZONE)),
    ):
        return _render_notification(kind, incidents, now)


def _render_notification(kind: str, incidents: Sequence[Incident], now: datetime) -> RenderedMail:
    ordered = sort_incidents(incidents)
    context = {
        "kind": kind,
        "headline": headline_for(kind, len(ordered)),
        "incidents": [incident_context(incident, now) for incident in ordered],
        "alerts_url": absolute(reverse("alerts:index")),
        "subscription_url": absolute(reverse("alerts:subscription")),
        "remind_hours": settings.ALERT_REMIND_HOURS,
        "generated": mail_moment_text(now),
    }
    return RenderedMail(
        subject=subject_for(kind, ordered, now),
        text=render_to_string("alerts/email/notification.txt", context),
        html=render_to_string("alerts/email/notification.html", context),
    )


def _mail_domain() -> str:
    _, address = parseaddr(settings.DEFAULT_FROM_EMAIL)
    domain = address.rpartition("@")[2]
    return clean_header_text(domain, 200).replace(" ", "") or "localhost"


def message_id(notification: Notification) -> str:
    """Stable across retries, so a receiving MTA or client can recognise a re-sent copy."""
    stamp = int(notification.created_at.timestamp())
    return f"<alerts.{notification.pk}.{stamp}@{_mail_domain()}>"


def build_message(notification: Notification) -> EmailMultiAlternatives:
    headers = {
        "Message-ID": message_id(notification),
        "Auto-Submitted": "auto-generated",
        "X-Auto-Response-Suppress": "All",
    }
    language = _language_tag(notification.language)
    if language:
        headers["Content-Language"] = language
    if notification.kind != NotificationKind.OPENED:
        # Thread a resolve mail or a reminder under the mail that announced the incidents.
        earlier = Notification.objects.filter(
            kind=NotificationKind.OPENED,
            incidents__in=notification.incidents.all(),
            state=DeliveryState.SENT,
        ).distinct()
        references = [message_id(opened) for opened in earlier.order_by("created_at")[:20]]
        if references:
            headers["References"] = " ".join(references)
            headers["In-Reply-To"] = references[-1]
    message = EmailMultiAlternatives(
        subject=clean_header_text(notification.subject),
        body=notification.body_text,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=list(notification.recipients),
        headers=headers,
    )
    message.attach_alternative(notification.body_html, "text/html")
    return message


def _language_tag(code: str) -> str:
    """A language code for a header: only one of LANGUAGES (never text from elsewhere)."""
    known = {language for language, _ in settings.LANGUAGES}
    return code if code in known else ""


def iso(moment: datetime | None) -> str | None:
    return iso_utc(moment) if moment is not None else None


def confirmation_message(address: str, username: str, link: str, valid_for: str) -> EmailMessage:
    """The mail that proves `address` is read by the one who asked for alerts there.

    Sent to that address only; it says which account asked, so a stranger can ignore it.
    """
    context = {
        "username": visible(username, 150),
        "address": visible(address, 254),
        "link": link,
        "valid_for": valid_for,
    }
    return EmailMessage(
        subject=clean_header_text(
            gettext("Confirm alert e-mail for %(username)s") % {"username": username}
        ),
        body=render_to_string("alerts/email/subscription_confirm.txt", context),
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[address],
        headers={"Auto-Submitted": "auto-generated", "X-Auto-Response-Suppress": "All"},
    )
