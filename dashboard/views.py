"""The overview page, the API's identity endpoint and the error pages."""

from __future__ import annotations

import sys

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.template import loader
from django.utils import timezone
from django.utils.functional import SimpleLazyObject
from kombu.exceptions import OperationalError as BrokerError

from dashboard.api import api_view, json_response
from dashboard.htmx import render_page
from dashboard.services import can_change_clusters, worker_status
from leases.presenters.overview import leases_overview
from nks.presenters.overview import nks_overview


def overview(request: HttpRequest) -> HttpResponse:
    workers = worker_status()
    now = timezone.now()
    return render_page(
        request,
        "dashboard/overview.html",
        {
            "workers": workers,
            "any_worker_silent": any(queue["silent"] for queue in workers),
            # Lazy: a refresh of the workers region alone must not run the lease queries.
            "leases": SimpleLazyObject(lambda: leases_overview(now)),
            "nks": SimpleLazyObject(lambda: nks_overview(now)),
        },
    )


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
        status, problem = 503, "The database is unreachable, so no data can be shown right now."
    elif isinstance(exc, BrokerError):
        status, problem = 503, "The task broker is unreachable, so the action could not be queued."
    else:
        status, problem = 500, "Something went wrong on our side. The error has been logged."
    if request.path.startswith("/api/"):
        return json_response({"error": problem}, status=status)
    body = loader.get_template("errors/error.html").render({"status": status, "problem": problem})
    return HttpResponse(body, status=status)
