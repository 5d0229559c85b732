"""Forms of the alerts pages: the filters, silencing an incident, one's own subscription."""

from __future__ import annotations

from datetime import timedelta

from django import forms

from alerts.models import Rule, Severity

SILENCE_CHOICES = [
    ("1h", "1 hour"),
    ("4h", "4 hours"),
    ("8h", "8 hours"),
    ("1d", "1 day"),
    ("3d", "3 days"),
    ("7d", "1 week"),
]
SILENCE_DURATIONS = {
    "1h": timedelta(hours=1),
    "4h": timedelta(hours=4),
    "8h": timedelta(hours=8),
    "1d": timedelta(days=1),
    "3d": timedelta(days=3),
    "7d": timedelta(days=7),
}


class IncidentFilterForm(forms.Form):
    state = forms.ChoiceField(
        required=False,
        choices=[("", "open, then recently resolved"), ("open", "open"), ("resolved", "resolved")],
    )
    rule = forms.ChoiceField(required=False, choices=[("", "any rule"), *Rule.choices])
    severity = forms.ChoiceField(required=False, choices=[("", "any severity"), *Severity.choices])
    cluster = forms.CharField(required=False, max_length=253)
    q = forms.CharField(required=False, max_length=200)

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
    duration = forms.ChoiceField(choices=SILENCE_CHOICES, initial="4h")
    reason = forms.CharField(
        required=False,
        max_length=500,
        widget=forms.TextInput(attrs={"placeholder": "e.g. planned maintenance"}),
    )

    def duration_delta(self) -> timedelta:
        return SILENCE_DURATIONS[self.cleaned_data["duration"]]


class SubscriptionForm(forms.Form):
    enabled = forms.BooleanField(required=False, label="E-mail me alerts")
    min_severity = forms.ChoiceField(
        choices=[
            (Severity.WARNING.value, "warning and critical"),
            (Severity.CRITICAL.value, "critical only"),
        ],
        label="Which incidents",
    )
    email = forms.EmailField(required=False, label="At this address (your account's e-mail)")

    def clean(self) -> dict[str, object]:
        data = super().clean()
        if data.get("enabled") and not data.get("email"):
            self.add_error("email", "An address is needed to receive alert e-mail.")
        return data
