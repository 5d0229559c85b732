"""The Kubernetes API client: the only module that imports the official `kubernetes` SDK.

The SDK handles kubeconfig, authentication and TLS. Lists and watches are read raw
(`_preload_content=False`) and parsed with orjson: building SDK model objects per event is
~10x slower, and the watcher only needs a few fields.

Every failure becomes a `KubeError` whose message is written for an on-call engineer and
never contains credentials or kubeconfig content.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson
import urllib3
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_SECONDS = 10.0
LIST_READ_TIMEOUT_SECONDS = 60.0
LIST_PAGE_SIZE = 500
CANDIDATE_API_VERSIONS = ("v1beta1", "v1alpha2")
COORDINATION_GROUP = "coordination.k8s.io"


@dataclass(frozen=True)
class KubeError(Exception):
    """A failed call, in words; `kind` lets the watcher choose how long to back off."""

    message: str
    kind: str  # auth, forbidden, not_found, gone, tls, timeout, connection, config, server, …
    status: int | None = None

    def __str__(self) -> str:
        return self.message

    @property
    def retryable(self) -> bool:
        return self.kind not in {"config"}


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Where and how to connect: a kubeconfig's text and context, or in-cluster."""

    in_cluster: bool = False
    kubeconfig: str = field(default="", repr=False)  # a secret: never in repr or logs
    context: str = ""


@dataclass(frozen=True, slots=True)
class ListPage:
    items: list[dict[str, Any]]
    resource_version: str
    continue_token: str


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

_USE_STATIC_CREDENTIALS = (
    "Use a static `token` (for example a ServiceAccount token, see the README) or "
    "client-certificate-data + client-key-data instead."
)
_USE_OWN_SERVICE_ACCOUNT = (
    "Give the dashboard its own ServiceAccount that may only read Leases (see the README) "
    "and use its token instead."
)
# Known fields that are refused: (what the SDK would do with it, what to use instead).
_REFUSED_USER_FIELDS: dict[str, tuple[str, str]] = {
    "exec": ("runs a program on the dashboard's workers", _USE_STATIC_CREDENTIALS),
    "auth-provider": (
        "runs a login plugin on the dashboard's workers (it may run a program, read the "
        "workers' own cloud credentials or fetch tokens from another host)",
        _USE_STATIC_CREDENTIALS,
    ),
    "tokenFile": (
        "reads a file on the dashboard's workers",
        "Put the token itself in `token` instead.",
    ),
    "client-certificate": (
        "names a file on the dashboard's workers",
        "Put the certificate itself, base64-encoded, in client-certificate-data instead.",
    ),
    "client-key": (
        "names a file on the dashboard's workers",
        "Put the key itself, base64-encoded, in client-key-data instead.",
    ),
    "username": ("is basic authentication", _USE_STATIC_CREDENTIALS),
    "password": ("is basic authentication", _USE_STATIC_CREDENTIALS),
    "as": ("impersonates another identity", _USE_OWN_SERVICE_ACCOUNT),
    "as-uid": ("impersonates another identity", _USE_OWN_SERVICE_ACCOUNT),
    "as-groups": ("impersonates other groups", _USE_OWN_SERVICE_ACCOUNT),
    "as-user-extra": ("impersonates another identity", _USE_OWN_SERVICE_ACCOUNT),
}
_REFUSED_CLUSTER_FIELDS: dict[str, tuple[str, str]] = {
    "certificate-authority": (
        "names a file on the dashboard's workers",
        "Put the CA certificate itself, base64-encoded, in certificate-authority-data instead.",
    ),
    "proxy-url": (
        "sends the traffic, credentials included, through a host that is not the server the "
        "kubeconfig names",
        "Remove it; if the workers need a proxy, the operator sets HTTPS_PROXY in their "
        "environment.",
    ),
}
# A hostname as TLS knows it (SNI): dot-separated labels, no leading or trailing dot.
_HOSTNAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*")
# Visible ASCII and space: anything else cannot travel in an Authorization header (a line
# break ends the header; Python sends non-ASCII as Latin-1, which no API server expects).
_HEADER_SAFE = re.compile(r"[\x20-\x7e]*")


def parse_kubeconfig(text: str, context: str = "") -> CheckedKubeconfig:
    """The kubeconfig, checked for shape, context and safety; errors never quote it.

    Raises KubeError(kind="config") naming every refused field.
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise KubeError(f"The kubeconfig is not valid YAML{where}.", kind="config") from None
    if not isinstance(data, dict) or not isinstance(data.get("contexts"), list):
        raise KubeError("The kubeconfig has no contexts: is this a kubeconfig file?", kind="config")
    names = [entry.get("name") for entry in data["contexts"] if isinstance(entry, dict)]
    wanted = context or data.get("current-context") or ""
    if not wanted:
        raise KubeError(
            "The kubeconfig has no current-context; name one with --context.", kind="config"
        )
    if wanted not in names:
        listed = ", ".join(str(name) for name in names) or "none"
        raise KubeError(
            f"Context {wanted!r} is not in the kubeconfig (contexts: {listed}).", kind="config"
        )
    warnings = check_kubeconfig_safety(data, wanted)
    return CheckedKubeconfig(data=data, warnings=tuple(warnings))


def check_kubeconfig_safety(data: dict[str, Any], context: str) -> list[str]:
    """Refuse what would run code, read local files or go elsewhere; the warnings otherwise.

    Every entry in the file is checked, not only those `context` uses: a stored kubeconfig
    can be switched to another context later. Raises KubeError(kind="config") listing every
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
        raise KubeError(" ".join(problems), kind="config")
    chosen = contexts.get(context, {})
    cluster_name, user_name = chosen.get("cluster"), chosen.get("user")
    cluster = clusters.get(cluster_name, {}) if isinstance(cluster_name, str) else {}
    user = users.get(user_name, {}) if isinstance(user_name, str) else {}
    where = f"clusters[{_label(cluster_name)}].cluster"
    warnings = []
    if cluster.get("insecure-skip-tls-verify") is True:
        warnings.append(
            f"{where}.insecure-skip-tls-verify is true: the API server's certificate is not "
            "checked, so anyone on the network path can read the credentials and forge what "
            "the dashboard sees. Put the cluster's CA in certificate-authority-data instead."
        )
    if urlsplit(str(cluster.get("server", ""))).scheme == "http" and user.get("token"):
        warnings.append(
            f"{where}.server is plain http: the token travels unencrypted. Use the https "
            "address with certificate-authority-data."
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
        problems.append(f"{section} must be a list.")
        return {}
    found: dict[str, dict[str, Any]] = {}
    for position, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            problems.append(f"{section}[{position}] has no name.")
            continue
        if name in found:
            problems.append(f"{section}[{_label(name)}] is defined twice.")
            continue
        body = entry.get(key)
        if body is None:
            # `user:` with nothing under it means no credentials; the SDK wants a map.
            body = entry[key] = {}
        if not isinstance(body, dict):
            problems.append(f"{section}[{_label(name)}].{key} must be a map of fields.")
            continue
        found[name] = body
    return found


def _unknown_field(where: str, field_name: object, allowed: tuple[str, ...]) -> str:
    return (
        f"{where}.{_label(field_name)} is not a field the dashboard accepts, so it is refused "
        f"rather than handed to the Kubernetes client unchecked. Allowed: {', '.join(allowed)}."
    )


def _cluster_problems(name: str, cluster: dict[str, Any]) -> list[str]:
    where = f"clusters[{_label(name)}].cluster"
    problems = []
    for key, value in cluster.items():
        if key in _REFUSED_CLUSTER_FIELDS:
            what, instead = _REFUSED_CLUSTER_FIELDS[key]
            problems.append(f"{where}.{key} {what}; it is refused. {instead}")
        elif key not in CLUSTER_FIELDS:
            problems.append(_unknown_field(where, key, CLUSTER_FIELDS))
        elif key == "server":
            problems += _server_problems(where, value)
        elif key == "certificate-authority-data":
            problems += _base64_problems(f"{where}.{key}", value)
        elif key in {"insecure-skip-tls-verify", "disable-compression"} and not isinstance(
            value, bool
        ):
            # The SDK takes `not value`: the string "false" would turn verification off.
            problems.append(f"{where}.{key} must be true or false, not a {type(value).__name__}.")
        elif key == "tls-server-name" and not (
            isinstance(value, str) and len(value) <= 253 and _HOSTNAME.fullmatch(value)
        ):
            problems.append(f"{where}.{key} must be a host name (like api.example.com).")
    if "server" not in cluster:
        problems.append(f"{where} has no server.")
    return problems


def _server_problems(where: str, value: object) -> list[str]:
    wrong = [f"{where}.server must be an http or https URL (like https://10.0.0.1:6443)."]
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
            f"{where}.server carries a user name or password; it is refused. "
            + _USE_STATIC_CREDENTIALS
        ]
    return []


def _base64_problems(where: str, value: object) -> list[str]:
    """Inline certificates and keys are base64 (of PEM); the SDK would crash decoding others."""
    if not isinstance(value, str):
        return [f"{where} must be base64-encoded text."]
    try:
        base64.b64decode(value.strip(), validate=True)
    except (binascii.Error, ValueError):
        return [f"{where} is not valid base64 (it must be base64-encoded PEM text)."]
    return []


def _user_problems(name: str, user: dict[str, Any]) -> list[str]:
    where = f"users[{_label(name)}].user"
    problems = []
    for key, value in user.items():
        if key in _REFUSED_USER_FIELDS:
            what, instead = _REFUSED_USER_FIELDS[key]
            problems.append(f"{where}.{key} {what}; it is refused. {instead}")
        elif key not in USER_FIELDS:
            problems.append(_unknown_field(where, key, USER_FIELDS))
        elif key == "token" and not (isinstance(value, str) and _HEADER_SAFE.fullmatch(value)):
            problems.append(
                f"{where}.token must be one line of visible ASCII characters: it holds a line "
                "break, a control or a non-ASCII character, which cannot be sent in an HTTP "
                "header. Paste the token again, on one line."
            )
        elif key in {"client-certificate-data", "client-key-data"}:
            problems += _base64_problems(f"{where}.{key}", value)
    if ("client-certificate-data" in user) != ("client-key-data" in user):
        problems.append(
            f"{where} needs both client-certificate-data and client-key-data, or neither."
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
        _unknown_field(where, key, CONTEXT_FIELDS) for key in context if key not in CONTEXT_FIELDS
    ]
    cluster, user, namespace = context.get("cluster"), context.get("user"), context.get("namespace")
    if not isinstance(cluster, str) or cluster not in clusters:
        problems.append(f"{where}.cluster must name a cluster defined in the kubeconfig.")
    if user is not None and (not isinstance(user, str) or user not in users):
        problems.append(f"{where}.user must name a user defined in the kubeconfig.")
    if namespace is not None and not isinstance(namespace, str):
        problems.append(f"{where}.namespace must be text.")
    return problems


def connect(config: ClusterConfig) -> k8s.ApiClient:
    """An API client for the cluster; fails with a KubeError saying what is wrong.

    A kubeconfig is checked again here, every time: rows stored before the check existed,
    or written around it, are refused rather than run.
    """
    configuration = k8s.Configuration()
    try:
        if config.in_cluster:
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            checked = parse_kubeconfig(config.kubeconfig, config.context)
            k8s_config.load_kube_config_from_dict(
                checked.data,
                context=config.context or None,
                client_configuration=configuration,
                persist_config=False,
            )
    except ConfigException as exc:
        # The SDK's messages name missing keys and files, never secret values.
        raise KubeError(f"The cluster configuration cannot be used: {exc}", kind="config") from None
    # Our own retry and backoff decide; urllib3's silent retries would hide outages.
    configuration.retries = False
    return k8s.ApiClient(configuration)


def server_address(api: k8s.ApiClient) -> str:
    parts = urlsplit(api.configuration.host)
    return parts.netloc or api.configuration.host


def list_leases(
    api: k8s.ApiClient, continue_token: str = "", limit: int = LIST_PAGE_SIZE
) -> ListPage:
    """One page of Leases across all namespaces."""
    coordination = k8s.CoordinationV1Api(api)
    with _translated_errors(api, "list leases"):
        response = coordination.list_lease_for_all_namespaces(
            limit=limit,
            _continue=continue_token or None,
            _preload_content=False,
            _request_timeout=(CONNECT_TIMEOUT_SECONDS, LIST_READ_TIMEOUT_SECONDS),
        )
        body = _read_json(response, "lease list")
    metadata = body.get("metadata") or {}
    items = body.get("items")
    if not isinstance(items, list):
        raise KubeError("The API server answered a lease list without items.", kind="bad_response")
    return ListPage(
        items=[item for item in items if isinstance(item, dict)],
        resource_version=str(metadata.get("resourceVersion") or ""),
        continue_token=str(metadata.get("continue") or ""),
    )


def iter_all_leases(api: k8s.ApiClient, limit: int = LIST_PAGE_SIZE) -> Iterator[ListPage]:
    """Every page of a full list; the last page's resourceVersion is where a watch starts."""
    continue_token = ""
    while True:
        page = list_leases(api, continue_token, limit)
        yield page
        if not page.continue_token:
            return
        continue_token = page.continue_token


class WatchStream:
    """An open watch: yields raw lines; `close()` from another thread ends it at once."""

    def __init__(self, api: k8s.ApiClient, response: urllib3.BaseHTTPResponse) -> None:
        self._api = api
        self._response = response

    def lines(self) -> Iterator[bytes]:
        """Complete lines only: a line cut by a dropped connection is never yielded."""
        buffer = b""
        with _translated_errors(self._api, "watch leases"):
            for chunk in self._response.stream(65536, decode_content=True):
                buffer += chunk
                if b"\n" not in buffer:
                    continue
                *complete, buffer = buffer.split(b"\n")
                for line in complete:
                    if line.strip():
                        yield line
        if buffer.strip():
            logger.info("watch stream ended inside a line; it will resume from the last event")

    def close(self) -> None:
        try:
            self._response.shutdown()
        except Exception:
            logger.debug("closing the watch response failed", exc_info=True)
        self._response.release_conn()


def open_lease_watch(
    api: k8s.ApiClient, resource_version: str, timeout_seconds: int
) -> WatchStream:
    """A watch of all Leases from `resource_version`, with bookmarks.

    The read timeout is longer than the server's own `timeoutSeconds`, so a healthy but quiet
    stream ends by the server, and only a dead connection ends by our timeout.
    """
    coordination = k8s.CoordinationV1Api(api)
    with _translated_errors(api, "watch leases"):
        response = coordination.list_lease_for_all_namespaces(
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            _preload_content=False,
            _request_timeout=(CONNECT_TIMEOUT_SECONDS, timeout_seconds + 30),
        )
    return WatchStream(api, response)


def list_lease_candidates(api: k8s.ApiClient) -> tuple[str, list[dict[str, Any]]]:
    """LeaseCandidates from the newest served version; ("", []) when none is served."""
    custom = k8s.CustomObjectsApi(api)
    for version in CANDIDATE_API_VERSIONS:
        try:
            with _translated_errors(api, f"list leasecandidates ({version})"):
                response = custom.list_cluster_custom_object(
                    COORDINATION_GROUP,
                    version,
                    "leasecandidates",
                    _preload_content=False,
                    _request_timeout=(CONNECT_TIMEOUT_SECONDS, LIST_READ_TIMEOUT_SECONDS),
                )
                body = _read_json(response, "lease candidate list")
        except KubeError as error:
            if error.kind == "not_found":
                continue
            raise
        items = body.get("items")
        return f"{COORDINATION_GROUP}/{version}", [
            item for item in (items if isinstance(items, list) else []) if isinstance(item, dict)
        ]
    return "", []


def status_error(status: dict[str, Any], action: str, server: str) -> KubeError:
    """A KubeError for a `Status` object sent inside a watch stream (an ERROR event)."""
    code = status.get("code") if isinstance(status.get("code"), int) else None
    message = str(status.get("message") or status.get("reason") or "no message")[:300]
    return _error_for_status(code, message, action, server)


def _read_json(response: urllib3.BaseHTTPResponse, what: str) -> dict[str, Any]:
    try:
        body = orjson.loads(response.data)
    except orjson.JSONDecodeError:
        raise KubeError(
            f"The API server sent a {what} that is not JSON.", kind="bad_response"
        ) from None
    finally:
        response.release_conn()
    if not isinstance(body, dict):
        raise KubeError(f"The API server sent a {what} that is not an object.", kind="bad_response")
    return body


def _error_for_status(code: int | None, message: str, action: str, server: str) -> KubeError:
    if code == 401:
        return KubeError(
            f"The API server at {server} rejected the credentials (401 Unauthorized) when trying "
            "to " + action + ": the token or client certificate in the kubeconfig is invalid "
            "or expired.",
            kind="auth",
            status=401,
        )
    if code == 403:
        return KubeError(
            f"Not allowed to {action} on {server} (403 Forbidden): the credentials work but "
            "lack RBAC permission; grant get, list and watch on leases and leasecandidates in "
            f"coordination.k8s.io. Server said: {message}",
            kind="forbidden",
            status=403,
        )
    if code == 404:
        return KubeError(
            f"Not found when trying to {action} on {server}.", kind="not_found", status=404
        )
    if code == 410:
        return KubeError(
            f"The resourceVersion is too old to {action} on {server} (410 Gone); listing again.",
            kind="gone",
            status=410,
        )
    if code == 429:
        return KubeError(
            f"The API server at {server} is rate-limiting us (429) when trying to {action}.",
            kind="server",
            status=429,
        )
    return KubeError(
        f"The API server at {server} answered {code} when trying to {action}: {message}",
        kind="server",
        status=code,
    )


class _translated_errors:
    """Turn SDK, urllib3 and socket errors into KubeErrors with words an engineer knows."""

    def __init__(self, api: k8s.ApiClient, action: str) -> None:
        self.server = server_address(api)
        self.action = action

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> bool:
        if exc is None or isinstance(exc, KubeError):
            return False
        error = self._translate(exc)
        if error is None:
            return False
        raise error from None

    def _translate(self, exc: BaseException) -> KubeError | None:
        server, action = self.server, self.action
        if isinstance(exc, ApiException) and not exc.status:
            # The SDK reports TLS failures as an ApiException with status 0.
            reason = str(exc.reason or "")
            if "SSL" in reason or "CERTIFICATE" in reason.upper():
                return KubeError(
                    f"TLS with the API server at {server} failed: its certificate is not "
                    "trusted by the kubeconfig's certificate-authority, or the address does "
                    f"not match it ({_first_line(Exception(reason.splitlines()[-1]))}).",
                    kind="tls",
                )
            return KubeError(
                f"The connection to the API server at {server} failed while trying to "
                f"{action} ({_first_line(Exception(reason))}).",
                kind="connection",
            )
        if isinstance(exc, ApiException):
            message = _status_message(exc.body) or (exc.reason or "")
            return _error_for_status(exc.status, message[:300], action, server)
        if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
            exc = exc.reason
        if isinstance(exc, urllib3.exceptions.SSLError):
            return KubeError(
                f"TLS with the API server at {server} failed: its certificate is not trusted by "
                "the kubeconfig's certificate-authority, or the address does not match it "
                f"({_first_line(exc)}).",
                kind="tls",
            )
        # urllib3 2 makes NewConnectionError a ConnectTimeoutError subclass: check it first.
        if isinstance(exc, urllib3.exceptions.NewConnectionError | ConnectionRefusedError):
            return KubeError(
                f"Could not connect to the API server at {server}: connection refused or "
                "host unreachable.",
                kind="connection",
            )
        if isinstance(exc, urllib3.exceptions.ConnectTimeoutError):
            return KubeError(
                f"Timed out connecting to the API server at {server} (no answer within "
                f"{CONNECT_TIMEOUT_SECONDS:.0f} s): is the address right and reachable?",
                kind="timeout",
            )
        if isinstance(exc, urllib3.exceptions.ReadTimeoutError | TimeoutError):
            return KubeError(
                f"The API server at {server} stopped answering while trying to {action} "
                "(read timeout).",
                kind="timeout",
            )
        if isinstance(
            exc, urllib3.exceptions.ProtocolError | urllib3.exceptions.HTTPError | OSError
        ):
            return KubeError(
                f"The connection to the API server at {server} broke while trying to {action} "
                f"({type(exc).__name__}).",
                kind="connection",
            )
        return None


def _status_message(body: object) -> str:
    if not body:
        return ""
    try:
        status = orjson.loads(body)
    except (orjson.JSONDecodeError, TypeError):
        return ""
    return str(status.get("message") or "") if isinstance(status, dict) else ""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else type(exc).__name__
