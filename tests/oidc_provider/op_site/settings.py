"""Settings of the test OpenID provider: a separate site with its own SQLite database.

Only for tests: the database path comes from OP_DATABASE, nothing is kept after a run.
"""

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent

SECRET_KEY = os.environ.get("OP_SECRET_KEY", "test-provider-only-" + "x" * 40)
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oidc_provider",
    "op_site",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "op_site.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
            ],
        },
    },
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["OP_DATABASE"]}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
# Tests create users by the dozen; the default hasher would cost seconds each run.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# The dashboard may run on the same host name: its cookies and ours must not collide.
SESSION_COOKIE_NAME = "op_sessionid"
CSRF_COOKIE_NAME = "op_csrftoken"
LOGIN_URL = "/accounts/login/"

OIDC_USERINFO = "op_site.claims.userinfo"
OIDC_EXTRA_SCOPE_CLAIMS = "op_site.claims.GroupsScopeClaims"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    # Request lines ("GET /openid/... 200") let tests count what the dashboard asked for.
    "loggers": {"django.server": {"handlers": ["console"], "level": "INFO"}},
}
