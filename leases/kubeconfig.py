"""Kubeconfigs the dashboard accepts: shape, context, and a safety allow-list.

Whoever hands the dashboard a kubeconfig (an admin form, a command line, an NKS API answer)
must not get a program run or a worker's file read: the Kubernetes SDK runs `exec` and
`auth-provider` plugins and reads every file a kubeconfig names. So every kubeconfig is
checked here before the SDK sees it (leases.kube.connect checks again at every connection).
Errors name the field and its entry and say what to use instead; they never quote values.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import yaml
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _


class KubeconfigRefused(ValueError):
    """The kubeconfig cannot be used as given; the message says why, never what it holds."""


@dataclass(frozen=True, slots=True)
class CheckedKubeconfig:
    """A kubeconfig that passed the safety check, and what an engineer should know about it."""

    data: dict[str, Any] = field(repr=False)  # holds credentials: never in repr or logs
    warnings: tuple[str, ...] = ()


# What a kubeconfig may hold, section by section; everything else is refused. The SDK runs
# `exec` and `auth-provider` plugins and reads every file a kubeconfig names, and whoever
# supplies one (an admin form, a command line, an NKS API answer) must not get a program run
# or a worker's file read that way. An allow-list, so a field added to kubeconfigs later is
# refused until someone has checked what the SDK does with it.
CLUSTER_FIELDS = (
    "server",
    "certificate-authority-data",
    "insecure-skip-tls-verify",
    "tls-server-name",
    "disable-compression",
    "extensions",
)
USER_FIELDS = ("token", "client-certificate-data", "client-key-data", "extensions")
CONTEXT_FIELDS = ("cluster", "user", "namespace", "extensions")

# Lazy: read in the language of whoever is told (an admin's form, a command's shell).
_USE_STATIC_CREDENTIALS = _(
    "Use a static `token` (for example a ServiceAccount token, see the README) or "
    "client-certificate-data + client-key-data instead."
)
_USE_OWN_SERVICE_ACCOUNT = _(
    "Give the dashboard its own ServiceAccount that may only read Leases (see the README) "
    "and use its token instead."
)
_RUNS_ON_WORKERS = _("names a file on the dashboard's workers")
_BASIC_AUTH = _("is basic authentication")
_IMPERSONATES = _("impersonates another identity")
# Known fields that are refused: (what the SDK would do with it, what to use instead).
_REFUSED_USER_FIELDS: dict[str, tuple[str, str]] = {
    "exec": (_("runs a program on the dashboard's workers"), _USE_STATIC_CREDENTIALS),
    "auth-provider": (
        _(
            "runs a login plugin on the dashboard's workers (it may run a program, read the "
            "workers' own cloud credentials or fetch tokens from another host)"
        ),
        _USE_STATIC_CREDENTIALS,
    ),
    "tokenFile": (
        _("reads a file on the dashboard's workers"),
        _("Put the token itself in `token` instead."),
    ),
    "client-certificate": (
        _RUNS_ON_WORKERS,
        _("Put the certificate itself, base64-encoded, in client-certificate-data instead."),
    ),
    "client-key": (
        _RUNS_ON_WORKERS,
        _("Put the key itself, base64-encoded, in client-key-data instead."),
    ),
    "username": (_BASIC_AUTH, _USE_STATIC_CREDENTIALS),
    "password": (_BASIC_AUTH, _USE_STATIC_CREDENTIALS),
    "as": (_IMPERSONATES, _USE_OWN_SERVICE_ACCOUNT),
    "as-uid": (_IMPERSONATES, _USE_OWN_SERVICE_ACCOUNT),
    "as-groups": (_("impersonates other groups"), _USE_OWN_SERVICE_ACCOUNT),
    "as-user-extra": (_IMPERSONATES, _USE_OWN_SERVICE_ACCOUNT),
}
_REFUSED_CLUSTER_FIELDS: dict[str, tuple[str, str]] = {
    "certificate-authority": (
        _RUNS_ON_WORKERS,
        _("Put the CA certificate itself, base64-encoded, in certificate-authority-data instead."),
    ),
    "proxy-url": (
        _(
            "sends the traffic, credentials included, through a host that is not the server "
            "the kubeconfig names"
        ),
        _(
            "Remove it; if the workers need a proxy, the operator sets HTTPS_PROXY in their "
            "environment."
        ),
    ),
}
# A hostname as TLS knows it (SNI): dot-separated labels, no leading or trailing dot.
_HOSTNAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*")
# Visible ASCII and space: anything else cannot travel in an Authorization header (a line
# break ends the header; Python sends non-ASCII as Latin-1, which no API server expects).
_HEADER_SAFE = re.compile(r"[\x20-\x7e]*")


# Bounds checked before the YAML is built: PyYAML builds nested collections by recursion, so
# a document nested some thousands deep ends in a RecursionError (a 500), and a huge one
# holds a worker. A real kubeconfig is a few kilobytes (some more with inline certificates)
# and nests about six deep (clusters, an entry, its cluster, extensions, one, its fields).
MAX_KUBECONFIG_CHARACTERS = 1_000_000
MAX_KUBECONFIG_DEPTH = 32


def _bounds_problem(text: str) -> str | None:
    """Why the text is too big or too deep to parse, read from the parser's events (which
    keep no recursion); None within bounds. Malformed YAML is left to the parse."""
    if len(text) > MAX_KUBECONFIG_CHARACTERS:
        return gettext(
            "The kubeconfig is longer than %(limit)s characters; a kubeconfig is a few "
            "kilobytes, so it is refused."
        ) % {"limit": f"{MAX_KUBECONFIG_CHARACTERS:,}"}
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_KUBECONFIG_DEPTH:
                    return gettext(
                        "The kubeconfig nests lists and maps more than %(limit)s levels deep; "
                        "a kubeconfig needs fewer than ten, so it is refused."
                    ) % {"limit": MAX_KUBECONFIG_DEPTH}
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.YAMLError:
        return None
    return None


def entry_label(name: object) -> str:
    """An entry's name fit for a message: short, one line (names are the supplier's text)."""
    return _label(name)


def parse_kubeconfig(text: str, context: str = "") -> CheckedKubeconfig:
    """The kubeconfig, checked for size, shape, context and safety; errors never quote it.

    Raises KubeconfigRefused naming every refused field.
    """
    too_big = _bounds_problem(text)
    if too_big is not None:
        raise KubeconfigRefused(too_big)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            message = gettext("The kubeconfig is not valid YAML (line %(line)s).") % {
                "line": mark.line + 1
            }
        else:
            message = gettext("The kubeconfig is not valid YAML.")
        raise KubeconfigRefused(message) from None
    if not isinstance(data, dict) or not isinstance(data.get("contexts"), list):
        raise KubeconfigRefused(
            gettext("The kubeconfig has no contexts: is this a kubeconfig file?")
        )
    names = [entry.get("name") for entry in data["contexts"] if isinstance(entry, dict)]
    wanted = context or data.get("current-context") or ""
    if not wanted:
        raise KubeconfigRefused(
            gettext("The kubeconfig has no current-context; name one with --context.")
        )
    if wanted not in names:
        listed = ", ".join(str(name) for name in names) or gettext("none")
        raise KubeconfigRefused(
            gettext("Context %(context)s is not in the kubeconfig (contexts: %(listed)s).")
            % {"context": repr(wanted), "listed": listed}
        )
    warnings = check_kubeconfig_safety(data, wanted)
    return CheckedKubeconfig(data=data, warnings=tuple(warnings))


def check_kubeconfig_safety(data: dict[str, Any], context: str) -> list[str]:
    """Refuse what would run code, read local files or go elsewhere; the warnings otherwise.

    Every entry in the file is checked, not only those `context` uses: a stored kubeconfig
    can be switched to another context later. Raises KubeconfigRefused listing every
    refusal, each naming the field, its entry and what to use instead.
    """
    problems: list[str] = []
    clusters = _entries(data, "clusters", "cluster", problems)
    users = _entries(data, "users", "user", problems)
    contexts = _entries(data, "contexts", "context", problems)
    for name, cluster in clusters.items():
        problems += _cluster_problems(name, cluster)
    for name, user in users.items():
        problems += _user_problems(name, user)
    for name, entry in contexts.items():
        problems += _context_problems(name, entry, clusters, users)
    if problems:
        raise KubeconfigRefused(" ".join(problems))
    chosen = contexts.get(context, {})
    cluster_name, user_name = chosen.get("cluster"), chosen.get("user")
    cluster = clusters.get(cluster_name, {}) if isinstance(cluster_name, str) else {}
    user = users.get(user_name, {}) if isinstance(user_name, str) else {}
    where = f"clusters[{_label(cluster_name)}].cluster"
    warnings = []
    if cluster.get("insecure-skip-tls-verify") is True:
        warnings.append(
            gettext(
                "%(where)s.insecure-skip-tls-verify is true: the API server's certificate is "
                "not checked, so anyone on the network path can read the credentials and forge "
                "what the dashboard sees. Put the cluster's CA in certificate-authority-data "
                "instead."
            )
            % {"where": where}
        )
    if urlsplit(str(cluster.get("server", ""))).scheme == "http" and user.get("token"):
        warnings.append(
            gettext(
                "%(where)s.server is plain http: the token travels unencrypted. Use the https "
                "address with certificate-authority-data."
            )
            % {"where": where}
        )
    return warnings


def _label(name: object) -> str:
    """An entry's name fit for a message: short, one line (names are the supplier's text)."""
    text = str(name)[:80]
    return "".join(char if char.isprintable() else "?" for char in text)


def _entries(
    data: dict[str, Any], section: str, key: str, problems: list[str]
) -> dict[str, dict[str, Any]]:
    """The named maps of one section (`clusters` -> {name: cluster}); shape errors listed."""
    entries = data.get(section)
    if entries is None:
        return {}
    if not isinstance(entries, list):
        problems.append(gettext("%(section)s must be a list.") % {"section": section})
        return {}
    found: dict[str, dict[str, Any]] = {}
    for position, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            problems.append(gettext("%(entry)s has no name.") % {"entry": f"{section}[{position}]"})
            continue
        if name in found:
            problems.append(
                gettext("%(entry)s is defined twice.") % {"entry": f"{section}[{_label(name)}]"}
            )
            continue
        body = entry.get(key)
        if body is None:
            # `user:` with nothing under it means no credentials; the SDK wants a map.
            body = entry[key] = {}
        if not isinstance(body, dict):
            problems.append(
                gettext("%(field)s must be a map of fields.")
                % {"field": f"{section}[{_label(name)}].{key}"}
            )
            continue
        found[name] = body
    return found


def _refusal(
    where: str,
    key: object,
    refused: dict[str, tuple[str, str]],
    allowed: tuple[str, ...],
) -> str | None:
    """Why a field is refused (a known danger, or not on the allow-list), or None."""
    if isinstance(key, str) and key in refused:
        what, instead = refused[key]
        return gettext("%(field)s %(what)s; it is refused. %(instead)s") % {
            "field": f"{where}.{key}",
            "what": what,
            "instead": instead,
        }
    if key not in allowed:
        return gettext(
            "%(field)s is not a field the dashboard accepts, so it is refused rather than "
            "handed to the Kubernetes client unchecked. Allowed: %(allowed)s."
        ) % {"field": f"{where}.{_label(key)}", "allowed": ", ".join(allowed)}
    return None


def _cluster_problems(name: str, cluster: dict[str, Any]) -> list[str]:
    where = f"clusters[{_label(name)}].cluster"
    problems = []
    for key, value in cluster.items():
        refusal = _refusal(where, key, _REFUSED_CLUSTER_FIELDS, CLUSTER_FIELDS)
        if refusal is not None:
            problems.append(refusal)
        elif key == "server":
            problems += _server_problems(where, value)
        elif key == "certificate-authority-data":
            problems += _base64_problems(f"{where}.{key}", value)
        elif key in {"insecure-skip-tls-verify", "disable-compression"} and not isinstance(
            value, bool
        ):
            # The SDK takes `not value`: the string "false" would turn verification off.
            problems.append(
                gettext("%(field)s must be true or false, not a %(type)s.")
                % {"field": f"{where}.{key}", "type": type(value).__name__}
            )
        elif key == "tls-server-name" and not (
            isinstance(value, str) and len(value) <= 253 and _HOSTNAME.fullmatch(value)
        ):
            problems.append(
                gettext("%(field)s must be a host name (like api.example.com).")
                % {"field": f"{where}.{key}"}
            )
    if "server" not in cluster:
        problems.append(gettext("%(entry)s has no server.") % {"entry": where})
    return problems


def _server_problems(where: str, value: object) -> list[str]:
    wrong = [
        gettext("%(field)s must be an http or https URL (like https://10.0.0.1:6443).")
        % {"field": f"{where}.server"}
    ]
    if not isinstance(value, str) or not _HEADER_SAFE.fullmatch(value) or " " in value:
        return wrong
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError:
        return wrong
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        return wrong
    if parts.username is not None or parts.password is not None:
        return [
            gettext("%(field)s carries a user name or password; it is refused. %(instead)s")
            % {"field": f"{where}.server", "instead": _USE_STATIC_CREDENTIALS}
        ]
    return []


def _base64_problems(where: str, value: object) -> list[str]:
    """Inline certificates and keys are base64 (of PEM); the SDK would crash decoding others."""
    if not isinstance(value, str):
        return [gettext("%(field)s must be base64-encoded text.") % {"field": where}]
    try:
        base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return [
            gettext("%(field)s is not valid base64 (it must be base64-encoded PEM text).")
            % {"field": where}
        ]
    return []


def _user_problems(name: str, user: dict[str, Any]) -> list[str]:
    where = f"users[{_label(name)}].user"
    problems = []
    for key, value in user.items():
        refusal = _refusal(where, key, _REFUSED_USER_FIELDS, USER_FIELDS)
        if refusal is not None:
            problems.append(refusal)
        elif key == "token" and not (isinstance(value, str) and _HEADER_SAFE.fullmatch(value)):
            problems.append(
                gettext(
                    "%(field)s must be one line of visible ASCII characters: it holds a line "
                    "break, a control or a non-ASCII character, which cannot be sent in an HTTP "
                    "header. Paste the token again, on one line."
                )
                % {"field": f"{where}.token"}
            )
        elif key in {"client-certificate-data", "client-key-data"}:
            problems += _base64_problems(f"{where}.{key}", value)
    if ("client-certificate-data" in user) != ("client-key-data" in user):
        problems.append(
            gettext("%(entry)s needs both client-certificate-data and client-key-data, or neither.")
            % {"entry": where}
        )
    return problems


def _context_problems(
    name: str,
    context: dict[str, Any],
    clusters: dict[str, dict[str, Any]],
    users: dict[str, dict[str, Any]],
) -> list[str]:
    where = f"contexts[{_label(name)}].context"
    problems = [
        refusal
        for key in context
        if (refusal := _refusal(where, key, {}, CONTEXT_FIELDS)) is not None
    ]
    cluster, user, namespace = context.get("cluster"), context.get("user"), context.get("namespace")
    if not isinstance(cluster, str) or cluster not in clusters:
        problems.append(
            gettext("%(field)s must name a cluster defined in the kubeconfig.")
            % {"field": f"{where}.cluster"}
        )
    if user is not None and (not isinstance(user, str) or user not in users):
        problems.append(
            gettext("%(field)s must name a user defined in the kubeconfig.")
            % {"field": f"{where}.user"}
        )
    if namespace is not None and not isinstance(namespace, str):
        problems.append(gettext("%(field)s must be text.") % {"field": f"{where}.namespace"})
    return problems
