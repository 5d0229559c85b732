"""Probe endpoints served ahead of the rest of the middleware stack."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import CONTENT_TYPE_LATEST

from dashboard.health import run_readiness_checks
from dashboard.metrics import metrics_access_allowed, render_metrics


def healthz(request: HttpRequest) -> HttpResponse:
    """The process is up and answering; says nothing about its dependencies."""
    return JsonResponse({"status": "ok"})


def readyz(request: HttpRequest) -> HttpResponse:
    """Ready to serve: the database, the broker and the lock store all answer."""
    checks = run_readiness_checks()
    ready = all(check.ok for check in checks)
    body = {
        "status": "ok" if ready else "unavailable",
        "checks": {
            check.name: {
                "ok": check.ok,
                "detail": check.detail,
                "ms": round(check.seconds * 1000, 1),
            }
            for check in checks
        },
    }
    if not ready:
        body["reason"] = "; ".join(check.detail for check in checks if not check.ok)
    return JsonResponse(body, status=200 if ready else 503)


def metrics(request: HttpRequest) -> HttpResponse:
    if not metrics_access_allowed(request):
        return JsonResponse(
            {"error": "metrics need a bearer token or an allowed address"}, status=403
        )
    return HttpResponse(render_metrics(), content_type=CONTENT_TYPE_LATEST)


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
