"""Sign-in: OpenID Connect single sign-on, the password form beside it, and its throttling.

The provider's endpoints come from ``OIDC_ISSUER``'s discovery document, fetched at the first
sign-in and kept for the life of the process (settings must load without the network), or
from explicit ``OIDC_OP_*`` settings. Accounts are found by the ID token's (``iss``, ``sub``)
through `SsoIdentity`, never by a user name claim, which providers let change and reuse: the
``OIDC_USERNAME_CLAIM`` claim only names the account a first sign-in creates. Membership of
the ``operators`` group follows ``OIDC_OPERATOR_GROUPS`` at every sign-in. With
``OIDC_ONLY`` the password form is only a break-glass door for superusers.

This module is the one client of the provider's HTTP API: discovery, token, userinfo and keys,
each call bounded by `dashboard.oidc_http.provider_call` (``OIDC_TIMEOUT`` in total, 1 MiB).
Nothing it logs or shows contains the client secret, a code or a token.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import jwt
import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.models import AbstractBaseUser, Group
from django.core.exceptions import SuspiciousOperation
from django.db import IntegrityError, transaction
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _
from django.views.generic import View
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import (
    OIDCAuthenticationCallbackView,
    OIDCAuthenticationRequestView,
)
from requests.auth import HTTPBasicAuth

from dashboard.models import SsoIdentity, normalize_issuer
from dashboard.oidc_http import provider_call
from dashboard.services import OPERATORS_GROUP, ensure_operators_group

logger = logging.getLogger(__name__)

# Django's own rule for user names (letters, digits and @.+-_), and its length limit.
USERNAME_PATTERN = re.compile(r"^[\w.@+-]+\Z")
USERNAME_MAX_LENGTH = 150
SSO_FIELD_LENGTH = 255  # SsoIdentity.issuer and .subject; OpenID Connect caps `sub` at 255

# Lazy: each is shown in the language of the request that fails.
SSO_FAILED = _("Single sign-on did not sign you in. Please try again.")
SSO_UNREACHABLE = _(
    "The single sign-on provider could not be reached. Please try again in a minute; if it "
    "stays down, an administrator can use the break-glass sign-in."
)
SSO_UNVERIFIED = _(
    "That sign-in could not be verified: it may have expired or been started in another "
    "tab. Please sign in again."
)


# --- The provider's endpoints -----------------------------------------------------------------


class ProviderUnavailable(Exception):
    """The provider's discovery document could not be fetched or is not trustworthy."""


@dataclass(frozen=True)
class ProviderEndpoints:
    issuer: str | None
    authorization: str
    token: str
    userinfo: str
    jwks: str | None


_discovered: dict[str, dict[str, Any]] = {}
_discovery_lock = threading.Lock()


def oidc_enabled() -> bool:
    """Whether single sign-on is configured (settings refuse a half-done configuration)."""
    return bool(
        settings.OIDC_RP_CLIENT_ID
        and (settings.OIDC_ISSUER or settings.OIDC_OP_AUTHORIZATION_ENDPOINT)
    )


def forget_provider() -> None:
    """Drop cached discovery documents (tests; a provider that moved its endpoints)."""
    with _discovery_lock:
        _discovered.clear()


def provider_endpoints() -> ProviderEndpoints:
    """The endpoints to use: explicit settings win over the issuer's discovery document."""
    issuer = settings.OIDC_ISSUER
    explicit = {
        "authorization_endpoint": settings.OIDC_OP_AUTHORIZATION_ENDPOINT,
        "token_endpoint": settings.OIDC_OP_TOKEN_ENDPOINT,
        "userinfo_endpoint": settings.OIDC_OP_USER_ENDPOINT,
        "jwks_uri": settings.OIDC_OP_JWKS_ENDPOINT,
    }
    document: dict[str, Any] = {}
    if issuer:
        # The lock makes the first sign-ins after start-up share one fetch; the document is
        # then kept for the process's life. Signing keys are still fetched per sign-in (by
        # mozilla-django-oidc), so a key rotation needs no restart.
        with _discovery_lock:
            if issuer not in _discovered:
                _discovered[issuer] = _fetch_discovery(issuer)
            document = _discovered[issuer]
    merged = {key: value or document.get(key) for key, value in explicit.items()}
    for key in ("authorization_endpoint", "token_endpoint", "userinfo_endpoint"):
        if not merged[key]:
            raise ProviderUnavailable(f"the provider announces no {key}")
    return ProviderEndpoints(
        issuer=issuer,
        authorization=merged["authorization_endpoint"],
        token=merged["token_endpoint"],
        userinfo=merged["userinfo_endpoint"],
        jwks=merged["jwks_uri"],
    )


def _fetch_discovery(issuer: str) -> dict[str, Any]:
    url = f"{issuer}/.well-known/openid-configuration"
    try:
        response = provider_call("GET", url)
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        logger.warning("OIDC discovery at %s failed: %s", url, type(exc).__name__)
        raise ProviderUnavailable(f"discovery at {url} failed") from None
    if not isinstance(document, dict):
        raise ProviderUnavailable(f"discovery at {url} is not a JSON object")
    # OpenID Connect Discovery 1.0 §4.3: a document for another issuer must not be used.
    announced = str(document.get("issuer", "")).rstrip("/")
    if announced != issuer.rstrip("/"):
        logger.error(
            "OIDC discovery at %s names issuer %r, not the configured OIDC_ISSUER", url, announced
        )
        raise ProviderUnavailable(f"discovery at {url} is for another issuer")
    return document


# --- Backends ---------------------------------------------------------------------------------


class PasswordBackend(ModelBackend):
    """Django's password check; while ``OIDC_ONLY`` is on, only superusers pass (break-glass).

    The rule lives in the backend, not in the login form, so the admin's login and any other
    password form obey it too.
    """

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> AbstractBaseUser | None:
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is not None and settings.OIDC_ONLY and not user.is_superuser:
            logger.warning(
                "Password sign-in of %r refused: OIDC_ONLY allows it for superusers only",
                user.get_username(),
            )
            return None
        return user


class OidcBackend(OIDCAuthenticationBackend):
    """Signs in the account bound to the token's (iss, sub); operators follow the groups claim."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Django builds every backend for each permission check: reading (let alone
        # discovering) the provider's endpoints belongs to `authenticate`, not here.
        self.UserModel = get_user_model()
        self.issuer: str | None = None

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> AbstractBaseUser | None:
        # Only the callback view calls with a nonce; a password form must never start a token
        # exchange, even one posted to a URL that carries `code` and `state`.
        if request is None or "password" in kwargs or "nonce" not in kwargs:
            return None
        if not oidc_enabled():
            return None
        endpoints = provider_endpoints()
        self.issuer = endpoints.issuer
        self.OIDC_OP_TOKEN_ENDPOINT = endpoints.token
        self.OIDC_OP_USER_ENDPOINT = endpoints.userinfo
        self.OIDC_OP_JWKS_ENDPOINT = endpoints.jwks
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None
        return super().authenticate(request, **kwargs)

    def get_payload_data(self, token: bytes | str, key: Any) -> dict[str, Any]:
        payload: dict[str, Any] = super().get_payload_data(token, key)
        # mozilla-django-oidc checks the signature and expiry but not who the token is for.
        audience = payload.get("aud")
        audiences = [audience] if isinstance(audience, str) else list(audience or [])
        if self.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation("The ID token was issued for another client.")
        if self.issuer and str(payload.get("iss", "")).rstrip("/") != self.issuer.rstrip("/"):
            raise SuspiciousOperation("The ID token was issued by another provider.")
        return payload

    def get_token(self, payload: dict[str, Any]) -> dict[str, Any]:
        # mozilla-django-oidc's, through provider_call.
        auth = None
        if self.get_settings("OIDC_TOKEN_USE_BASIC_AUTH", False):
            auth = HTTPBasicAuth(payload.get("client_id"), payload.pop("client_secret", None))
        response = provider_call("POST", self.OIDC_OP_TOKEN_ENDPOINT, data=payload, auth=auth)
        self.raise_token_response_error(response)
        token: dict[str, Any] = response.json()
        return token

    def retrieve_matching_jwk(self, token: bytes | str) -> jwt.PyJWK:
        # mozilla-django-oidc's choice of key, from a key set fetched through provider_call.
        response = provider_call("GET", self.OIDC_OP_JWKS_ENDPOINT)
        response.raise_for_status()
        header = jwt.get_unverified_header(token)
        key = None
        for jwk in response.json().get("keys", []):
            if self.get_settings("OIDC_VERIFY_KID", True) and jwk.get("kid") != header.get("kid"):
                continue
            if "alg" in jwk and jwk["alg"] != header.get("alg"):
                continue
            key = jwk
        if key is None:
            raise SuspiciousOperation("Could not find a valid JWKS.")
        return jwt.PyJWK(key)

    def get_userinfo(
        self, access_token: str, id_token: str, payload: dict[str, Any]
    ) -> dict[str, Any]:
        response = provider_call(
            "GET", self.OIDC_OP_USER_ENDPOINT, headers={"Authorization": f"Bearer {access_token}"}
        )
        response.raise_for_status()
        if response.headers.get("Content-Type", "").lower().startswith("application/jwt"):
            userinfo: dict[str, Any] = self.verify_token(response.text)
        else:
            userinfo = response.json()
        if not isinstance(userinfo, dict):
            raise SuspiciousOperation("The userinfo answer is not a JSON object.")
        # OpenID Connect Core §5.3.2: userinfo about someone else must not be used.
        if userinfo.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("The userinfo answer is about another subject.")
        # Some providers put groups only into the ID token; userinfo wins where both say.
        return {**payload, **userinfo}

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        # Whose claims they are was checked in get_userinfo; what a first sign-in needs (a user
        # name) is checked where an account is created, so a linked account can still sign in.
        return True

    def get_or_create_user(
        self, access_token: str, id_token: str, payload: dict[str, Any]
    ) -> AbstractBaseUser | None:
        """The account bound to the ID token's (iss, sub); at a first sign-in, a new one."""
        claims = self.get_userinfo(access_token, id_token, payload)
        issuer = normalize_issuer(str(payload.get("iss") or ""))
        subject = payload.get("sub")
        if not issuer or not isinstance(subject, str) or not subject.strip():
            raise SuspiciousOperation("The ID token names no issuer or no subject.")
        if len(issuer) > SSO_FIELD_LENGTH or len(subject) > SSO_FIELD_LENGTH:
            raise SuspiciousOperation("The ID token's issuer or subject is too long.")
        bound = SsoIdentity.objects.select_related("user").filter(issuer=issuer, subject=subject)
        identity = bound.first()
        if identity is None:
            try:
                identity = self._bind_first_sign_in(issuer, subject, claims)
            except IntegrityError:
                # A sign-in in another tab bound this person (or took the name) a moment ago.
                if (identity := bound.first()) is None:
                    raise SuspiciousOperation("Two first sign-ins raced for one name.") from None
            if identity is None:
                return None
        SsoIdentity.objects.filter(pk=identity.pk).update(last_login_at=timezone.now())
        return self.update_user(identity.user, claims)

    @transaction.atomic
    def _bind_first_sign_in(
        self, issuer: str, subject: str, claims: dict[str, Any]
    ) -> SsoIdentity | None:
        wanted = username_from_claims(claims)
        if wanted is None:
            self._refuse(
                gettext(
                    "Your single sign-on account has no usable user name (claim “%(claim)s”),"
                    " so it cannot sign in here. Ask your identity provider's administrators"
                    " to set one."
                )
                % {"claim": settings.OIDC_USERNAME_CLAIM},
                log=f"claim {settings.OIDC_USERNAME_CLAIM!r} is missing or not a valid user name "
                f"(sub {subject!r})",
            )
            return None
        namesake = self.UserModel.objects.filter(username=wanted).first()
        if namesake is not None and not SsoIdentity.objects.filter(user=namesake).exists():
            if namesake.is_superuser or namesake.is_staff or namesake.has_usable_password():
                # The attack this stops: a provider account named "root" becoming the local
                # break-glass superuser. Only a superuser's link (in the admin) joins the two.
                self._refuse(
                    gettext(
                        "An account named “%(username)s” already exists on this dashboard and is"
                        " not linked to your single sign-on account, so single sign-on does not"
                        " sign you in to it. If it is yours, ask an administrator to link it."
                    )
                    % {"username": wanted},
                    log=f"{wanted!r} is a local account (superuser, staff or password) not linked"
                    f" to sub {subject!r} at {issuer}",
                )
                return None
            # An account an earlier version created at this name's first sign-in (no password,
            # no privileges) is taken over once, then bound to this subject for good.
            logger.warning("Bound unlinked SSO account %r to sub %r at %s", wanted, subject, issuer)
            user = namesake
        else:
            # No password: the account can only come in by single sign-on.
            user = self.UserModel.objects.create_user(free_username(wanted), email=_email(claims))
            logger.info("Created user %r for sub %r at %s", user.get_username(), subject, issuer)
        return SsoIdentity.objects.create(user=user, issuer=issuer, subject=subject)

    @transaction.atomic
    def update_user(self, user: Any, claims: dict[str, Any]) -> Any:
        changed = []
        for field, value in (
            ("email", _email(claims)),
            ("first_name", _text(claims.get("given_name"), 150)),
            ("last_name", _text(claims.get("family_name"), 150)),
        ):
            if value is not None and getattr(user, field) != value:
                setattr(user, field, value)
                changed.append(field)
        if changed:
            user.save(update_fields=changed)
        apply_operator_membership(user, claims_groups(claims))
        return user

    def get_user(self, user_id: Any) -> AbstractBaseUser | None:
        # Django's rule, unlike the parent's: a deactivated user's session ends at once.
        return ModelBackend.get_user(self, user_id)

    def _refuse(self, message: str, *, log: str) -> None:
        logger.warning("Single sign-on refused: %s", log)
        # Read by CallbackView to tell the person why (as Axes marks `axes_locked_out`).
        self.request.oidc_refusal = message


def username_from_claims(claims: dict[str, Any]) -> str | None:
    value = claims.get(settings.OIDC_USERNAME_CLAIM)
    if not isinstance(value, str):
        return None
    value = value.strip()
    if not value or len(value) > USERNAME_MAX_LENGTH or not USERNAME_PATTERN.match(value):
        return None
    return value


def free_username(wanted: str) -> str:
    """`wanted`, or else `wanted-2`, `wanted-3`…: the first no account has in any letter case.

    Any letter case, so that "Root" from the provider never sits beside a local "root".
    """
    users = get_user_model().objects
    candidate, number = wanted, 1
    while users.filter(username__iexact=candidate).exists():
        number += 1
        suffix = f"-{number}"
        candidate = wanted[: USERNAME_MAX_LENGTH - len(suffix)] + suffix
    return candidate


def claims_groups(claims: dict[str, Any]) -> set[str]:
    """The groups claim as a set; some providers send a lone group as a plain string."""
    value = claims.get(settings.OIDC_GROUPS_CLAIM)
    if isinstance(value, str):
        return {value}
    if isinstance(value, list | tuple):
        return {item for item in value if isinstance(item, str)}
    return set()


def apply_operator_membership(user: Any, groups: set[str]) -> bool:
    """Put the user into `operators` exactly when a group is in OIDC_OPERATOR_GROUPS."""
    is_operator = bool(groups & set(settings.OIDC_OPERATOR_GROUPS))
    operators = Group.objects.filter(name=OPERATORS_GROUP).first()
    if operators is None:
        ensure_operators_group()
        operators = Group.objects.get(name=OPERATORS_GROUP)
    was_operator = user.groups.filter(pk=operators.pk).exists()
    if is_operator and not was_operator:
        user.groups.add(operators)
        logger.info("%r joined %s (identity provider groups)", user.get_username(), OPERATORS_GROUP)
    elif was_operator and not is_operator:
        user.groups.remove(operators)
        logger.info("%r left %s (identity provider groups)", user.get_username(), OPERATORS_GROUP)
    return is_operator


def _email(claims: dict[str, Any]) -> str | None:
    value = _text(claims.get("email"), 254)
    return value if value and "@" in value else None


def _text(value: Any, limit: int) -> str | None:
    return value.strip()[:limit] if isinstance(value, str) else None


# --- Views ------------------------------------------------------------------------------------


def login_page_context(request: HttpRequest, next_url: str) -> dict[str, Any]:
    """What the login page shows besides the form: the SSO button, break-glass, the target."""
    local = request.GET.get("local") == "1" or request.method == "POST"
    return {
        "oidc_enabled": oidc_enabled(),
        "oidc_only": settings.OIDC_ONLY,
        "show_password_form": not settings.OIDC_ONLY or local,
        "break_glass_query": urlencode({"local": "1", **({"next": next_url} if next_url else {})}),
        "next": next_url,
    }


@method_decorator(login_not_required, name="dispatch")
class LoginView(auth_views.LoginView):
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context.update(login_page_context(self.request, self.get_redirect_url()))
        return context


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None, credentials: dict[str, Any] | None
) -> HttpResponse:
    """Axes' answer to a locked-out attempt: the login page with the reason, status 429."""
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    username = (credentials or {}).get("username") or request.POST.get("username", "")
    next_url = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        next_url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        next_url = ""
    context = login_page_context(request, next_url)
    context.update(
        {
            "form": AuthenticationForm(request, initial={"username": username}),
            "show_password_form": True,
            "lockout_message": (
                ngettext(
                    "Too many failed sign-in attempts for this user name from your address."
                    " Password sign-in is blocked for %(minutes)d minute; try again later, or"
                    " ask an administrator to unlock it.",
                    "Too many failed sign-in attempts for this user name from your address."
                    " Password sign-in is blocked for %(minutes)d minutes; try again later, or"
                    " ask an administrator to unlock it.",
                    minutes,
                )
                % {"minutes": minutes}
            ),
        }
    )
    return render(request, "registration/login.html", context, status=429)


def is_single_sign_on_attempt(request: HttpRequest, credentials: dict[str, Any] | None) -> bool:
    """Axes' whitelist: only password attempts (those with a user name) are counted.

    An SSO callback carries no user name; counting it would lock out everyone behind one
    address after a few failed callbacks, and the provider throttles its own password form.
    """
    return not (credentials or {}).get("username")


def _login_redirect(request: HttpRequest, message: str) -> HttpResponseRedirect:
    messages.error(request, message)
    return redirect(settings.LOGIN_URL)


@method_decorator(login_not_required, name="dispatch")
class AuthenticateView(OIDCAuthenticationRequestView):
    """Sends the browser to the provider; reachable without a login, 404 without SSO."""

    def __init__(self, **kwargs: Any) -> None:
        # The parent reads the endpoint at construction; ours may need discovery first.
        View.__init__(self, **kwargs)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not oidc_enabled():
            raise Http404("Single sign-on is not configured.")
        try:
            endpoints = provider_endpoints()
        except ProviderUnavailable:
            return _login_redirect(request, SSO_UNREACHABLE)
        self.OIDC_OP_AUTH_ENDPOINT = endpoints.authorization
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        return super().get(request)


@method_decorator(login_not_required, name="dispatch")
class CallbackView(OIDCAuthenticationCallbackView):
    """The provider's redirect back; every failure ends on the login page with a reason."""

    def get(self, request: HttpRequest) -> HttpResponse:
        if not oidc_enabled():
            raise Http404("Single sign-on is not configured.")
        try:
            return super().get(request)
        except ProviderUnavailable:
            return _login_redirect(request, SSO_UNREACHABLE)
        except requests.RequestException as exc:
            # Only the status: a token endpoint's error body is the provider's to show.
            status = getattr(exc.response, "status_code", None)
            logger.warning("OIDC token or userinfo call failed: %s %s", type(exc).__name__, status)
            return _login_redirect(request, SSO_UNREACHABLE)
        except (SuspiciousOperation, jwt.InvalidTokenError) as exc:
            logger.warning("OIDC callback refused: %s", exc)
            return _login_redirect(request, SSO_UNVERIFIED)

    def login_failure(self) -> HttpResponse:
        reason = getattr(self.request, "oidc_refusal", None)
        if self.request.GET.get("error"):
            logger.warning("OIDC provider answered with error %r", self.request.GET["error"][:100])
        return _login_redirect(self.request, reason or SSO_FAILED)
