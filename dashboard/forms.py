"""Forms of the dashboard app: a person's language and time zone, and the write-only secret
field the admin forms of NKS accounts and alert channels share."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from dashboard.preferences import time_zone_choices


def write_only_secret(
    help_text: str | Promise, label: str | Promise | None = None, autocomplete: str = "off"
) -> forms.CharField:
    """A secret an admin may set or replace but never read back: the widget never renders a
    value (render_value=False), and the form keeps the stored one when it is left blank."""
    return forms.CharField(
        label=label,
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": autocomplete}),
        help_text=help_text,
    )


class PreferencesForm(forms.Form):
    """The preferences page. Blank means "not chosen": the browser's language, TIME_ZONE."""

    language = forms.ChoiceField(
        label=_("Language"),
        required=False,
        help_text=_("Without a choice, the language your browser asks for is used."),
    )
    time_zone = forms.ChoiceField(
        label=_("Time zone"),
        required=False,
        help_text=_(
            "Pages and alert e-mails show times in this zone;"
            " the exact UTC time stays in the tooltip."
        ),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Language names stay in their own language (English, 한국어): a reader who cannot
        # read the current page still finds theirs.
        self.fields["language"].choices = [
            ("", _("Your browser's language")),
            *settings.LANGUAGES,
        ]
        self.fields["time_zone"].choices = [
            ("", _("Server default (%(zone)s)") % {"zone": settings.TIME_ZONE}),
            *time_zone_choices(),
        ]


class TimeZoneOfferForm(forms.Form):
    """The answer to the banner offering the browser's zone."""

    answer = forms.ChoiceField(choices=[("use", "use"), ("keep", "keep")])
    time_zone = forms.ChoiceField(required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["time_zone"].choices = [("", ""), *time_zone_choices()]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("answer") == "use" and not cleaned.get("time_zone"):
            raise forms.ValidationError("use needs a time_zone", code="required")
        return cleaned
