"""The overview page, a person's preferences, the API's identity endpoint and the error pages."""

from __future__ import annotations

import functools
import sys

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.template import loader
from django.utils import timezone, translation
from django.utils.functional import SimpleLazyObject
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext
from django.views import i18n
from django.views.decorators.http import require_http_methods
from kombu.exceptions import OperationalError as BrokerError

from alerts.views import FOCUS_KEY
from dashboard.api import api_view, json_response
from dashboard.forms import PreferencesForm, TimeZoneOfferForm
from dashboard.htmx import render_page
from dashboard.preferences import (
    answer_time_zone_offer,
    language_codes,
    load_preference,
    save_language,
    save_preferences,
)
from dashboard.presenters import firing_incidents, unhealthy_nodegroups
from dashboard.services import can_change_clusters, worker_status
from leases.presenters.overview import lease_problems, leases_overview
from leases.presenters.watchers import ClusterStatus, cluster_statuses
from nks.presenters.overview import nks_overview


def overview(request: HttpRequest) -> HttpResponse:
    """Top-first: what is firing, leases in trouble, unhealthy NKS, then the summaries."""
    workers = worker_status()
    now = timezone.now()

    # Three regions judge the same watchers: read once per render, and only if one is shown.
    @functools.cache
    def statuses() -> list[ClusterStatus]:
        return cluster_statuses(now)

    return render_page(
        request,
        "dashboard/overview.html",
        {
            "workers": workers,
            "any_worker_silent": any(queue["silent"] for queue in workers),
            # Lazy: a refresh of one region must not run the queries of the others.
            "stale_sources": SimpleLazyObject(
                lambda: [status for status in statuses() if status.problem]
            ),
            "firing": SimpleLazyObject(lambda: firing_incidents(now)),
            "problems": SimpleLazyObject(lambda: lease_problems(now, statuses())),
            "leases": SimpleLazyObject(lambda: leases_overview(now, statuses())),
            "nks": SimpleLazyObject(lambda: nks_overview(now)),
            "nodegroups": SimpleLazyObject(lambda: unhealthy_nodegroups(now)),
            # An acknowledge or silence taken here comes back focused on its incident
            # (alerts.views._back keeps the row's anchor for one render). Lazy, so only the
            # region that shows the incidents takes it.
            "focus": SimpleLazyObject(lambda: str(request.session.pop(FOCUS_KEY, ""))),
        },
    )


@login_not_required
@require_http_methods(["GET", "HEAD", "POST"])
def set_language(request: HttpRequest) -> HttpResponse:
    """The header's language switch: Django's cookie for everyone, and for a signed-in
    person also their saved choice, so it follows them to other browsers and to alert mail.

    GET (a reload, the address bar) changes nothing: Django's view only redirects back.
    """
    response = i18n.set_language(request)
    language = request.POST.get("language", "")
    if request.method == "POST" and request.user.is_authenticated and language in language_codes():
        save_language(request.user, language)
    return response


def _remember_language_cookie(response: HttpResponse, language: str) -> None:
    # The cookie outranks Accept-Language for this browser: it must agree with the choice
    # saved on the preferences page, or the login page would still use an older one.
    if language:
        response.set_cookie(
            settings.LANGUAGE_COOKIE_NAME,
            language,
            max_age=settings.LANGUAGE_COOKIE_AGE,
            path=settings.LANGUAGE_COOKIE_PATH,
            secure=settings.LANGUAGE_COOKIE_SECURE,
            httponly=settings.LANGUAGE_COOKIE_HTTPONLY,
            samesite=settings.LANGUAGE_COOKIE_SAMESITE,
        )
    else:
        response.delete_cookie(settings.LANGUAGE_COOKIE_NAME, path=settings.LANGUAGE_COOKIE_PATH)


def preferences(request: HttpRequest) -> HttpResponse:
    """Language and time zone, saved for the signed-in person (post/redirect/get)."""
    if request.method == "POST":
        form = PreferencesForm(request.POST)
        if form.is_valid():
            language = form.cleaned_data["language"]
            save_preferences(
                request.user, language=language, time_zone=form.cleaned_data["time_zone"]
            )
            # Said in the language just chosen: the next page is shown in it.
            with translation.override(language or translation.get_language()):
                messages.success(request, gettext("Preferences saved."))
            response = redirect("preferences")
            _remember_language_cookie(response, language)
            return response
        status = 400
    else:
        saved = load_preference(request.user.pk)
        form = PreferencesForm(initial={"language": saved.language, "time_zone": saved.time_zone})
        status = 200
    return render(
        request,
        "dashboard/preferences.html",
        {"form": form, "active_zone": timezone.get_current_timezone_name()},
        status=status,
    )


@require_http_methods(["GET", "HEAD", "POST"])
def time_zone_offer(request: HttpRequest) -> HttpResponse:
    """The answer to the banner offering the browser's zone; either answer ends the offer.

    GET (a reload, the address bar) answers nothing and lands on the preferences page.
    """
    if request.method != "POST":
        return redirect("preferences")
    form = TimeZoneOfferForm(request.POST)
    if form.is_valid():
        use = form.cleaned_data["answer"] == "use"
        answer_time_zone_offer(request.user, form.cleaned_data["time_zone"] if use else None)
    else:
        # Only a hand-made request gets here: the banner always sends a valid answer.
        messages.error(request, gettext("The time zone was not saved: the answer was not valid."))
    next_url = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        next_url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        next_url = "/"
    return HttpResponseRedirect(next_url)


class LogoutView(auth_views.LogoutView):
    """Django's sign-out (a POST from the header), which also answers GET: the URL reloaded or
    typed lands on the overview (or, signed out, the login page) instead of a 405. A GET
    signs nobody out: a link or image on another site could send one."""

    http_method_names = ["get", "head", "post", "options"]

    def get(self, request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        return redirect("overview")


@api_view()
def api_me(request: HttpRequest) -> HttpResponse:
    user = request.user
    return json_response(
        {"username": user.get_username(), "can_change_clusters": can_change_clusters(user)}
    )


def server_error(request: HttpRequest) -> HttpResponse:
    """A 500 page that never touches the database, and a 503 when a dependency is down.

    Django calls this inside the `except` block of the failed request, so the exception is
    still in `sys.exc_info()`. The template has no context processors: when the database is
    down, even reading `request.user` would fail again.
    """
    exc = sys.exc_info()[1]
    # Only a failed or lost connection means the database is down. A DataError or an
    # IntegrityError is a value the database refused: a bug of ours (or input we should
    # have refused), and a 503 would send the on-call engineer to a healthy database.
    if isinstance(exc, OperationalError | InterfaceError):
        status = 503
        problem = gettext("The database is unreachable, so no data can be shown right now.")
    elif isinstance(exc, BrokerError):
        status = 503
        problem = gettext("The task broker is unreachable, so the action could not be queued.")
    else:
        status = 500
        problem = gettext("Something went wrong on our side. The error has been logged.")
    if request.path.startswith("/api/"):
        return json_response({"error": problem}, status=status)
    body = loader.get_template("errors/error.html").render({"status": status, "problem": problem})
    return HttpResponse(body, status=status)
