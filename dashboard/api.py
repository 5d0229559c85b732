"""Authentication and response helpers for the JSON API under /api/v1/.

The API is for scripts and automation: a per-user bearer token (`create_api_token`), or the
browser session of a logged-in engineer. Failures answer JSON, never the login page, and a
401 does not say whether the token was unknown, revoked or malformed.

Each endpoint declares the token scope it needs (``api_view(scope=...)``); a token whose
scope falls short gets a 403 that names the scope. Scopes limit tokens only: a browser
session acts with its user's permissions, which every view checks on its own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import orjson
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from dashboard.models import ApiToken
from dashboard.services import authenticate_api_token

View = Callable[..., HttpResponse]


def json_response(
    data: Any, status: int = 200, headers: dict[str, str] | None = None
) -> HttpResponse:
    body = orjson.dumps(data, option=orjson.OPT_NAIVE_UTC | orjson.OPT_UTC_Z)
    response = HttpResponse(body, status=status, content_type="application/json", headers=headers)
    response["Cache-Control"] = "no-store"
    return response


def json_error(message: str, status: int, **extra: Any) -> HttpResponse:
    headers = {"WWW-Authenticate": 'Bearer realm="api"'} if status == 401 else None
    return json_response({"error": message, **extra}, status=status, headers=headers)


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def api_view(
    methods: tuple[str, ...] = ("GET", "HEAD"),
    scope: ApiToken.Scope | None = None,
    action: str = "this endpoint",
) -> Callable[[View], View]:
    """Token or session authentication for an API view; JSON errors instead of redirects.

    ``scope`` is the token scope the view needs; left out, it is ``write`` as soon as the
    view accepts a method that can change something, so a new write endpoint cannot be
    reached with a read token by oversight. ``action`` names what the scope is needed for
    in the 403 ("resizing").
    """
    required = scope or (
        ApiToken.Scope.READ if SAFE_METHODS.issuperset(methods) else ApiToken.Scope.WRITE
    )

    def decorator(view: View) -> View:
        @functools.wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            header = request.headers.get("Authorization", "")
            if header:
                scheme, _, credentials = header.partition(" ")
                token = (
                    authenticate_api_token(credentials.strip())
                    if scheme.lower() == "bearer" and credentials.strip()
                    else None
                )
                if token is None:
                    return json_error("invalid or missing API token", 401)
                if not token.has_scope(required):
                    return json_error(
                        f"this token's scope is {token.scope}; {action} needs a token with"
                        f" scope {required}",
                        403,
                        required_scope=required.value,
                    )
                request.user = token.user
                request.api_token = token  # type: ignore[attr-defined]
            elif not request.user.is_authenticated:
                return json_error(
                    "authentication required: send Authorization: Bearer <token>", 401
                )
            elif request.method not in ("GET", "HEAD", "OPTIONS"):
                # A session (cookie) may only write with a CSRF token, like any form.
                from django.middleware.csrf import CsrfViewMiddleware

                rejected = CsrfViewMiddleware(lambda r: HttpResponse()).process_view(
                    request, view, args, kwargs
                )
                if rejected is not None:
                    return json_error("CSRF token missing or incorrect", 403)
            return view(request, *args, **kwargs)

        # Bearer tokens are not sent by browsers on their own, so CSRF does not apply to
        # them; session writes are checked above.
        return login_not_required(csrf_exempt(require_http_methods(list(methods))(wrapped)))

    return decorator
