# The dashboard image: one image for web, workers and beat (the command differs).
FROM python:3.12-slim AS base

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DJANGO_SETTINGS_MODULE=dashboard.settings

WORKDIR /app
RUN useradd --system --uid 10001 --home-dir /app dashboard

COPY requirements.txt ./
RUN pip install -r requirements.txt

COPY . .
# Translations need no gettext here: the compiled catalogs (locale/**/django.mo) are committed
# (make compilemessages) and tests/test_translations.py checks they match their .po files.
# collectstatic only reads files; the throw-away values satisfy production settings at build.
RUN DJANGO_ENV=production \
    SECRET_KEY=build-only-not-a-secret-build-only-not-a-secret-build-only \
    SECRETS_ENCRYPTION_KEYS=YnVpbGQtb25seS1ub3QtYS1zZWNyZXQtYnVpbGRvbmw= \
    ALLOWED_HOSTS=build DATABASE_URL=postgres://build@build/build REDIS_URL=redis://build:6379/0 \
    python manage.py collectstatic --noinput \
    && chown -R dashboard /app

USER dashboard
ENV DJANGO_ENV=production
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status != 200)"
CMD ["gunicorn", "dashboard.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", "--threads", "4", "--access-logfile", "-", "--timeout", "30"]
