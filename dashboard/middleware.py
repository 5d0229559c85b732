"""Probe endpoints served ahead of the rest of the middleware stack."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone, translation
from django.utils.cache import add_never_cache_headers

from dashboard.health import log_failures, readiness_report, run_readiness_checks
from dashboard.metrics import metrics_access_allowed, metrics_response
from dashboard.preferences import NO_PREFERENCE, load_preference, zone_info


def healthz(request: HttpRequest) -> HttpResponse:
    """The process is up and answering; says nothing about its dependencies."""
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> HttpResponse:
    """Ready to serve: the database answers (503 otherwise). The broker and the lock store
    are checked too and reported as "degraded": pages are served without them.

    The answer names a failing dependency but never says why: the why (hosts, ports, driver
    messages) goes to the log, since this endpoint needs no login.
    """
    checks = run_readiness_checks()
    log_failures(checks)
    ready, body = readiness_report(checks)
    return JsonResponse(body, status=200 if ready else 503)


def metrics(request: HttpRequest) -> HttpResponse:
    if not metrics_access_allowed(request):
        # Production never lets an address in alone (see metrics_access_allowed).
        needed = "a bearer token" if settings.PRODUCTION else "a bearer token or an allowed address"
        return JsonResponse({"error": f"metrics need {needed}"}, status=403)
    return metrics_response(request)


PROBES: dict[str, Callable[[HttpRequest], HttpResponse]] = {
    "/healthz": healthz,
    "/readyz": readyz,
    "/metrics": metrics,
}


class ProbeMiddleware:
    """Answers /healthz, /readyz and /metrics without host checks, HTTPS redirects or login.

    Kubelet probes and Prometheus reach pods by IP address over plain HTTP, which
    ALLOWED_HOSTS and SECURE_SSL_REDIRECT would otherwise refuse or redirect.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        probe = PROBES.get(request.path_info.rstrip("/") or "/")
        if probe is not None and request.method in ("GET", "HEAD"):
            response = probe(request)
            response["Cache-Control"] = "no-store"
            return response
        return self.get_response(request)


API_PREFIX = "/api/"


class NoStoreMiddleware:
    """``Cache-Control: no-store`` on every response to a logged-in user and every API answer.

    Those pages show cluster state and names to whoever is signed in; neither a shared proxy
    nor the browser's disk cache (or its back button after logging out) may keep them.
    Static files are answered by WhiteNoise further out and keep their long cache lifetimes.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        # request.user is read after the view: token-authenticated API calls and a login or
        # logout in this very request are then already reflected.
        if request.path_info.startswith(API_PREFIX) or request.user.is_authenticated:
            add_never_cache_headers(response)
        return response


class PreferenceMiddleware:
    """Applies a signed-in person's saved language and time zone to their request.

    Runs after LocaleMiddleware (which chose from the language cookie, Accept-Language and
    LANGUAGE_CODE) and after authentication: a saved language outranks both. The time zone
    is the saved one, else TIME_ZONE. One query for a signed-in person, none for anonymous
    visitors or the API (its JSON carries UTC timestamps and no prose to translate); the
    probes are answered before this runs. `request.user_preference` keeps the row's values
    for the header (the time zone offer) so no template asks again.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        preference = NO_PREFERENCE
        if not request.path_info.startswith(API_PREFIX) and request.user.is_authenticated:
            preference = load_preference(request.user.pk)
        request.user_preference = preference  # type: ignore[attr-defined]
        if preference.language:
            translation.activate(preference.language)
            request.LANGUAGE_CODE = translation.get_language()  # type: ignore[attr-defined]
        # override, not activate: the zone is per thread and must not outlive this request.
        with timezone.override(zone_info(preference.time_zone)):
            return self.get_response(request)
