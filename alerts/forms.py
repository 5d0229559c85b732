"""Forms of the alerts pages: the filters, silencing an incident, one's own subscription."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from django import forms
from django.core.validators import MaxLengthValidator
from django.utils.choices import CallableChoiceIterator
from django.utils.translation import gettext, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from alerts.incident_actions import SILENCE_MAX, SILENCE_MIN, silence_refusal
from alerts.models import Incident, IncidentState, Rule, Severity

# The one-click choices, offered as buttons on the list and the incident page. Nothing is
# preselected: the engineer picks how long, or types a custom duration.
SILENCE_PRESETS = [
    ("1h", _("1 hour"), timedelta(hours=1)),
    ("4h", _("4 hours"), timedelta(hours=4)),
    ("1d", _("1 day"), timedelta(days=1)),
]
SILENCE_DURATIONS = {value: delta for value, _label, delta in SILENCE_PRESETS}
_CUSTOM = re.compile(r"^\s*(\d{1,5})\s*([mhd])\s*$", re.IGNORECASE)
_UNITS = {"m": timedelta(minutes=1), "h": timedelta(hours=1), "d": timedelta(days=1)}


def parse_silence_duration(text: str) -> timedelta | None:
    """A preset ("4h") or a custom "<number><m|h|d>" such as "90m" or "2d"; None otherwise."""
    if text in SILENCE_DURATIONS:
        return SILENCE_DURATIONS[text]
    match = _CUSTOM.match(text)
    if match is None:
        return None
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def cluster_choices() -> list[tuple[str, str]]:
    """Clusters that incidents were shown for. Called when the filter bar is drawn."""
    shown = Incident.objects.exclude(cluster="").exclude(state=IncidentState.PENDING)
    names = sorted(set(shown.values_list("cluster", flat=True).distinct()))
    return [("", gettext("any cluster")), *((name, name) for name in names)]


class IncidentFilterForm(forms.Form):
    """Its selects render themselves (``{{ form.rule }}``) with ids ``f-<field>``."""

    state = forms.ChoiceField(
        required=False,
        label=_("Show"),
        choices=[
            ("", _("open, then recently resolved")),
            ("open", pgettext_lazy("incidents", "open")),
            ("resolved", pgettext_lazy("incidents", "resolved")),
        ],
    )
    rule = forms.ChoiceField(
        required=False, label=_("Rule"), choices=[("", _("any rule")), *Rule.choices]
    )
    severity = forms.ChoiceField(
        required=False,
        label=_("Severity"),
        choices=[("", _("any severity")), *Severity.choices],
    )
    # Text offered as a select: a cluster with no incident yet matches none, it is no error.
    # A length validator, not max_length, which would also write maxlength= on the <select>.
    cluster = forms.CharField(
        required=False,
        label=_("Cluster"),
        validators=[MaxLengthValidator(253)],
        widget=forms.Select(choices=CallableChoiceIterator(cluster_choices)),
    )
    q = forms.CharField(required=False, max_length=200)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", "f-%s")
        super().__init__(*args, **kwargs)

    def filters(self) -> dict[str, str]:
        """The valid part of the query: a bad parameter is reported, the rest still applies."""
        data = self.cleaned_data if hasattr(self, "cleaned_data") else {}
        return {
            "state": data.get("state") or "",
            "rule": data.get("rule") or "",
            "severity": data.get("severity") or "",
            "cluster": data.get("cluster") or "",
            "q": (data.get("q") or "").strip(),
        }


class SilenceForm(forms.Form):
    """`duration` comes from a preset button or the custom field (same name), never a default.

    `user` is who silences: a viewer's silence is capped (`silence_allowance`).
    """

    duration = forms.CharField(label=_("Custom duration"), max_length=20)
    reason = forms.CharField(required=False, label=_("Reason"), max_length=500)

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user = user

    def clean_duration(self) -> timedelta:
        delta = parse_silence_duration(self.cleaned_data["duration"])
        if delta is None:
            raise forms.ValidationError(
                gettext("Give a duration such as 30m, 2h or 3d."), code="invalid"
            )
        if not SILENCE_MIN <= delta <= SILENCE_MAX:
            raise forms.ValidationError(
                gettext("A silence lasts from 5 minutes to 30 days."), code="range"
            )
        # Whether the incident is resolved is the action's to check, under its row lock.
        refusal = silence_refusal(self.user, delta, resolved=False)
        if refusal is not None:
            raise forms.ValidationError(refusal, code="not_allowed")
        return delta

    def duration_delta(self) -> timedelta:
        duration: timedelta = self.cleaned_data["duration"]
        return duration


class SubscriptionForm(forms.Form):
    enabled = forms.BooleanField(required=False, label=_("E-mail me alerts"))
    min_severity = forms.ChoiceField(
        choices=[
            (Severity.WARNING.value, _("warning and critical")),
            (Severity.CRITICAL.value, _("critical only")),
        ],
        label=_("Which incidents"),
    )
    # A text input, as before: the server checks the address and says what is wrong with it.
    email = forms.EmailField(
        required=False,
        label=_("At this address (your account's e-mail)"),
        widget=forms.TextInput(attrs={"autocomplete": "email", "inputmode": "email"}),
    )

    def clean(self) -> dict[str, object]:
        data = super().clean()
        if data.get("enabled") and not data.get("email"):
            self.add_error("email", gettext("An address is needed to receive alert e-mail."))
        return data
