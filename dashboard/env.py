"""Typed readers for settings that come from the environment.

Each reader names the variable in its error, so a bad deployment stops at start-up with a
message an operator can act on instead of failing later in a worker. Secrets may also be
given as ``<NAME>_FILE`` (a path, as Docker and Kubernetes secrets are mounted); the file's
content wins over nothing, but setting both is refused as ambiguous.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off", ""})


class BadEnvironment(ImproperlyConfigured):
    """A variable is missing or malformed; the message names it and never echoes a secret."""


def _raw(name: str, environ: Mapping[str, str]) -> str | None:
    value = environ.get(name)
    file_name = environ.get(f"{name}_FILE")
    if file_name is None:
        return value
    if value is not None:
        raise BadEnvironment(f"{name} and {name}_FILE are both set; set only one of them.")
    try:
        return Path(file_name).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise BadEnvironment(
            f"{name}_FILE points at {file_name!r}, which cannot be read: {exc.strerror}."
        ) from None


def env_str(
    name: str, default: str | None = None, *, environ: Mapping[str, str] = os.environ
) -> str:
    value = _raw(name, environ)
    if value is None or value == "":
        if default is None:
            raise BadEnvironment(f"{name} is required but not set.")
        return default
    return value


def env_optional(name: str, *, environ: Mapping[str, str] = os.environ) -> str | None:
    value = _raw(name, environ)
    return value or None


def env_bool(name: str, default: bool, *, environ: Mapping[str, str] = os.environ) -> bool:
    value = _raw(name, environ)
    if value is None:
        return default
    word = value.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise BadEnvironment(
        f"{name}={value!r} is not a boolean; use one of true/false, yes/no, on/off, 1/0."
    )


def env_int(
    name: str,
    default: int,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    environ: Mapping[str, str] = os.environ,
) -> int:
    value = _raw(name, environ)
    if value is None or value.strip() == "":
        return default
    try:
        number = int(value.strip())
    except ValueError:
        raise BadEnvironment(f"{name}={value!r} is not a whole number.") from None
    if minimum is not None and number < minimum:
        raise BadEnvironment(f"{name}={number} is below the minimum of {minimum}.")
    if maximum is not None and number > maximum:
        raise BadEnvironment(f"{name}={number} is above the maximum of {maximum}.")
    return number


def env_list(
    name: str, default: list[str] | None = None, *, environ: Mapping[str, str] = os.environ
) -> list[str]:
    value = _raw(name, environ)
    if value is None:
        return list(default or [])
    return [item.strip() for item in value.split(",") if item.strip()]


def env_networks(
    name: str, default: list[str] | None = None, *, environ: Mapping[str, str] = os.environ
) -> list[str]:
    """A comma-separated list of IP addresses or networks (`10.0.0.0/8`, `::1`)."""
    networks = env_list(name, default, environ=environ)
    for network in networks:
        try:
            ipaddress.ip_network(network, strict=False)
        except ValueError:
            raise BadEnvironment(
                f"{name} entry {network!r} is not an IP address or network."
            ) from None
    return networks


def env_choice(
    name: str, default: str, choices: tuple[str, ...], *, environ: Mapping[str, str] = os.environ
) -> str:
    value = env_str(name, default, environ=environ).strip().lower()
    if value not in choices:
        raise BadEnvironment(f"{name}={value!r} is not one of: {', '.join(choices)}.")
    return value


def env_url(
    name: str,
    *,
    schemes: tuple[str, ...],
    default: str | None = None,
    environ: Mapping[str, str] = os.environ,
) -> str | None:
    """A URL whose scheme is checked; errors show the URL without its password."""
    value = _raw(name, environ)
    if value is None or value == "":
        return default
    parts = urlsplit(value)
    if parts.scheme not in schemes:
        raise BadEnvironment(
            f"{name} must start with one of {', '.join(s + '://' for s in schemes)}"
            f" (got {redact_url(value)!r})."
        )
    if not parts.netloc and not parts.path:
        raise BadEnvironment(f"{name}={redact_url(value)!r} has no host.")
    return value


def redact_url(url: str) -> str:
    """The URL with any password replaced, safe for logs and error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return parts._replace(netloc=f"{user}:***@{netloc}").geturl()
