"""What people do to incidents: acknowledge, silence, and choose their own alert mail.

Each action is one transaction that changes the row with a conditional update (so two
people clicking at once act once) and leaves a timeline entry saying who did it.

Anyone signed in may acknowledge. Silencing mutes a key's mail and chat, also for incidents
that open later, so it is an operator's: a viewer may silence an open incident for at most
ALERT_VIEWER_SILENCE_MAX_HOURS (0: not at all), and only an operator silences a resolved
incident's key (a viewer could otherwise mute the next occurrence before anyone sees it).
"""

from __future__ import annotations

import logging
import smtplib
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core import signing
from django.core.exceptions import PermissionDenied
from django.db import models, transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext, gettext_noop

from alerts.events import clip, incident_event
from alerts.mail import confirmation_message
from alerts.models import (
    AlertSubscription,
    Incident,
    IncidentEvent,
    IncidentState,
    Severity,
    Silence,
)
from dashboard.services import can_change_clusters
from dashboard.timefmt import format_duration, mail_moment_text

logger = logging.getLogger(__name__)

# Two identical silence requests this close together are one click sent twice.
DOUBLE_SUBMIT_WINDOW = timedelta(seconds=30)
SILENCE_MIN = timedelta(minutes=5)
SILENCE_MAX = timedelta(days=30)


class SilenceRefused(PermissionDenied):
    """This person may not set this silence; the message says why, in words."""


def silence_allowance(user: AbstractBaseUser) -> timedelta:
    """The longest silence `user` may set: an operator's is SILENCE_MAX; a viewer's is
    ALERT_VIEWER_SILENCE_MAX_HOURS (zero: a viewer may not silence)."""
    if can_change_clusters(user):
        return SILENCE_MAX
    return min(timedelta(hours=settings.ALERT_VIEWER_SILENCE_MAX_HOURS), SILENCE_MAX)


def silence_refusal(user: AbstractBaseUser, duration: timedelta, *, resolved: bool) -> str | None:
    """Why `user` may not silence for `duration` (a resolved incident's key if `resolved`),
    in words; None when they may. The form and the action ask the same question."""
    if can_change_clusters(user):
        return None
    allowance = silence_allowance(user)
    if allowance <= timedelta(0):
        return gettext("Only operators can silence incidents.")
    if resolved:
        return gettext(
            "Only operators can silence a resolved incident: the silence would also mute "
            "the next incident of the same kind and object."
        )
    if duration > allowance:
        return gettext("Without operator rights a silence lasts at most %(limit)s.") % {
            "limit": format_duration(allowance.total_seconds())
        }
    return None


@transaction.atomic
def acknowledge_incident(incident_id: int, user: AbstractBaseUser) -> bool:
    """Someone is on it: no reminders for this incident. False if open no more or done."""
    return _set_acknowledgement(
        incident_id,
        user,
        acknowledge=True,
        kind=IncidentEvent.Kind.ACKNOWLEDGED,
        text=gettext_noop("acknowledged by %(who)s: no more reminders"),
    )


@transaction.atomic
def unacknowledge_incident(incident_id: int, user: AbstractBaseUser) -> bool:
    """Reminders resume. False if it is not open or nobody had acknowledged it."""
    return _set_acknowledgement(
        incident_id,
        user,
        acknowledge=False,
        kind=IncidentEvent.Kind.UNACKNOWLEDGED,
        text=gettext_noop("%(who)s withdrew the acknowledgement: reminders resume"),
    )


def _set_acknowledgement(
    incident_id: int, user: AbstractBaseUser, *, acknowledge: bool, kind: str, text: str
) -> bool:
    # The state the change starts from is part of the UPDATE's condition: of two people
    # clicking at once, one changes the row and leaves the timeline entry.
    now = timezone.now()
    done = Incident.objects.filter(
        pk=incident_id, state=IncidentState.FIRING, acknowledged_at__isnull=acknowledge
    ).update(
        acknowledged_by=user if acknowledge else None,
        acknowledged_at=now if acknowledge else None,
    )
    if done:
        incident = Incident.objects.get(pk=incident_id)
        incident_event(incident, kind, text, now, user, args={"who": user.get_username()}).save()
    return bool(done)


@transaction.atomic
def silence_incident(
    incident_id: int, user: AbstractBaseUser, duration: timedelta, reason: str = ""
) -> Silence:
    """No mail for the incident's key until now + duration, including future incidents.

    A new silence replaces the key's active one (ends it now), so the page always shows one.
    Raises SilenceRefused when `user` may not set it (see `silence_refusal`).
    """
    now = timezone.now()
    # The row lock orders two silences of one incident, so the check below sees the other's.
    incident = Incident.objects.select_for_update().get(pk=incident_id)
    refusal = silence_refusal(user, duration, resolved=incident.state == IncidentState.RESOLVED)
    if refusal is not None:
        raise SilenceRefused(refusal)
    repeat = (
        Silence.objects.active(now)
        .filter(
            key=incident.key,
            created_by=user,
            reason=clip(reason.strip(), 500),
            created_at__gte=now - DOUBLE_SUBMIT_WINDOW,
        )
        .order_by("-created_at")
        .first()
    )
    if repeat is not None and repeat.ends_at - repeat.starts_at == duration:
        # A double click (or a resent form): the silence it asks for is already in place.
        return repeat
    Silence.objects.active(now).filter(key=incident.key).update(ends_at=now)
    silence = Silence.objects.create(
        key=incident.key,
        starts_at=now,
        ends_at=now + duration,
        reason=clip(reason.strip(), 500),
        created_by=user,
        created_at=now,
    )
    args: dict[str, object] = {
        "who": user.get_username(),
        "duration": duration,
        "until": mail_moment_text(silence.ends_at),
    }
    if silence.reason:
        text = gettext_noop("silenced by %(who)s for %(duration)s (until %(until)s): %(reason)s")
        args["reason"] = silence.reason
    else:
        text = gettext_noop("silenced by %(who)s for %(duration)s (until %(until)s)")
    incident_event(incident, IncidentEvent.Kind.SILENCED, text, now, user, args=args).save()
    return silence


@transaction.atomic
def end_silence(incident_id: int, user: AbstractBaseUser) -> bool:
    now = timezone.now()
    incident = Incident.objects.get(pk=incident_id)
    ended = Silence.objects.active(now).filter(key=incident.key).update(ends_at=now, ended_by=user)
    if ended:
        incident_event(
            incident,
            IncidentEvent.Kind.UNSILENCED,
            gettext_noop("%(who)s ended the silence: mail resumes"),
            now,
            user,
            args={"who": user.get_username()},
        ).save()
    return bool(ended)


# --- Subscriptions ---------------------------------------------------------------------------

# A confirmation link proves its reader reads the address; it names the account and the
# address, is signed with SECRET_KEY (this salt) and is good for this long.
CONFIRM_SALT = "alerts.subscription.confirm"
CONFIRM_MAX_AGE = timedelta(days=2)
CONFIRM_RESEND_AFTER = timedelta(minutes=1)


class Confirmation(models.TextChoices):
    """What became of a subscription's confirmation (a link sent, or one followed)."""

    NOT_NEEDED = "not_needed", "confirmed already, or mail is off"
    SENT = "sent", "a link was sent"
    RECENTLY_SENT = "recently_sent", "a link was sent less than a minute ago"
    SEND_FAILED = "send_failed", "the link could not be sent"
    CONFIRMED = "confirmed", "confirmed"
    INVALID = "invalid", "not a link we sent"
    EXPIRED = "expired", "the link has expired"
    OTHER_ACCOUNT = "other_account", "the link is another account's"
    ADDRESS_CHANGED = "address_changed", "the account's address changed since"


@dataclass(frozen=True, slots=True)
class SubscriptionSaved:
    subscription: AlertSubscription
    confirmation: Confirmation


@transaction.atomic
def update_subscription(
    user: AbstractBaseUser, *, enabled: bool, min_severity: Severity, email: str
) -> AlertSubscription:
    """The user's own alert mail: on or off, from which severity, at which address.

    A new address is not confirmed (`AlertSubscription.confirmed_email` still holds the old
    one), so no alert goes to it until its link is followed.
    """
    if email != user.email:  # type: ignore[attr-defined]
        user.email = email  # type: ignore[attr-defined]
        user.save(update_fields=["email"])
    subscription, _ = AlertSubscription.objects.update_or_create(
        user=user, defaults={"enabled": enabled, "min_severity": min_severity}
    )
    return subscription


def save_subscription(
    user: AbstractBaseUser, *, enabled: bool, min_severity: Severity, email: str
) -> SubscriptionSaved:
    """Save the choice, then mail a confirmation link if alerts are on at an address not
    confirmed yet (after the commit: the link must find the saved address)."""
    subscription = update_subscription(
        user, enabled=enabled, min_severity=min_severity, email=email
    )
    if not enabled or subscription.is_confirmed(email):
        return SubscriptionSaved(subscription, Confirmation.NOT_NEEDED)
    return SubscriptionSaved(subscription, send_confirmation(subscription, email))


def confirmation_link(user: AbstractBaseUser, email: str) -> str:
    token = signing.dumps({"user": user.pk, "email": email}, salt=CONFIRM_SALT)
    path = reverse("alerts:confirm_subscription", args=[token])
    return f"{settings.DASHBOARD_URL}{path}"


def send_confirmation(subscription: AlertSubscription, email: str) -> Confirmation:
    """Mail the link to `email`, at most once a minute per subscription (the form would
    otherwise let anyone flood a stranger's mailbox)."""
    now = timezone.now()
    claimed = (
        AlertSubscription.objects.filter(pk=subscription.pk)
        .filter(
            Q(confirmation_sent_at__isnull=True)
            | Q(confirmation_sent_at__lte=now - CONFIRM_RESEND_AFTER)
        )
        .update(confirmation_sent_at=now)
    )
    if not claimed:
        return Confirmation.RECENTLY_SENT
    user = subscription.user
    message = confirmation_message(
        email,
        user.get_username(),
        confirmation_link(user, email),
        format_duration(CONFIRM_MAX_AGE.total_seconds()),
    )
    try:
        message.send()
    except (OSError, smtplib.SMTPException) as error:
        # The link is a credential: the log names the account, never the link.
        logger.warning("confirmation mail for %r not sent: %s", user.get_username(), error)
        AlertSubscription.objects.filter(pk=subscription.pk).update(confirmation_sent_at=None)
        return Confirmation.SEND_FAILED
    return Confirmation.SENT


@transaction.atomic
def confirm_subscription(user: AbstractBaseUser, token: str) -> Confirmation:
    """Follow a confirmation link: alerts go to its address from now on, if the link is
    ours, recent, this account's, and the account still has that address."""
    try:
        data = signing.loads(token, salt=CONFIRM_SALT, max_age=CONFIRM_MAX_AGE)
    except signing.SignatureExpired:
        return Confirmation.EXPIRED
    except signing.BadSignature:
        return Confirmation.INVALID
    if not isinstance(data, dict) or not isinstance(data.get("email"), str):
        return Confirmation.INVALID
    if data.get("user") != user.pk:
        return Confirmation.OTHER_ACCOUNT
    if not data["email"] or data["email"] != user.email:  # type: ignore[attr-defined]
        return Confirmation.ADDRESS_CHANGED
    AlertSubscription.objects.filter(user=user).update(confirmed_email=data["email"])
    return Confirmation.CONFIRMED
