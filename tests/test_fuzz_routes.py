"""Every GET route, fed hostile path and query values, answers without a server error.

The routes come from the URLconf, so a new one is fuzzed as soon as it exists. Path
parameters get real objects (made here, so each route reaches its database lookups) and,
one at a time, hostile values. Query parameters are the ones the views read: the names in
`request.GET` lookups and the fields of forms bound to `request.GET`, found in the source of
the code each view runs (its function or classes, and the functions of their modules they
call). Page views also get odd htmx targets. Pages are asked for as a signed-in operator and,
on the JSON API, also with a bearer token.

Any 5xx fails, 503 included: the database is up for this test, so a 503 would be a value the
database refused being reported as an outage. Admin is Django's: only its changelists of our
models are asked, with the search, ordering and page parameters, and its change pages with
odd object ids. Value lists are fixed and short, so a run is deterministic and takes seconds.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from django import forms
from django.contrib import admin
from django.contrib.auth.models import Group
from django.core import signing
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.urls.resolvers import RoutePattern

from alerts.incident_actions import CONFIRM_SALT
from alerts.models import Incident
from dashboard.models import ApiToken
from nks.models import NksNodegroup, ResizeRequest
from tests.alerts.factories import make_account, make_incident, make_nks_cluster, make_nodegroup
from tests.alerts.factories import make_resize as make_resize_request
from tests.leases.factories import make_cluster, make_lease, make_transition
from tests.leases.group_factories import make_slot
from tests.nks.nodes import make_node

pytestmark = pytest.mark.django_db

# Each kind of hostile value once: NUL, odd Unicode (superscript and mathematical digits,
# right-to-left marks), numbers beyond every integer column, negative, empty, very long, and
# strings with meaning in URLs, templates and page cursors.
HOSTILE_VALUES = (
    "\x00",
    "a\x00b",
    "ß²𝟘",
    "\u200f\u202eevil",
    str(2**63),
    "-1",
    str(10**30),
    "",
    "x" * 5000,
    "..",
    "%",
    "</script>",
    "i.²",
)
# Path segments cannot be empty or contain "/", and int segments only take digits: the
# resolver answers 404 for the rest, which is fine but costs time, so only these are tried.
HOSTILE_SEGMENTS = (*(value for value in HOSTILE_VALUES if value), "~zz")
HOSTILE_INTS = ("0", str(2**63), str(10**30), str(2**64 + 1))
# Read by code that is not the view's own (login redirects, Django's auth views).
ALWAYS_FUZZED = ("next",)
ADMIN_PARAMETERS = ("q", "o", "p")
OUR_APPS = frozenset({"dashboard", "leases", "nks", "alerts"})


@dataclass(frozen=True, slots=True)
class Route:
    name: str
    route: str
    converters: dict[str, str]
    callback: Any

    @property
    def is_api(self) -> bool:
        return self.route.startswith("api/")


def routes() -> list[Route]:
    """Every route of our URLconf except admin's, with its converters by parameter name."""
    found: list[Route] = []

    def walk(patterns: list[Any], prefix: str, namespace: str) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                if pattern.app_name == "admin":
                    continue
                inner = f"{namespace}:{pattern.namespace}" if pattern.namespace else namespace
                walk(pattern.url_patterns, prefix + str(pattern.pattern), inner.strip(":"))
            elif isinstance(pattern, URLPattern):
                assert isinstance(pattern.pattern, RoutePattern), (
                    f"{pattern} is a regex route: teach this test to fill it"
                )
                route = prefix + str(pattern.pattern)
                converters = {
                    name: converter_name
                    for converter_name, name in re.findall(r"<(\w+):(\w+)>", route)
                }
                name = f"{namespace}:{pattern.name}".strip(":")
                found.append(Route(name, route, converters, pattern.callback))

    walk(get_resolver().url_patterns, "", "")
    return found


# --- The query parameters each view reads ---------------------------------------------------

_GET_LOOKUP = re.compile(
    r"""request\.GET(?:\.get|\.getlist|\.__getitem__)?[\(\[]\s*["'](\w+)["']"""
)
_BOUND_FORM = re.compile(r"(\w+)\(\s*(?:self\.)?request\.GET\b")


_CALL = re.compile(r"\b(\w+)\(")


def _view_code(callback: Any) -> list[tuple[str, dict[str, Any]]]:
    """(source, the namespace its names resolve in) of the code that runs for this view.

    The view function, or the classes of a class-based view (Django's generic bases left
    out), and the functions of their own modules they call, transitively.
    """
    view = inspect.unwrap(callback)
    view_class = getattr(callback, "view_class", None) or getattr(view, "view_class", None)
    pending: list[Any] = [view]
    if view_class is not None:
        pending = [
            cls
            for cls in view_class.__mro__
            if not cls.__module__.startswith(("django.views", "builtins"))
        ]
    code: list[tuple[str, dict[str, Any]]] = []
    seen: set[Any] = set()
    while pending:
        unit = pending.pop()
        if unit in seen:
            continue
        seen.add(unit)
        source, namespace = inspect.getsource(unit), vars(sys.modules[unit.__module__])
        code.append((source, namespace))
        for name in _CALL.findall(source):
            called = namespace.get(name)
            if inspect.isfunction(called) and called.__module__ == unit.__module__:
                pending.append(called)
    return code


def query_parameters(callback: Any) -> list[str]:
    """Names looked up in request.GET, and fields of forms bound to it, in the view's code."""
    names: list[str] = list(ALWAYS_FUZZED)
    for source, namespace in _view_code(callback):
        names += _GET_LOOKUP.findall(source)
        for form_name in _BOUND_FORM.findall(source):
            form_class = namespace.get(form_name)
            if isinstance(form_class, type) and issubclass(form_class, forms.BaseForm):
                names += list(_unbound_fields(form_class))
    return list(dict.fromkeys(names))


def _unbound_fields(form_class: type[forms.BaseForm]) -> list[str]:
    # Instantiated, since forms may rename or add fields in __init__ (`class` is one).
    try:
        return list(form_class().fields)
    except TypeError:  # a form that needs arguments: its declared fields
        return list(form_class.base_fields)


def test_the_parameter_finder_sees_the_filters() -> None:
    # A guard on the finder itself: if these went missing, the fuzzing below would be thin.
    by_name = {route.name: route for route in routes()}
    assert {"after", "before", "sort", "class", "q"} <= set(
        query_parameters(by_name["leases:index"].callback)
    )
    assert {"state", "limit"} <= set(query_parameters(by_name["api:alerts"].callback))
    assert {"cluster", "user", "outcome"} <= set(
        query_parameters(by_name["nks:resize_list"].callback)
    )


# --- Real objects for the path parameters ---------------------------------------------------


@pytest.fixture
def real_arguments(db: None) -> dict[str, dict[str, str]]:
    """For each route with parameters, values that name an existing object."""
    kube = make_cluster("prod")
    lease = make_lease(kube, "kube-scheduler")
    make_transition(lease, "holder-b", "holder-a", seconds_ago=30)
    cluster = make_nks_cluster(make_account(), name="prod-api")
    group: NksNodegroup = make_nodegroup(cluster, "default-worker")
    resize: ResizeRequest = make_resize_request(group)
    incident: Incident = make_incident()
    node = make_node(kube, "prod-node-0", instance="3f1c2b7e-9a4d-4e8b-8f00-0123456789ab")
    lease_args = {"cluster": kube.name, "namespace": lease.namespace, "name": lease.name}
    slot = make_slot(kube, "orders", 0)
    group_args = {"cluster": kube.name, "namespace": slot.namespace, "name": "orders"}
    return {
        "leases:group": group_args,
        "leases:group_expected_size": group_args,
        "leases:detail": lease_args,
        "leases:node": {"cluster": kube.name, "name": node.name},
        "api:lease": lease_args,
        "nks:cluster": {"uuid": cluster.uuid},
        "nks:watch_leases": {"uuid": cluster.uuid},
        "nks:nodegroup": {"uuid": cluster.uuid, "name": group.name},
        "nks:resize": {"uuid": cluster.uuid, "name": group.name},
        "api:nks_resize": {"uuid": cluster.uuid, "name": group.name},
        "nks:resize_detail": {"pk": str(resize.pk)},
        "api:nks_resize_request": {"pk": str(resize.pk)},
        **{
            f"alerts:{action}": {"incident_id": str(incident.pk)}
            for action in ("incident", "acknowledge", "unacknowledge", "silence", "unsilence")
        },
        # A well-formed link of another account (the fuzzing user's own is not known yet).
        "alerts:confirm_subscription": {
            "token": signing.dumps({"user": 0, "email": "x@example.org"}, salt=CONFIRM_SALT)
        },
    }


@pytest.fixture
def operator(django_user_model: Any) -> Any:
    # A superuser in the operators group sees every form and every admin page.
    user = django_user_model.objects.create_superuser("olivia", "olivia@example.org", None)
    user.groups.add(Group.objects.get(name="operators"))
    return user


@pytest.fixture
def clients(operator: Any) -> Iterator[dict[str, Client]]:
    session = Client(raise_request_exception=False)
    session.force_login(operator)
    _, token = ApiToken.issue(operator, name="fuzz", scope=ApiToken.Scope.WRITE)
    bearer = Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Bearer {token}")
    yield {"session": session, "bearer": bearer}


# --- The requests ---------------------------------------------------------------------------


def _path(route: Route, arguments: dict[str, str]) -> str:
    path = route.route
    for name, value in arguments.items():
        path = re.sub(rf"<\w+:{name}>", quote(value, safe=""), path)
    return "/" + path


def requests_for(
    route: Route, real: dict[str, str], *, reads_query: bool = True
) -> Iterator[tuple[str, dict[str, str]]]:
    """(url, extra headers) pairs: each path segment made hostile, then each parameter.

    `reads_query` is false for a route that refuses GET (405): its view never runs, so
    only the path, which the resolver converts first, is worth fuzzing.
    """
    base = _path(route, real)
    for name, converter in route.converters.items():
        for value in HOSTILE_INTS if converter == "int" else HOSTILE_SEGMENTS:
            yield _path(route, {**real, name: value}), {}
    if not reads_query:
        return
    for parameter in query_parameters(route.callback):
        for value in HOSTILE_VALUES:
            yield f"{base}?{urlencode({parameter: value})}", {}
        yield f"{base}?{urlencode([(parameter, '1'), (parameter, '2')])}", {}
    if not route.is_api:
        # htmx requests choose a partial by the HX-Target header, which is as free as a URL.
        for value in ("nonexistent", "lease-table#x", "x" * 2000, "ß²𝟘", "a\x00b"):
            yield base, {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": value}


def admin_requests() -> Iterator[str]:
    for model in admin.site._registry:
        if model._meta.app_label not in OUR_APPS:
            continue
        prefix = f"admin:{model._meta.app_label}_{model._meta.model_name}"
        changelist = reverse(f"{prefix}_changelist")
        for parameter in ADMIN_PARAMETERS:
            for value in ("\x00", "ß²𝟘", str(2**63), "-1", "", "x" * 5000, "1.-2.99"):
                yield f"{changelist}?{urlencode({parameter: value})}"
        for object_id in ("\x00", "ß²𝟘", str(2**63), str(10**30), "-1"):
            yield reverse(f"{prefix}_change", args=[object_id])


def _shown(url: str) -> str:
    return url if len(url) <= 200 else f"{url[:200]}… ({len(url)} characters)"


def test_no_page_url_answers_get_with_405(
    real_arguments: dict[str, dict[str, str]], clients: dict[str, Client]
) -> None:
    # A form's URL is in the address bar after a POST, in the history and in bookmarks: GET
    # on it lands somewhere (the page the form is on), never on "HTTP ERROR 405". The JSON
    # API is not browsed and keeps its 405s; so does mozilla-django-oidc's /oidc/logout/,
    # which no form of ours posts to (the header signs out at /logout/).
    refused = [
        path
        for route in routes()
        if not route.is_api
        and inspect.unwrap(route.callback).__module__.split(".")[0] in OUR_APPS
        and clients["session"]
        .get(path := _path(route, real_arguments.get(route.name, {})))
        .status_code
        == 405
    ]
    assert refused == []


# The routes are fuzzed in shards, each a test of its own, so that parallel workers share
# the work (one test of every route kept one worker busy for a minute).
SHARDS = 4


@pytest.mark.parametrize("shard", range(SHARDS))
def test_no_route_answers_a_server_error_to_hostile_input(
    real_arguments: dict[str, dict[str, str]], clients: dict[str, Client], shard: int
) -> None:
    failures: list[tuple[str, str, str, int]] = []
    all_routes = routes()
    missing = [r.name for r in all_routes if r.converters and r.name not in real_arguments]
    assert not missing, f"give these routes real arguments in real_arguments(): {missing}"

    for route in all_routes[shard::SHARDS]:
        who = ("session", "bearer") if route.is_api else ("session",)
        base = _path(route, real_arguments.get(route.name, {}))
        refused = set()
        for name in who:
            status = clients[name].get(base).status_code
            if status >= 500:
                failures.append((name, "GET", _shown(base), status))
            refused.add(status == 405)
        requests = requests_for(
            route, real_arguments.get(route.name, {}), reads_query=refused != {True}
        )
        for url, headers in requests:
            for name in who:
                status = clients[name].get(url, **headers).status_code
                if status >= 500:
                    failures.append((name, "GET", _shown(url), status))
    for url in list(admin_requests())[shard::SHARDS]:
        status = clients["session"].get(url).status_code
        if status >= 500:
            failures.append(("session", "GET", _shown(url), status))

    assert not failures, "server errors:\n" + "\n".join(
        f"{method} {url} ({client}): {status}" for client, method, url, status in failures
    )
