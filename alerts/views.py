"""Alerts pages: incidents (open first), one incident with its timeline, actions, one's mail."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.conf import settings
from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.functional import SimpleLazyObject
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext, gettext_lazy

from alerts import incident_actions
from alerts.forms import IncidentFilterForm, SilenceForm, SubscriptionForm
from alerts.incident_actions import Confirmation
from alerts.models import Severity
from alerts.presenters.incident_detail import incident_detail
from alerts.presenters.incident_list import incident_tables
from alerts.queries import IncidentFilters, incident_exists, subscription_of
from dashboard.htmx import render_page
from leases.presenters.watchers import stale_sources

ActionView = Callable[[HttpRequest, int], HttpResponse]


# Where focus goes on the next render of the page an action came back to: the row it was
# taken on (list) or the incident's actions. Kept in the session for one render, because the
# redirect's fragment never reaches the server and htmx does not follow fragments.
FOCUS_KEY = "alerts_focus"


def _focus(request: HttpRequest) -> str:
    return str(request.session.pop(FOCUS_KEY, ""))


def incident_list(request: HttpRequest) -> HttpResponse:
    form = IncidentFilterForm(request.GET)
    form.is_valid()  # invalid parameters are shown as errors; the valid ones still apply
    filters = IncidentFilters(**form.filters())
    return render_page(
        request,
        "alerts/incident_list.html",
        {
            "form": form,
            "filters": filters,
            # Lazy: the stale-data region's refresh must not read the incidents.
            "tables": SimpleLazyObject(lambda: incident_tables(filters, timezone.now())),
            # Above the incidents: a stale cluster's incidents neither open nor resolve.
            "stale_sources": SimpleLazyObject(lambda: stale_sources(timezone.now())),
            "focus": _focus(request),
        },
    )


def incident_page(request: HttpRequest, incident_id: int) -> HttpResponse:
    detail = incident_detail(incident_id, timezone.now())
    if detail is None:
        raise Http404(gettext("No such incident"))
    return render_page(
        request,
        "alerts/incident_detail.html",
        {"detail": detail, "focus": _focus(request)},
    )


def _back(request: HttpRequest, incident_id: int) -> HttpResponse:
    """See other: the page the action came from (its `next`, fragment included, so the browser
    lands on the row or the actions), or the incident."""
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        target = reverse("alerts:incident", args=[incident_id])
    _, _, fragment = target.partition("#")
    request.session[FOCUS_KEY] = fragment or "incident-actions"
    response = HttpResponseRedirect(target)
    response.status_code = 303
    return response


def _action(view: ActionView) -> ActionView:
    """POST acts. Any other method (a reload, a bookmarked or pasted action URL) is sent to
    the incident instead of a 405 page: there is nothing to do, but somewhere to be."""

    @wraps(view)
    def wrapper(request: HttpRequest, incident_id: int) -> HttpResponse:
        if request.method != "POST":
            _require_incident(incident_id)
            return HttpResponseRedirect(
                reverse("alerts:incident", args=[incident_id]) + "#incident-actions"
            )
        _require_incident(incident_id)
        return view(request, incident_id)

    return wrapper


def _tell(request: HttpRequest, level: int, text: str) -> None:
    # A full page shows it in base.html's role="status" list; an htmx swap puts it into the
    # page's own status region, out of band (the region it swaps is read, not announced).
    messages.add_message(request, level, text)


def _require_incident(incident_id: int) -> None:
    if not incident_exists(incident_id):
        raise Http404(gettext("No such incident"))


@_action
def acknowledge(request: HttpRequest, incident_id: int) -> HttpResponse:
    if incident_actions.acknowledge_incident(incident_id, request.user):
        _tell(
            request,
            messages.SUCCESS,
            gettext("Acknowledged: no more reminders for this incident."),
        )
    else:
        _tell(request, messages.INFO, gettext("Already acknowledged, or no longer open."))
    return _back(request, incident_id)


@_action
def unacknowledge(request: HttpRequest, incident_id: int) -> HttpResponse:
    if incident_actions.unacknowledge_incident(incident_id, request.user):
        _tell(request, messages.SUCCESS, gettext("Acknowledgement withdrawn: reminders resume."))
    return _back(request, incident_id)


@_action
def silence(request: HttpRequest, incident_id: int) -> HttpResponse:
    form = SilenceForm(request.POST, user=request.user)
    if not form.is_valid():
        errors = form.errors.get("duration") or [gettext("Choose how long to silence it for.")]
        _tell(request, messages.ERROR, " ".join(str(error) for error in errors))
        return _back(request, incident_id)
    try:
        ends = incident_actions.silence_incident(
            incident_id, request.user, form.duration_delta(), form.cleaned_data["reason"]
        ).ends_at
    except incident_actions.SilenceRefused as refused:
        _tell(request, messages.ERROR, str(refused))
        return _back(request, incident_id)
    _tell(
        request,
        messages.SUCCESS,
        gettext(
            "Silenced until %(until)s: no mail about it, nor about new incidents of the same "
            "kind and object, until then."
        )
        % {"until": f"{timezone.localtime(ends):%Y-%m-%d %H:%M %Z}"},
    )
    return _back(request, incident_id)


@_action
def unsilence(request: HttpRequest, incident_id: int) -> HttpResponse:
    if incident_actions.end_silence(incident_id, request.user):
        _tell(request, messages.SUCCESS, gettext("Silence ended: mail about it resumes."))
    return _back(request, incident_id)


def subscription(request: HttpRequest) -> HttpResponse:
    current = subscription_of(request.user)
    if request.method == "POST":
        form = SubscriptionForm(request.POST)
        if form.is_valid():
            saved = incident_actions.save_subscription(
                request.user,
                enabled=form.cleaned_data["enabled"],
                min_severity=Severity(form.cleaned_data["min_severity"]),
                email=form.cleaned_data["email"],
            )
            messages.success(request, gettext("Your alert e-mail settings are saved."))
            _tell_confirmation(request, saved.confirmation, form.cleaned_data["email"])
            response = HttpResponseRedirect(reverse("alerts:subscription"))
            response.status_code = 303
            return response
    else:
        form = SubscriptionForm(
            initial={
                "enabled": current.enabled if current else False,
                "min_severity": current.min_severity if current else Severity.WARNING,
                "email": request.user.email,  # type: ignore[union-attr]
            }
        )
    return render(
        request,
        "alerts/subscription.html",
        {
            "form": form,
            "subscription": current,
            "confirmed": current is not None and current.is_confirmed(request.user.email),  # type: ignore[union-attr]
            "team_addresses": settings.ALERT_EMAIL_TO,
        },
    )


def _tell_confirmation(request: HttpRequest, outcome: Confirmation, address: str) -> None:
    if outcome == Confirmation.SENT:
        text = gettext(
            "We sent a confirmation link to %(address)s. Alert e-mail goes there once you open it."
        )
        messages.info(request, text % {"address": address})
    elif outcome == Confirmation.RECENTLY_SENT:
        messages.info(
            request,
            gettext("A confirmation link was sent less than a minute ago: look for it first."),
        )
    elif outcome == Confirmation.SEND_FAILED:
        messages.error(
            request,
            gettext("The confirmation link could not be sent just now. Save again in a minute."),
        )


CONFIRMATION_REFUSED = {
    Confirmation.INVALID: gettext_lazy("This is not a confirmation link the dashboard sent."),
    Confirmation.EXPIRED: gettext_lazy(
        "This confirmation link has expired: save your alert "
        "e-mail settings again to be sent a new one."
    ),
    Confirmation.OTHER_ACCOUNT: gettext_lazy("This confirmation link is for another account."),
    Confirmation.ADDRESS_CHANGED: gettext_lazy(
        "Your account's address changed after this link was sent: it confirms nothing now."
    ),
}


def confirm_subscription(request: HttpRequest, token: str) -> HttpResponse:
    """GET asks, POST confirms: a mail scanner that opens every link confirms nothing."""
    if request.method == "POST":
        outcome = incident_actions.confirm_subscription(request.user, token)
        if outcome == Confirmation.CONFIRMED:
            messages.success(
                request,
                gettext("Address confirmed: alert e-mail goes to %(address)s.")
                % {"address": request.user.email},  # type: ignore[union-attr]
            )
            response = HttpResponseRedirect(reverse("alerts:subscription"))
            response.status_code = 303
            return response
        return render(
            request,
            "alerts/subscription_confirm.html",
            {"refused": CONFIRMATION_REFUSED[outcome], "token": token},
            status=400,
        )
    return render(request, "alerts/subscription_confirm.html", {"refused": "", "token": token})
