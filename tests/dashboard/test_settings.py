from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from dashboard.env import BadEnvironment, env_bool, env_int, env_list, env_str, env_url, redact_url
from tests.conftest import run_django

PRODUCTION_ENV = {
    "DJANGO_ENV": "production",
    "SECRET_KEY": secrets.token_urlsafe(60),
    "SECRETS_ENCRYPTION_KEYS": Fernet.generate_key().decode(),
    "ALLOWED_HOSTS": "dashboard.example.org",
    "DATABASE_URL": "postgres://dashboard@db.internal:5432/dashboard",
    "REDIS_URL": "redis://redis.internal:6379/0",
}


def test_bool_reader_accepts_common_words_and_names_the_variable_otherwise() -> None:
    assert env_bool("DEBUG", False, environ={"DEBUG": "yes"}) is True
    assert env_bool("DEBUG", True, environ={"DEBUG": "off"}) is False
    assert env_bool("DEBUG", True, environ={}) is True
    with pytest.raises(BadEnvironment, match="DEBUG='maybe' is not a boolean"):
        env_bool("DEBUG", False, environ={"DEBUG": "maybe"})


def test_int_reader_checks_number_and_bounds() -> None:
    assert env_int("N", 5, environ={"N": " 7 "}) == 7
    with pytest.raises(BadEnvironment, match="N='seven' is not a whole number"):
        env_int("N", 5, environ={"N": "seven"})
    with pytest.raises(BadEnvironment, match="N=0 is below the minimum of 1"):
        env_int("N", 5, minimum=1, environ={"N": "0"})


def test_list_reader_splits_and_trims() -> None:
    assert env_list("HOSTS", environ={"HOSTS": " a.example, b.example ,,"}) == [
        "a.example",
        "b.example",
    ]
    assert env_list("HOSTS", ["x"], environ={}) == ["x"]


def test_secret_is_read_from_file_variable(tmp_path: Path) -> None:
    secret_file = tmp_path / "key"
    secret_file.write_text("from-a-file\n")
    assert env_str("SECRET_KEY", environ={"SECRET_KEY_FILE": str(secret_file)}) == "from-a-file"


def test_secret_given_twice_is_refused(tmp_path: Path) -> None:
    secret_file = tmp_path / "key"
    secret_file.write_text("a")
    with pytest.raises(BadEnvironment, match="SECRET_KEY and SECRET_KEY_FILE are both set"):
        env_str("SECRET_KEY", environ={"SECRET_KEY": "b", "SECRET_KEY_FILE": str(secret_file)})


def test_unreadable_secret_file_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(BadEnvironment, match="SECRET_KEY_FILE points at"):
        env_str("SECRET_KEY", environ={"SECRET_KEY_FILE": str(tmp_path / "missing")})


def test_url_reader_rejects_wrong_scheme_without_echoing_the_password() -> None:
    with pytest.raises(BadEnvironment) as error:
        env_url(
            "DATABASE_URL",
            schemes=("postgres",),
            environ={"DATABASE_URL": "mysql://admin:hunter2@db/x"},
        )
    assert "DATABASE_URL" in str(error.value)
    assert "hunter2" not in str(error.value)


def test_redact_url_hides_only_the_password() -> None:
    assert (
        redact_url("smtp://mailer:s3cret@mail.example:587") == "smtp://mailer:***@mail.example:587"
    )
    assert redact_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("DEBUG", "maybe", "DEBUG='maybe' is not a boolean"),
        ("DATABASE_URL", "mysql://root:pw@db/x", "DATABASE_URL must start with"),
        ("REDIS_URL", "http://127.0.0.1:6379", "REDIS_URL must start with"),
        ("EMAIL_URL", "smtp://user:topsecret@:notaport", "EMAIL_URL"),
        (
            "TIME_ZONE",
            "Mars/Olympus_Mons",
            "TIME_ZONE='Mars/Olympus_Mons' is not a known time zone",
        ),
        ("DJANGO_ENV", "staging", "DJANGO_ENV='staging' is not one of"),
        ("DB_CONN_MAX_AGE", "-1", "DB_CONN_MAX_AGE=-1 is below the minimum"),
        ("METRICS_ALLOWED_IPS", "10.0.0.0/99", "METRICS_ALLOWED_IPS"),
        ("CSRF_TRUSTED_ORIGINS", "dashboard.example.org", "CSRF_TRUSTED_ORIGINS entry"),
    ],
)
def test_bad_value_stops_start_up_naming_the_variable(
    variable: str, value: str, message: str
) -> None:
    result = run_django("", env={variable: value})
    assert result.returncode != 0
    assert message in result.stderr
    assert "topsecret" not in result.stderr and "pw@" not in result.stderr


def test_production_requires_a_secret_key() -> None:
    env = {key: value for key, value in PRODUCTION_ENV.items() if key != "SECRET_KEY"}
    result = run_django("", env=env)
    assert result.returncode != 0
    assert "SECRET_KEY is required but not set" in result.stderr


def test_production_refuses_the_embedded_broker_and_sqlite() -> None:
    env = {key: value for key, value in PRODUCTION_ENV.items() if key != "REDIS_URL"}
    result = run_django("", env=env)
    assert result.returncode != 0
    assert "Production needs DATABASE_URL (PostgreSQL) and REDIS_URL" in result.stderr


def test_production_secret_key_can_come_from_a_file(tmp_path: Path) -> None:
    key = secrets.token_urlsafe(60)
    (tmp_path / "secret").write_text(key)
    env = {key_: value for key_, value in PRODUCTION_ENV.items() if key_ != "SECRET_KEY"}
    env["SECRET_KEY_FILE"] = str(tmp_path / "secret")
    result = run_django(
        "from django.conf import settings\nimport hashlib\n"
        "print(hashlib.sha256(settings.SECRET_KEY.encode()).hexdigest())",
        env=env,
    )
    assert result.returncode == 0, result.stderr
    import hashlib

    assert result.stdout.strip() == hashlib.sha256(key.encode()).hexdigest()


def test_check_deploy_is_clean_in_production_mode() -> None:
    result = run_django(
        "from django.core.management import call_command\n"
        "call_command('check', deploy=True, fail_level='WARNING')",
        env=PRODUCTION_ENV,
    )
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout + result.stderr


def test_settings_switch_to_redis_and_postgres_from_urls() -> None:
    result = run_django(
        "from django.conf import settings as s\n"
        "print(s.DATABASES['default']['ENGINE'], s.DATABASES['default']['HOST'])\n"
        "print(s.CACHES['locks']['BACKEND'], s.CELERY_BROKER_URL)\n"
        "print(s.EMAIL_HOST, s.EMAIL_PORT, s.EMAIL_USE_TLS)",
        env={
            "DATABASE_URL": "postgres://u@db.internal:5432/x",
            "REDIS_URL": "redis://cache.internal:6379/2",
            "EMAIL_URL": "submission://mailer:pw@mail.internal:587",
        },
    )
    assert result.returncode == 0, result.stderr
    db_line, cache_line, mail_line = result.stdout.strip().splitlines()
    assert db_line == "django.db.backends.postgresql db.internal"
    assert cache_line == "django.core.cache.backends.redis.RedisCache redis://cache.internal:6379/2"
    assert mail_line == "mail.internal 587 True"


def test_embedded_default_uses_sqlite_filesystem_broker_and_database_cache() -> None:
    result = run_django(
        "from django.conf import settings as s\n"
        "print(s.DATABASES['default']['ENGINE'])\n"
        "print(s.CACHES['locks']['BACKEND'], s.CELERY_BROKER_URL)\n"
        "print(s.EMAIL_BACKEND)",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "django.db.backends.sqlite3",
        "django.core.cache.backends.db.DatabaseCache",
        "filesystem://localhost//",
        "django.core.mail.backends.console.EmailBackend",
    ]


@pytest.mark.parametrize(
    ("email_url", "backend"),
    [
        ("console://", "django.core.mail.backends.console.EmailBackend"),
        ("dummy://", "django.core.mail.backends.dummy.EmailBackend"),
        ("memory://", "django.core.mail.backends.locmem.EmailBackend"),
    ],
)
def test_mail_urls_without_a_server_start_up(email_url: str, backend: str) -> None:
    # console:// is the README's default; these name a backend and no host.
    result = run_django(
        "from django.conf import settings as s\nprint(s.EMAIL_BACKEND)",
        env={"EMAIL_URL": email_url},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == backend


def test_an_smtp_url_without_a_host_still_stops_start_up() -> None:
    result = run_django("", env={"EMAIL_URL": "smtp://"})
    assert result.returncode != 0
    assert "EMAIL_URL='smtp://' has no host" in result.stderr


def test_links_default_to_the_address_make_run_serves() -> None:
    code = "from django.conf import settings; print(settings.DASHBOARD_URL)"
    served = run_django(code, env={"DASHBOARD_PORT": "18555"})
    assert served.stdout.strip() == "http://127.0.0.1:18555", served.stderr
    assert run_django(code).stdout.strip() == "http://127.0.0.1:8000"
    named = run_django(code, env={"DASHBOARD_PORT": "18555", "DASHBOARD_URL": "https://d.example/"})
    assert named.stdout.strip() == "https://d.example"
