"""Settings, all read from the environment (see the README's configuration table).

Defaults run on a fresh machine: SQLite and kombu's filesystem broker under ``var/``, no
Redis. ``DATABASE_URL``, ``REDIS_URL`` and ``EMAIL_URL`` switch to real services. With
``DJANGO_ENV=production`` nothing insecure is defaulted: a missing secret stops start-up.
"""

from __future__ import annotations

import os
import secrets
import zoneinfo
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import dj_database_url
import dj_email_url

from dashboard.encryption import generate_key as generate_encryption_key
from dashboard.encryption import validate_keys as validate_encryption_keys
from dashboard.env import (
    BadEnvironment,
    env_bool,
    env_choice,
    env_int,
    env_list,
    env_networks,
    env_optional,
    env_str,
    env_url,
    redact_url,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("DASHBOARD_VAR_DIR", str(BASE_DIR / "var"))).resolve()

DJANGO_ENV = env_choice("DJANGO_ENV", "development", ("development", "production"))
PRODUCTION = DJANGO_ENV == "production"

if not PRODUCTION:
    VAR_DIR.mkdir(parents=True, exist_ok=True)


def _generated_once(path: Path, make: Callable[[], str]) -> str:
    """A development secret made on first use and kept in `path`.

    Web, workers, beat and parallel test processes start together: the file appears whole
    (written aside, then linked into place) and the first process to link it wins, so they
    all end up with the same value.
    """
    if not path.exists():
        draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        draft.write_text(make(), encoding="utf-8")
        draft.chmod(0o600)
        try:
            os.link(draft, path)
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    return path.read_text(encoding="utf-8").strip()


def _development_secret_key() -> str:
    # Generated once and kept, so sessions survive restarts of `make run`.
    return _generated_once(VAR_DIR / "secret_key", lambda: secrets.token_urlsafe(50))


if PRODUCTION:
    SECRET_KEY = env_str("SECRET_KEY")
    if len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5:
        raise BadEnvironment(
            "SECRET_KEY is too short or too simple; use at least 50 random characters."
        )
else:
    SECRET_KEY = env_optional("SECRET_KEY") or _development_secret_key()

# --- Secrets at rest ------------------------------------------------------------------------
# Fernet keys, comma-separated: the first encrypts, all decrypt (see dashboard/encryption.py
# and `manage.py rotate_secrets`). Development generates one under var/ like the secret key;
# production refuses to start without them, since a generated key would be lost with the pod.


def _development_encryption_key() -> str:
    return _generated_once(VAR_DIR / "encryption_key", generate_encryption_key)


SECRETS_ENCRYPTION_KEYS = [
    key.strip()
    for line in env_list("SECRETS_ENCRYPTION_KEYS", [])
    for key in line.splitlines()
    if key.strip()
]
if not SECRETS_ENCRYPTION_KEYS:
    if PRODUCTION:
        raise BadEnvironment(
            "SECRETS_ENCRYPTION_KEYS (or SECRETS_ENCRYPTION_KEYS_FILE) is required in production: "
            "comma-separated Fernet keys, the first encrypts, all decrypt."
        )
    SECRETS_ENCRYPTION_KEYS = [_development_encryption_key()]
try:
    validate_encryption_keys(SECRETS_ENCRYPTION_KEYS)
except ValueError as exc:
    raise BadEnvironment(str(exc)) from None

DEBUG = env_bool("DEBUG", default=not PRODUCTION)

ALLOWED_HOSTS = env_list(
    "ALLOWED_HOSTS", None if PRODUCTION else ["127.0.0.1", "localhost", "[::1]"]
)
if PRODUCTION and not ALLOWED_HOSTS:
    raise BadEnvironment("ALLOWED_HOSTS is required in production (comma-separated host names).")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
for _origin in CSRF_TRUSTED_ORIGINS:
    if not _origin.startswith(("http://", "https://")):
        raise BadEnvironment(
            f"CSRF_TRUSTED_ORIGINS entry {_origin!r} must start with https:// or http://."
        )

# Links in e-mails, chat messages and API answers. By default the address `make run` serves
# (its web process listens on DASHBOARD_PORT), so a demo on another port links to itself.
DASHBOARD_URL = env_url(
    "DASHBOARD_URL",
    schemes=("http", "https"),
    default=f"http://127.0.0.1:{env_int('DASHBOARD_PORT', 8000, minimum=1, maximum=65535)}",
).rstrip("/")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "axes",
    "mozilla_django_oidc",
    "dashboard",
    "leases",
    "nks",
    "alerts",
    "fakes",
]

MIDDLEWARE = [
    # Answers /healthz, /readyz and /metrics before host validation and HTTPS redirects:
    # kubelet probes and Prometheus address pods by IP over plain HTTP.
    "dashboard.middleware.ProbeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Before WhiteNoise, so static files (SVG especially) carry the policy too.
    "csp.middleware.CSPMiddleware",
    # NUL in a path, query or cookie: 400 before any of them reaches a database lookup.
    "dashboard.hostile_input.RejectNulMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The language from the language cookie, Accept-Language or LANGUAGE_CODE (and
    # Vary: Accept-Language); a saved choice outranks it in PreferenceMiddleware below.
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # The signed-in person's saved language and time zone (one query; none when anonymous).
    "dashboard.middleware.PreferenceMiddleware",
    # Cache-Control: no-store for logged-in users and the API; static files never get here.
    "dashboard.middleware.NoStoreMiddleware",
    # Every page needs a login unless its view says otherwise (login page, token API).
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as Axes asks: turns a locked-out login attempt into the lockout page (429).
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "dashboard.urls"
WSGI_APPLICATION = "dashboard.wsgi.application"
ASGI_APPLICATION = "dashboard.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "dashboard.context_processors.navigation",
                "dashboard.context_processors.page_refresh",
                "alerts.context_processors.alerts_badge",
            ],
        },
    },
    # Only for the hottest region (the Leases table, polled by every open browser); see
    # dashboard/jinja2.py. Its templates live apart, so neither engine finds the other's.
    {
        "BACKEND": "django.template.backends.jinja2.Jinja2",
        "DIRS": [BASE_DIR / "templates" / "jinja2"],
        "APP_DIRS": False,
        "OPTIONS": {
            "environment": "dashboard.jinja2.environment",
            # Jinja2 has no {% load %}: the Django template filters its templates use, by name.
            "filters": {
                "lease_state_pill": "leases.templatetags.lease_css.lease_state_pill",
                "visible": "dashboard.hostile_input.visible_text",
            },
        },
    },
]

# --- Database -------------------------------------------------------------------------------
_database_url = env_url(
    "DATABASE_URL",
    schemes=("postgres", "postgresql", "pgsql", "sqlite"),
    default=f"sqlite:///{VAR_DIR / 'db.sqlite3'}",
)
try:
    _database = dj_database_url.parse(
        _database_url,
        conn_max_age=env_int("DB_CONN_MAX_AGE", 60, minimum=0),
        conn_health_checks=True,
    )
except ValueError as exc:
    raise BadEnvironment(f"DATABASE_URL={redact_url(_database_url)!r} is invalid: {exc}") from None
if _database["ENGINE"] == "django.db.backends.sqlite3":
    # Web, workers and beat share one file: WAL lets readers run beside the single writer,
    # and IMMEDIATE transactions make writers queue on the busy timeout instead of failing.
    _database["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    _database["CONN_MAX_AGE"] = 0
    # Tests run watchers and workers in threads; an in-memory database's shared cache
    # locks whole tables without waiting, so tests use a file like `make run` does.
    _database["TEST"] = {"NAME": str(VAR_DIR / f"test-db-{os.getpid()}.sqlite3")}
else:
    _database.setdefault("OPTIONS", {})["connect_timeout"] = env_int(
        "DB_CONNECT_TIMEOUT", 5, minimum=1
    )
    # Statements a connection runs again and again (the session's user, every region's
    # refresh) are planned once: psycopg prepares a statement on its second run, which needs
    # parameters bound by the server. Measured on the Leases table refresh: a third less
    # PostgreSQL CPU per request. Connections are direct (no pooler in deploy/); a pooler in
    # transaction mode would need PgBouncer 1.21+ with max_prepared_statements.
    _database["OPTIONS"].update(server_side_binding=True, prepare_threshold=2)
DATABASES = {"default": _database}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: broker, cache and locks -----------------------------------------------------------
REDIS_URL = env_url("REDIS_URL", schemes=("redis", "rediss", "unix"))
CACHE_KEY_PREFIX = env_str("CACHE_KEY_PREFIX", "dashboard")

if REDIS_URL:
    _cache_backend: dict[str, object] = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "OPTIONS": {"socket_connect_timeout": 3, "socket_timeout": 5},
    }
else:
    # The embedded default: locks must be shared between web, workers and beat, which are
    # separate processes, so a per-process memory cache would not do.
    _cache_backend = {
        "BACKEND": "django.core.cache.backends.db.DatabaseCache",
        "LOCATION": "dashboard_cache",
    }
CACHES = {
    "default": {**_cache_backend, "KEY_PREFIX": f"{CACHE_KEY_PREFIX}:cache"},
    "locks": {**_cache_backend, "KEY_PREFIX": f"{CACHE_KEY_PREFIX}:lock", "TIMEOUT": 30},
}
if REDIS_URL:
    # Every request reads its session (and a shared partial) through the default cache:
    # Django's backend, keeping one redis-py client per pool instead of one per call. The
    # locks, a few calls a minute, keep Django's own.
    CACHES["default"]["BACKEND"] = "dashboard.cache.RedisCache"
    # Sessions read from Redis on every request, written through to the database: one
    # query less per page and per HTMX refresh, and logins survive a Redis restart.
    SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"

BROKER_DIR = VAR_DIR / "broker"
CELERY_BROKER_URL = REDIS_URL or "filesystem://localhost//"
# kombu's filesystem transport, but writing each message aside and renaming it into place:
# a worker must never pick up a message file that is still being written.
CELERY_BROKER_TRANSPORT = None if REDIS_URL else "dashboard.broker:Transport"
if REDIS_URL:
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {
        # Longer than any acks_late task may run, so an unacknowledged task is not
        # redelivered to a second worker while the first still works on it.
        "visibility_timeout": 3600,
        "socket_connect_timeout": 3,
    }
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
    }
    if not PRODUCTION:
        for _folder in ("queue", "control"):
            (BROKER_DIR / _folder).mkdir(parents=True, exist_ok=True)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = False  # opted into per task, only where the task is idempotent
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TIMEZONE = "UTC"
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# --- Watching -------------------------------------------------------------------------------
# Seconds between probes of each watched API server (leases.watch_probe): a one-lease list
# with a 3 s timeout that proves the server answers and the watch streams are current.
WATCH_PROBE_SECONDS = env_int("WATCH_PROBE_SECONDS", 1, minimum=1, maximum=30)
# A resource's data whose as-of moment is older than this is stale (leases.freshness): its
# states read "unknown", pages say so at the top, and no rule judges by it.
WATCH_STALE_SECONDS = env_int("WATCH_STALE_SECONDS", 10, minimum=3, maximum=300)

# --- Pages ----------------------------------------------------------------------------------
# Seconds between htmx refreshes of every page's live regions (templates read it as
# `refresh_seconds`, from dashboard.context_processors.page_refresh). Ages and countdowns tick
# in the browser in between, so a slower pace only delays news, never freezes the page.
PAGE_REFRESH_SECONDS = env_int("PAGE_REFRESH_SECONDS", 5, minimum=1, maximum=300)
# The Leases table region is rendered at most once per URL in this many seconds and shared by
# everyone polling it (0: render every request). Ages and countdowns tick in the browser.
LEASE_TABLE_CACHE_SECONDS = env_int("LEASE_TABLE_CACHE_SECONDS", 1, minimum=0, maximum=60)

# --- Mail -----------------------------------------------------------------------------------
# console:// (the default: mail printed to the log), dummy:// (dropped) and memory:// (kept in
# django.core.mail.outbox) name a backend and no server: env_url, which requires a host,
# checks only the SMTP URLs.
_LOCAL_MAIL_SCHEMES = ("console", "dummy", "memory")
_email_url = env_str("EMAIL_URL", "console://")
if _email_url.partition(":")[0].lower() not in _LOCAL_MAIL_SCHEMES:
    _email_url = env_url(
        "EMAIL_URL",
        schemes=("smtp", "smtps", "submission", "submit", *_LOCAL_MAIL_SCHEMES),
        default="console://",
    )
try:
    _email = dj_email_url.parse(_email_url)
except Exception as exc:  # dj-email-url raises bare exceptions on odd URLs
    raise BadEnvironment(f"EMAIL_URL={redact_url(_email_url)!r} is invalid: {exc}") from None
if _email_url.startswith("memory"):
    _email["EMAIL_BACKEND"] = "django.core.mail.backends.locmem.EmailBackend"
EMAIL_BACKEND = _email["EMAIL_BACKEND"]
if EMAIL_BACKEND == "django.core.mail.backends.smtp.EmailBackend":
    # The same SMTP client with a deadline on the whole session (alerts/smtp.py): a server
    # that trickles its answers must not hold the alerts worker longer than that.
    EMAIL_BACKEND = "alerts.smtp.DeadlineEmailBackend"
EMAIL_HOST = _email.get("EMAIL_HOST") or "localhost"
EMAIL_PORT = _email.get("EMAIL_PORT") or 25
EMAIL_HOST_USER = _email.get("EMAIL_HOST_USER") or ""
EMAIL_HOST_PASSWORD = _email.get("EMAIL_HOST_PASSWORD") or ""
EMAIL_USE_TLS = bool(_email.get("EMAIL_USE_TLS"))
EMAIL_USE_SSL = bool(_email.get("EMAIL_USE_SSL"))
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10, minimum=1)
EMAIL_DEADLINE_SECONDS = env_int("EMAIL_DEADLINE_SECONDS", 60, minimum=1)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "Lease dashboard <lease-dashboard@localhost>")
SERVER_EMAIL = DEFAULT_FROM_EMAIL

# --- Alerts ---------------------------------------------------------------------------------
# Defaults of the alert rules; each is also overridable per rule in admin (Alert rules).
ALERT_EMAIL_TO = env_list("ALERT_EMAIL_TO", [])
for _address in ALERT_EMAIL_TO:
    if "@" not in _address or any(character.isspace() for character in _address):
        raise BadEnvironment(f"ALERT_EMAIL_TO entry {_address!r} is not an e-mail address.")
ALERT_EVAL_SECONDS = env_int("ALERT_EVAL_SECONDS", 5, minimum=1, maximum=300)
ALERT_GROUP_SECONDS = env_int("ALERT_GROUP_SECONDS", 30, minimum=0, maximum=3600)
ALERT_REMIND_HOURS = env_int("ALERT_REMIND_HOURS", 4, minimum=0)  # 0: no reminders
ALERT_RETRY_HOURS = env_int("ALERT_RETRY_HOURS", 24, minimum=1)
# The longest silence a viewer (not an operator) may set, in hours; 0: viewers cannot
# silence. Operators may silence for up to 30 days, and also a resolved incident's key.
ALERT_VIEWER_SILENCE_MAX_HOURS = env_int(
    "ALERT_VIEWER_SILENCE_MAX_HOURS", 4, minimum=0, maximum=720
)
# Chat and webhook channels (alerts.AlertChannel): each socket operation's timeout...
ALERT_CHANNEL_TIMEOUT = env_int("ALERT_CHANNEL_TIMEOUT", 10, minimum=1, maximum=120)
# ...and the whole post's (connect, sending, the answer): a trickling endpoint is a retry.
ALERT_CHANNEL_DEADLINE_SECONDS = env_int(
    "ALERT_CHANNEL_DEADLINE_SECONDS", 30, minimum=1, maximum=300
)
# Unset: one more leaseDurationSeconds of each lease.
ALERT_LEASE_GRACE_SECONDS: int | None = (
    env_int("ALERT_LEASE_GRACE_SECONDS", 0, minimum=0)
    if env_optional("ALERT_LEASE_GRACE_SECONDS") is not None
    else None
)
ALERT_NODE_GRACE_SECONDS = env_int("ALERT_NODE_GRACE_SECONDS", 0, minimum=0)
# The same 3 changes in 10 minutes the Leases page calls flapping.
ALERT_FLAP_CHANGES = env_int("ALERT_FLAP_CHANGES", 3, minimum=2)
ALERT_FLAP_WINDOW_SECONDS = env_int("ALERT_FLAP_WINDOW_SECONDS", 600, minimum=10)
# Seconds past the data's as-of moment before `source_stale` opens (with the 5 s
# evaluation, within 25 s of the data going quiet).
ALERT_WATCH_STALE_SECONDS = env_int("ALERT_WATCH_STALE_SECONDS", 20, minimum=10)
ALERT_NKS_GRACE_POLLS = env_int("ALERT_NKS_GRACE_POLLS", 2, minimum=0)
ALERT_NKS_STALE_POLLS = env_int("ALERT_NKS_STALE_POLLS", 3, minimum=1)
# A poll that has run this long is stuck (its time limit did not stop it, or its worker died
# mid-poll): the `nks_poll_stuck` rule's default threshold. None: twice the poll's time limit.
ALERT_NKS_POLL_STUCK_SECONDS: int | None = (
    env_int("ALERT_NKS_POLL_STUCK_SECONDS", 240, minimum=10)
    if env_optional("ALERT_NKS_POLL_STUCK_SECONDS") is not None
    else None
)
ALERT_RESIZE_FAILED_HOURS = env_int("ALERT_RESIZE_FAILED_HOURS", 24, minimum=1)

# --- Time -----------------------------------------------------------------------------------
TIME_ZONE = env_str("TIME_ZONE", "UTC")
try:
    zoneinfo.ZoneInfo(TIME_ZONE)
except (zoneinfo.ZoneInfoNotFoundError, ValueError):
    raise BadEnvironment(
        f"TIME_ZONE={TIME_ZONE!r} is not a known time zone (e.g. UTC, Asia/Seoul)."
    ) from None
USE_TZ = True  # stored in UTC, shown in each person's zone (TIME_ZONE until they choose)
# Korean and English (issue 12): a person's saved choice, then the browser's Accept-Language,
# then LANGUAGE_CODE (dashboard.preferences). API terms stay as the APIs spell them.
LANGUAGES = [("en", "English"), ("ko", "한국어")]
LANGUAGE_CODE = env_choice("LANGUAGE_CODE", "en", tuple(code for code, _ in LANGUAGES))
USE_I18N = True
LOCALE_PATHS = [BASE_DIR / "locale"]
# The language cookie (the header's switch, the preferences page) is for the server alone,
# and as guarded as the session's.
LANGUAGE_COOKIE_HTTPONLY = True
LANGUAGE_COOKIE_SAMESITE = "Lax"
LANGUAGE_COOKIE_SECURE = PRODUCTION
# Alert mail to ALERT_EMAIL_TO addresses (people without a saved choice of their own).
ALERT_EMAIL_LANGUAGE = env_choice(
    "ALERT_EMAIL_LANGUAGE", LANGUAGE_CODE, tuple(code for code, _ in LANGUAGES)
)

# --- Auth -----------------------------------------------------------------------------------
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "overview"
LOGOUT_REDIRECT_URL = "login"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# --- Sign-in (OIDC, throttling) ---------------------------------------------------------------
# Single sign-on with an OpenID Connect provider (dashboard/oidc.py). Endpoints come from
# OIDC_ISSUER's discovery document, fetched at the first sign-in, never here: settings must
# load without the network. Explicit OIDC_OP_* endpoints replace discovery (or parts of it).
_oidc_schemes = ("https",) if PRODUCTION else ("https", "http")
OIDC_ISSUER = (env_url("OIDC_ISSUER", schemes=_oidc_schemes) or "").rstrip("/") or None
OIDC_OP_AUTHORIZATION_ENDPOINT = env_url("OIDC_OP_AUTHORIZATION_ENDPOINT", schemes=_oidc_schemes)
OIDC_OP_TOKEN_ENDPOINT = env_url("OIDC_OP_TOKEN_ENDPOINT", schemes=_oidc_schemes)
OIDC_OP_USER_ENDPOINT = env_url("OIDC_OP_USER_ENDPOINT", schemes=_oidc_schemes)
OIDC_OP_JWKS_ENDPOINT = env_url("OIDC_OP_JWKS_ENDPOINT", schemes=_oidc_schemes)
OIDC_RP_CLIENT_ID = env_optional("OIDC_CLIENT_ID")
OIDC_RP_CLIENT_SECRET = env_optional("OIDC_CLIENT_SECRET")  # or OIDC_CLIENT_SECRET_FILE
OIDC_RP_SIGN_ALGO = env_str("OIDC_RP_SIGN_ALGO", "RS256").strip().upper()
_oidc_algorithms = ("RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "HS256")
if OIDC_RP_SIGN_ALGO not in _oidc_algorithms:
    raise BadEnvironment(
        f"OIDC_RP_SIGN_ALGO={OIDC_RP_SIGN_ALGO!r} is not one of: {', '.join(_oidc_algorithms)}."
    )
OIDC_RP_SCOPES = " ".join(env_str("OIDC_SCOPES", "openid email profile").split())
if "openid" not in OIDC_RP_SCOPES.split():
    raise BadEnvironment(f"OIDC_SCOPES={OIDC_RP_SCOPES!r} must include openid.")
OIDC_USERNAME_CLAIM = env_str("OIDC_USERNAME_CLAIM", "preferred_username")
OIDC_GROUPS_CLAIM = env_str("OIDC_GROUPS_CLAIM", "groups")
# Values of the groups claim that make a user a member of `operators` (re-applied at every
# single sign-on: added when one is present, removed when none is).
OIDC_OPERATOR_GROUPS = env_list("OIDC_OPERATOR_GROUPS", [])
# Hide the password form; it stays reachable at /login/?local=1 for superusers only.
OIDC_ONLY = env_bool("OIDC_ONLY", False)
OIDC_TIMEOUT = 10
OIDC_VERIFY_SSL = True
OIDC_USE_PKCE = True
OIDC_CREATE_USER = True
OIDC_CALLBACK_CLASS = "dashboard.oidc.CallbackView"
OIDC_AUTHENTICATE_CLASS = "dashboard.oidc.AuthenticateView"

_oidc_endpoint_names = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": OIDC_OP_AUTHORIZATION_ENDPOINT,
    "OIDC_OP_TOKEN_ENDPOINT": OIDC_OP_TOKEN_ENDPOINT,
    "OIDC_OP_USER_ENDPOINT": OIDC_OP_USER_ENDPOINT,
}
if not OIDC_RP_SIGN_ALGO.startswith("HS"):
    _oidc_endpoint_names["OIDC_OP_JWKS_ENDPOINT"] = OIDC_OP_JWKS_ENDPOINT
_oidc_settings = {
    "OIDC_ISSUER": OIDC_ISSUER,
    "OIDC_CLIENT_ID": OIDC_RP_CLIENT_ID,
    "OIDC_CLIENT_SECRET": OIDC_RP_CLIENT_SECRET,
    "OIDC_OPERATOR_GROUPS": OIDC_OPERATOR_GROUPS,
    "OIDC_ONLY": OIDC_ONLY,
    **_oidc_endpoint_names,
}
if any(_oidc_settings.values()):
    # Half a configuration is a broken sign-in button: refuse to start, naming what is
    # missing (by name only: the secret's value never appears in a message).
    _given = ", ".join(name for name, value in _oidc_settings.items() if value)
    for _name in ("OIDC_CLIENT_ID", "OIDC_CLIENT_SECRET"):
        if not _oidc_settings[_name]:
            raise BadEnvironment(f"{_name} is required for single sign-on (set: {_given}).")
    if not OIDC_ISSUER:
        for _name, _value in _oidc_endpoint_names.items():
            if not _value:
                raise BadEnvironment(
                    f"{_name} is required for single sign-on without OIDC_ISSUER "
                    f"(or set OIDC_ISSUER to discover it; set: {_given})."
                )

# Local password sign-ins (this form and the admin's) are throttled by Axes: 5 failures for
# one user name from one address lock that pair out for 15 minutes. Attempts during the
# lockout do not extend it, so the page can say honestly when to try again.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # first: refuses a locked-out pair before any check
    "dashboard.oidc.PasswordBackend",
    "dashboard.oidc.OidcBackend",
]
AXES_FAILURE_LIMIT = 5
AXES_COOLOFF_TIME = timedelta(minutes=15)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_LOCKOUT_CALLABLE = "dashboard.oidc.lockout_response"
AXES_WHITELIST_CALLABLE = "dashboard.oidc.is_single_sign_on_attempt"
# Masked in Axes' records and logs, besides the password it always masks.
AXES_SENSITIVE_PARAMETERS = ["username", "ip_address", "code", "state", "csrfmiddlewaretoken"]

# --- Metrics --------------------------------------------------------------------------------
# Production serves /metrics only to the METRICS_TOKEN bearer (unset: metrics are off);
# METRICS_ALLOWED_IPS then only narrows where from. Development also lets these addresses in
# without a token (loopback by default). See dashboard/metrics.py.
METRICS_TOKEN = env_optional("METRICS_TOKEN")
METRICS_ALLOWED_IPS = env_networks(
    "METRICS_ALLOWED_IPS", [] if PRODUCTION else ["127.0.0.1/32", "::1/128"]
)
# Leader-election and control-plane leases with series of their own in /metrics, shared
# fairly among clusters: a hostile or huge API server's leases cannot make a scrape megabytes
# (leases/metrics.py). The rest are counted per cluster (lease_series_omitted).
METRICS_MAX_ELECTION_LEASES = env_int("METRICS_MAX_ELECTION_LEASES", 2000, minimum=0)
# Peers whose X-Forwarded-For is believed (an ingress or load balancer you run); empty: the
# header is ignored and the peer's own address is the client's (dashboard/proxies.py).
TRUSTED_PROXY_CIDRS = env_networks("TRUSTED_PROXY_CIDRS", [])

# --- Static files ---------------------------------------------------------------------------
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(BASE_DIR / "staticfiles")))
if not PRODUCTION:
    # Serve straight from the source folders; nothing to collect while developing.
    WHITENOISE_USE_FINDERS = True
    WHITENOISE_AUTOREFRESH = True
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if PRODUCTION
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}

# --- Security -------------------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
    if env_bool("SECURE_PROXY_SSL_HEADER", True):
        # Behind an ingress or load balancer that terminates TLS and sets X-Forwarded-Proto.
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    if not SECURE_HSTS_PRELOAD:
        # Submitting a domain to browsers' HSTS preload lists is an operator's decision
        # for the whole domain, not something a dashboard should presume.
        SILENCED_SYSTEM_CHECKS = ["security.W021"]
    if REDIS_URL is None or _database["ENGINE"] == "django.db.backends.sqlite3":
        raise BadEnvironment(
            "Production needs DATABASE_URL (PostgreSQL) and REDIS_URL: SQLite and the "
            "filesystem broker cannot be shared between pods."
        )

# --- Content-Security-Policy ----------------------------------------------------------------
# Only this site: every script and style is a static file (no inline code, no style
# attributes, no eval), so markup smuggled in through data (a lease's holderIdentity, NKS
# names) cannot run or restyle the page. form-action also governs where a form's redirect may
# go: the sign-in form redirects to the OIDC provider, so its origin is allowed when set.
# Read from the environment (not the OIDC settings), so this section does not depend on
# where those settings are defined.
_form_action = ["'self'"]
for _name in ("OIDC_OP_AUTHORIZATION_ENDPOINT", "OIDC_ISSUER"):
    _parts = urlsplit(env_optional(_name) or "")
    if _parts.scheme in ("http", "https") and _parts.netloc:
        _provider = f"{_parts.scheme}://{_parts.netloc.rsplit('@', 1)[-1]}"
        if _provider not in _form_action:
            _form_action.append(_provider)
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "frame-ancestors": ["'none'"],
        "form-action": _form_action,
        "base-uri": ["'self'"],
        "object-src": ["'none'"],
    },
}

# --- NKS (NHN Kubernetes Service) -------------------------------------------------------------
# Accounts are rows (admin or `add_nks_account`); their secrets never come from here.
# Each account is polled this often; its data counts as stale after three missed polls.
NKS_POLL_SECONDS = env_int("NKS_POLL_SECONDS", 30, minimum=5, maximum=3600)
NKS_POLL_WORKERS = env_int("NKS_POLL_WORKERS", 32, minimum=1, maximum=256)
# Each socket operation's limit (connect at most 5 s of it, each read, each write)...
NKS_HTTP_TIMEOUT = env_int("NKS_HTTP_TIMEOUT", 20, minimum=1, maximum=300)
# ...and each whole client call's: connect, every read, the body, retries, their waits and
# any token request; a server trickling bytes cannot hold a poll past it. Answers larger
# than NKS_HTTP_MAX_BODY_BYTES (or compressed: identity is asked for) are refused unread.
NKS_HTTP_DEADLINE_SECONDS = env_int("NKS_HTTP_DEADLINE_SECONDS", 30, minimum=1, maximum=600)
NKS_HTTP_MAX_BODY_BYTES = env_int(
    "NKS_HTTP_MAX_BODY_BYTES", 8 * 1024 * 1024, minimum=64 * 1024, maximum=256 * 1024 * 1024
)
# A poll still running after this long is stopped (Celery's soft time limit) and recorded as
# a failure on its account; its worker process is killed 30 s later if it does not stop.
# The poll's lock outlives the hard limit, so two polls of one account never overlap.
NKS_POLL_TIME_LIMIT_SECONDS = env_int("NKS_POLL_TIME_LIMIT_SECONDS", 120, minimum=10, maximum=3600)
NKS_MAX_NODES_PER_NODEGROUP = env_int("NKS_MAX_NODES_PER_NODEGROUP", 10, minimum=1, maximum=1000)
NKS_HEALTH_HISTORY_DAYS = env_int("NKS_HEALTH_HISTORY_DAYS", 7, minimum=1, maximum=366)
# After a resize is sent, its progress is read back this often, for at most this long.
NKS_RESIZE_FOLLOW_SECONDS = env_int("NKS_RESIZE_FOLLOW_SECONDS", 3, minimum=1, maximum=60)
NKS_RESIZE_FOLLOW_MINUTES = env_int("NKS_RESIZE_FOLLOW_MINUTES", 30, minimum=1, maximum=24 * 60)
# Retries of NKS reads (never of writes) and the first backoff; tests shorten them.
NKS_HTTP_RETRIES = 3
NKS_HTTP_BACKOFF = 0.5
# Where a kubeconfig that NKS hands out (the "Watch this cluster" button) may send the
# watchers (leases/egress.py): https only, the API address NKS reports, public addresses only.
# NKS_KUBECONFIG_ALLOW_PRIVATE: "false", "true" (the private ranges: 10/8, 172.16/12,
# 192.168/16, 100.64/10, fc00::/7) or a comma-separated list of networks, which may name any
# range, loopback included (the demo's fake API server: 127.0.0.0/8). An operator's own
# kubeconfig (admin, add_kube_cluster) is not restricted: its host is the operator's choice.
_NKS_PRIVATE_NETWORKS = [
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "fc00::/7",
]
_allow_private = env_str("NKS_KUBECONFIG_ALLOW_PRIVATE", "false").strip().lower()
if _allow_private in ("", "false", "0", "no", "off"):
    NKS_KUBECONFIG_ALLOW_PRIVATE: list[str] = []
elif _allow_private in ("true", "1", "yes", "on"):
    NKS_KUBECONFIG_ALLOW_PRIVATE = _NKS_PRIVATE_NETWORKS
else:
    NKS_KUBECONFIG_ALLOW_PRIVATE = env_networks("NKS_KUBECONFIG_ALLOW_PRIVATE")
# Plain http to an NKS-sourced API server: the token would travel unencrypted. For a test
# setup only (the demo's fake).
NKS_KUBECONFIG_ALLOW_HTTP = env_bool("NKS_KUBECONFIG_ALLOW_HTTP", False)

# --- Logging --------------------------------------------------------------------------------
LOG_LEVEL = env_choice("LOG_LEVEL", "info", ("debug", "info", "warning", "error")).upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Request bodies and headers may carry tokens; keep Django's request log terse.
        "django.request": {"level": "ERROR"},
        "kubernetes": {"level": "WARNING"},
        "urllib3": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        # Lockouts are warnings; Axes' per-attempt chatter at INFO is not worth a log line.
        "axes": {"level": "WARNING"},
    },
}

# --- The dashboard watches itself: the dead-man's switch -------------------------------------
# After a completed alert evaluation, at most every DEADMAN_INTERVAL_SECONDS, the alerts worker
# pings DEADMAN_URL (Healthchecks.io style: https://hc-ping.com/<uuid>). When the pings stop,
# the service outside raises the alarm that a dead dashboard cannot. Off when unset. The URL
# holds the check's key: it is a secret (DEADMAN_URL_FILE too), never logged or shown, and
# kept under a name Django's error reports hide (they mask names with SECRET).
_deadman_url = env_optional("DEADMAN_URL")
# Plain http would show the key to every hop: for a test setup only.
DEADMAN_ALLOW_HTTP = env_bool("DEADMAN_ALLOW_HTTP", False)
if _deadman_url:
    # The messages never quote the URL: it is the secret.
    try:
        _deadman_parts = urlsplit(_deadman_url)
        _deadman_host = _deadman_parts.hostname
    except ValueError:
        raise BadEnvironment("DEADMAN_URL is not a valid URL.") from None
    if "@" in _deadman_parts.netloc or not _deadman_host:
        raise BadEnvironment("DEADMAN_URL must name a host, without a user name or password.")
    if _deadman_parts.scheme != "https" and not (
        DEADMAN_ALLOW_HTTP and _deadman_parts.scheme == "http"
    ):
        raise BadEnvironment("DEADMAN_URL must use https:// (DEADMAN_ALLOW_HTTP allows http).")
DEADMAN_SECRET_URL: str | None = _deadman_url
DEADMAN_INTERVAL_SECONDS = env_int("DEADMAN_INTERVAL_SECONDS", 60, minimum=1, maximum=3600)
# One ping's total deadline (connect, request, answer); the ping task's time limit is above it.
DEADMAN_TIMEOUT_SECONDS = env_int("DEADMAN_TIMEOUT_SECONDS", 10, minimum=1, maximum=30)
DEADMAN_METHOD = env_choice("DEADMAN_METHOD", "get", ("get", "post")).upper()
# After an evaluation with rule errors: ping <DEADMAN_URL>/fail (Healthchecks' failure
# signal) instead of staying silent until the service's grace time runs out.
DEADMAN_PING_FAIL = env_bool("DEADMAN_PING_FAIL", False)
# httpcore's debug lines quote every answer's headers, a redirect's Location too, which may
# carry such a key: at LOG_LEVEL=debug they would put it in the log.
LOGGING["loggers"]["httpcore"] = {"level": "WARNING"}

# --- History retention ------------------------------------------------------------------------
# History older than these is deleted by `dashboard.retention` (beat, hourly, in batches).
# HISTORY_RETENTION_DAYS: Lease holder changes, holder spans, watch coverage, Node Ready changes
# and NKS events. At least HISTORY_RETENTION_MIN_DAYS: availability, the strip and the recent
# gaps read 7 days back (leases.availability.WINDOWS) and a day's slack covers the hourly run;
# the alert rules read far less (flapping 10 min, fencing reuse 24 h by default). What tells
# the present is kept however old: each lease's and node's latest change, the span before the
# window, the open spans and each cluster's newest coverage row.
HISTORY_RETENTION_MIN_DAYS = 8
HISTORY_RETENTION_DAYS = env_int(
    "HISTORY_RETENTION_DAYS", 30, minimum=HISTORY_RETENTION_MIN_DAYS, maximum=3660
)
# INCIDENT_RETENTION_DAYS: resolved incidents (counted from their resolution) with their
# timeline and the notifications about them only. Open and pending incidents are kept, and so
# is a resolved one while a message about it waits to be sent. At least a week and longer than
# ALERT_RETRY_HOURS: a resolution is announced within that horizon (alerts.channels.planning).
INCIDENT_RETENTION_DAYS = env_int(
    "INCIDENT_RETENTION_DAYS",
    90,
    minimum=max(7, -(-ALERT_RETRY_HOURS // 24) + 1),
    maximum=3660,
)
# Rows per DELETE, each in its own short transaction; and how long one run may delete before
# it stops (the next run continues): a month's backlog never holds a worker or a lock long.
HISTORY_PRUNE_BATCH = env_int("HISTORY_PRUNE_BATCH", 5000, minimum=100, maximum=50_000)
HISTORY_PRUNE_BUDGET_SECONDS = env_int("HISTORY_PRUNE_BUDGET_SECONDS", 60, minimum=5, maximum=600)
