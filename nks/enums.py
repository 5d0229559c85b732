"""NKS's enumerated values, classified: one definition shared by the client and the models.

The client (which knows no Django) classifies NKS's raw strings into these; the models store
the same members (``Freshness.choices`` for a field's ``choices=``), so a value read from NKS
and a value read from the database are the same class. The raw strings are always kept next
to them: the guide's enums are incomplete (it documents FRESH/STALE/ROTTEN and its own
examples answer "HEALTHY").
"""

from __future__ import annotations

import enum
from typing import Self

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _


class _ChoicesType(enum.EnumType):
    """Gives an enum Django's ``choices`` shape without importing Django (as TextChoices does)."""

    @property
    def choices(cls) -> list[tuple[str, str | Promise]]:
        return [(member.value, member.label) for member in cls]  # type: ignore[attr-defined]


class LabelledEnum(enum.StrEnum, metaclass=_ChoicesType):
    """A string enum whose members are written ``NAME = "VALUE", "label"``, like TextChoices."""

    label: str | Promise

    def __new__(cls, value: str, label: str | Promise) -> Self:
        member = str.__new__(cls, value)
        member._value_ = value
        member.label = label
        return member

    # A Django template calls what is callable; an enum class must stay a value there.
    do_not_call_in_templates = enum.nonmember(True)

    @classmethod
    def classify(cls, raw: str | None) -> Self:
        """The member for NKS's raw string (any case, spaces around), or UNKNOWN."""
        if raw is None:
            return cls("UNKNOWN")
        try:
            return cls(raw.strip().upper())
        except ValueError:
            return cls("UNKNOWN")


class Freshness(LabelledEnum):
    """How much a cluster's health data can be trusted (NKS's ``health_status``).

    Anything but FRESH means "do not trust the rest". "HEALTHY" (the guide's own examples) is
    deliberately UNKNOWN, not FRESH: it says nothing about how old the data is, and silence
    must never be shown as health.
    """

    # Labels stay NKS's own words (FRESH/STALE/ROTTEN are API terms, never translated).
    FRESH = "FRESH", "fresh"
    STALE = "STALE", "stale"
    ROTTEN = "ROTTEN", "rotten"
    UNKNOWN = "UNKNOWN", "unknown"


class EventState(LabelledEnum):
    """State of an NKS operation (an entry of a cluster's ``/events``)."""

    SUCCESS = "SUCCESS", _("success")
    FAIL = "FAIL", _("failed")
    IN_PROGRESS = "IN_PROGRESS", _("in progress")
    UNKNOWN = "UNKNOWN", _("unknown")


class OperationPhase(LabelledEnum):
    """Phase of a Heat-style ``status`` such as ``UPDATE_IN_PROGRESS`` or ``CREATE_FAILED``.

    The one reading of a cluster's or nodegroup's ``status``: pages, the poller and the client
    all classify through :meth:`classify`.
    """

    IN_PROGRESS = "IN_PROGRESS", _("in progress")
    COMPLETE = "COMPLETE", _("complete")
    FAILED = "FAILED", _("failed")
    UNKNOWN = "UNKNOWN", _("unknown")

    @classmethod
    def classify(cls, raw: str | None) -> Self:
        if not raw:
            return cls("UNKNOWN")
        status = raw.strip().upper()
        if status.endswith("_IN_PROGRESS"):
            return cls("IN_PROGRESS")
        if status.endswith("_COMPLETE"):
            return cls("COMPLETE")
        if status.endswith("_FAILED"):
            return cls("FAILED")
        return cls("UNKNOWN")
