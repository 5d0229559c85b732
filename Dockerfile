# The dashboard image: one image for web, workers and beat (the command differs).
# A tag names a release line, not bytes: to build from exactly the base you reviewed, pin it
# by digest, read from the registry you pull from (never copied from elsewhere), e.g.
#   docker buildx imagetools inspect python:3.12-slim-bookworm   (the "Digest:" line)
# and then FROM python:3.12-slim-bookworm@sha256:<that digest>
FROM python:3.12-slim-bookworm AS base

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=dashboard.settings

WORKDIR /app
# The runtime user owns nothing here: the code, the installed packages and the collected
# static files stay root's and read-only to it, so a compromised process cannot rewrite the
# code it runs. Nothing under /app is written at run time (beat's schedule goes to /tmp).
RUN useradd --system --uid 10001 --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin dashboard

# Every package pinned with its hashes (requirements.lock, made from requirements.txt; see
# the README): a changed or substituted file on the index fails the build. --no-deps: the
# lock is complete, so nothing unhashed can be pulled in as a dependency.
COPY requirements.lock ./
RUN pip install --require-hashes --no-deps -r requirements.lock

# .dockerignore is an allow-list: only the apps, templates, static files and catalogs come in.
COPY . .
# Translations need no gettext here: the compiled catalogs (locale/**/django.mo) are committed
# (make compilemessages) and tests/test_translations.py checks they match their .po files.
# collectstatic only reads files; the throw-away values satisfy production settings at build.
RUN DJANGO_ENV=production \
    SECRET_KEY=build-only-not-a-secret-build-only-not-a-secret-build-only \
    SECRETS_ENCRYPTION_KEYS=YnVpbGQtb25seS1ub3QtYS1zZWNyZXQtYnVpbGRvbmw= \
    ALLOWED_HOSTS=build DATABASE_URL=postgres://build@build/build REDIS_URL=redis://build:6379/0 \
    python manage.py collectstatic --noinput \
    && chmod -R go-w /app

# OCI labels: `make image` passes the version (pyproject.toml), the commit and where the
# source lives, so a running container can be traced back to its code.
ARG VERSION=unknown
ARG REVISION=unknown
ARG SOURCE=""
LABEL org.opencontainers.image.title="lease-dashboard" \
      org.opencontainers.image.description="Kubernetes Lease and NKS cluster health dashboard" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION" \
      org.opencontainers.image.source="$SOURCE"

USER dashboard
# Liveness files (dashboard.liveness), under /tmp: the one writable place of a read-only root.
# Healthchecks and probes stat them instead of running `celery inspect ping`.
ENV DJANGO_ENV=production \
    CELERY_LIVENESS_FILE=/tmp/celery-worker-alive \
    CELERY_BEAT_LIVENESS_FILE=/tmp/celery-beat-alive
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status != 200)"
# --no-control-socket: gunicorn 27 would put its control socket under the working directory,
# which a read-only root refuses (an ERROR at every start); nothing here uses it.
# --graceful-timeout 20: a stop lets requests finish (each is cut at 30 s) well within
# compose's stop_grace_period and Kubernetes' terminationGracePeriodSeconds (30 s).
CMD ["gunicorn", "dashboard.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", \
     "--threads", "4", "--access-logfile", "-", "--timeout", "30", "--graceful-timeout", "20", \
     "--no-control-socket"]
