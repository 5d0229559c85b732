"""The Leases filter: URL parameters shared by the Leases page and the JSON API."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from django import forms
from django.core.validators import MaxLengthValidator
from django.http import QueryDict
from django.utils.choices import CallableChoiceIterator
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from dashboard.natural import natural_key
from leases.cursors import (
    DEFAULT_SORT,
    SORT_CHOICES,
    SORT_KEYS,
    Cursor,
    CursorError,
    decode_cursor,
)
from leases.models import KubeCluster, LeaseClass, LeaseLibrary, LeaseState
from leases.queries import LeaseFilters

# Strict on purpose: a script that sends `deleted=yes` should hear it was not understood
# rather than silently get the default.
YES_NO = [("", _("default")), ("true", _("yes")), ("false", _("no"))]


def cluster_choices() -> list[tuple[str, str]]:
    """Every cluster by name, in natural order (prod-2 before prod-10). Called when the
    filter bar is drawn, never for the API."""
    names = sorted(KubeCluster.objects.values_list("name", flat=True), key=natural_key)
    return [("", gettext("any cluster")), *((name, name) for name in names)]


class LeaseFilterForm(forms.Form):
    """Its selects render themselves (``{{ form.state }}``) with ids ``f-<field>``.

    `default_sort` is the order of a URL without `sort`: the Leases page's problems first
    unless the reader asks for another (API_DEFAULT_SORT, whose values never change).
    """

    # Text offered as a select: an unknown cluster matches no lease, it is not an error.
    # A length validator, not max_length, which would also write maxlength= on the <select>.
    cluster = forms.CharField(
        required=False,
        label=_("Cluster"),
        validators=[MaxLengthValidator(63)],
        widget=forms.Select(choices=CallableChoiceIterator(cluster_choices)),
    )
    namespace = forms.CharField(required=False, max_length=253)
    lease_class = forms.ChoiceField(
        required=False, label=_("Class"), choices=[("", _("any class")), *LeaseClass.choices]
    )
    state = forms.ChoiceField(
        required=False, label=_("State"), choices=[("", _("any state")), *LeaseState.choices]
    )
    library = forms.ChoiceField(
        required=False,
        label=_("Library"),
        choices=[("", _("any library")), *LeaseLibrary.choices],
    )
    q = forms.CharField(required=False, max_length=253)
    flapping = forms.ChoiceField(required=False, choices=YES_NO)
    deleted = forms.ChoiceField(required=False, choices=YES_NO)
    sort = forms.ChoiceField(required=False, choices=SORT_CHOICES)
    after = forms.CharField(required=False, max_length=2048)
    before = forms.CharField(required=False, max_length=2048)

    def __init__(self, *args: Any, default_sort: str = DEFAULT_SORT, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", "f-%s")
        super().__init__(*args, **kwargs)
        self.default_sort = default_sort
        # The URL parameter is `class`, what engineers type; a Python keyword can only be
        # a field name this way.
        self.fields["class"] = self.fields.pop("lease_class")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        after, before = cleaned.get("after"), cleaned.get("before")
        if after and before:
            raise forms.ValidationError(gettext("Give either `after` or `before`, not both."))
        token = after or before
        if token and "sort" not in self.errors:
            sort = SORT_KEYS[(cleaned.get("sort") or self.default_sort).removeprefix("-")]
            try:
                values = decode_cursor(token, sort)
            except CursorError as exc:
                self.add_error(
                    "after" if after else "before",
                    gettext("This page link is invalid: %(reason)s") % {"reason": exc},
                )
            else:
                cleaned["cursor"] = Cursor("after" if after else "before", values)
        return cleaned

    def filters(self) -> LeaseFilters:
        """The valid part of the query: a bad parameter is reported, the rest still applies."""
        data = self.cleaned_data if hasattr(self, "cleaned_data") else {}
        return LeaseFilters(
            cluster=data.get("cluster") or "",
            namespace=data.get("namespace") or "",
            lease_class=data.get("class") or "",
            state=data.get("state") or "",
            library=data.get("library") or "",
            q=(data.get("q") or "").strip(),
            flapping=data.get("flapping") == "true",
            include_deleted=data.get("deleted") == "true",
            sort=data.get("sort") or self.default_sort,
            default_order=self.default_sort,
        )

    def cursor(self) -> Cursor | None:
        data = self.cleaned_data if hasattr(self, "cleaned_data") else {}
        return data.get("cursor")


def read_filters(query: QueryDict) -> tuple[LeaseFilters, Cursor | None]:
    """What `LeaseFilterForm` makes of a Leases URL: its valid filters and page cursor.

    A region refresh asks the same question every few seconds, and the form's answer depends
    on the URL alone, so each process keeps the answers to the last few hundred URLs. A
    cursor that names a row ("i.<id>") reads that row's current values: never kept.
    """
    token = query.get("after") or query.get("before") or ""
    if token.startswith("i."):
        return _read_filters(query)
    return _read_filters_kept(query.urlencode())


def _read_filters(query: QueryDict) -> tuple[LeaseFilters, Cursor | None]:
    form = LeaseFilterForm(query)
    form.is_valid()  # invalid parameters are left out; the valid ones still apply
    return form.filters(), form.cursor()


@lru_cache(maxsize=512)
def _read_filters_kept(query: str) -> tuple[LeaseFilters, Cursor | None]:
    return _read_filters(QueryDict(query))
