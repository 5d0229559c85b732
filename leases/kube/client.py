"""Connecting, listing and error translation (the watch streams are in leases.kube.watch).

The SDK handles kubeconfig, authentication and TLS. Lists are read raw
(`_preload_content=False`) and parsed with orjson: building SDK model objects per item is
~10x slower, and the watcher only needs a few fields.

Every failure becomes a `KubeError` whose message is written for an on-call engineer and
never contains credentials or kubeconfig content.
"""

from __future__ import annotations

import http.client
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson
import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from leases.egress import pin_server
from leases.kubeconfig import CheckedKubeconfig, KubeconfigRefused
from leases.kubeconfig import parse_kubeconfig as check_kubeconfig

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_SECONDS = 10.0
LIST_READ_TIMEOUT_SECONDS = 60.0
LIST_PAGE_SIZE = 500
# The probe of a server (leases.watch_probe): a tiny request that must answer at once. A
# server that takes longer is, for the watcher, a server that does not answer.
PROBE_TIMEOUT_SECONDS = 3.0
CANDIDATE_API_VERSIONS = ("v1beta1", "v1alpha2")
COORDINATION_GROUP = "coordination.k8s.io"
# What a 403 asks the cluster's administrator to grant, per resource.
LEASE_GRANT = "grant get, list and watch on leases and leasecandidates in coordination.k8s.io"
NODE_GRANT = "grant get, list and watch on nodes (core API group, a ClusterRole)"


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
    nks_api_address: str = ""  # set for a kubeconfig from NKS: see leases.egress


@dataclass(frozen=True, slots=True)
class ListPage:
    items: list[dict[str, Any]]
    resource_version: str
    continue_token: str


def parse_kubeconfig(text: str, context: str = "") -> CheckedKubeconfig:
    """The kubeconfig, checked (leases.kubeconfig); a refusal is a configuration KubeError."""
    try:
        return check_kubeconfig(text, context)
    except KubeconfigRefused as refusal:
        raise KubeError(str(refusal), kind="config") from None


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
            pin_server(configuration, config.nks_api_address)
    except (ConfigException, KubeconfigRefused) as exc:
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
    call = k8s.CoordinationV1Api(api).list_lease_for_all_namespaces
    return _list_page(api, call, "leases", LEASE_GRANT, continue_token, limit)


def list_nodes(
    api: k8s.ApiClient, continue_token: str = "", limit: int = LIST_PAGE_SIZE
) -> ListPage:
    """One page of Nodes (cluster-scoped)."""
    return _list_page(api, k8s.CoreV1Api(api).list_node, "nodes", NODE_GRANT, continue_token, limit)


def iter_all_leases(api: k8s.ApiClient, limit: int = LIST_PAGE_SIZE) -> Iterator[ListPage]:
    """Every page of a full list; the last page's resourceVersion is where a watch starts."""
    return _iter_pages(list_leases, api, limit)


def iter_all_nodes(api: k8s.ApiClient, limit: int = LIST_PAGE_SIZE) -> Iterator[ListPage]:
    """Every page of a full Node list; the last page's resourceVersion starts the watch."""
    return _iter_pages(list_nodes, api, limit)


def _iter_pages(
    list_page: Callable[[k8s.ApiClient, str, int], ListPage], api: k8s.ApiClient, limit: int
) -> Iterator[ListPage]:
    continue_token = ""
    while True:
        page = list_page(api, continue_token, limit)
        yield page
        if not page.continue_token:
            return
        continue_token = page.continue_token


def _list_page(
    api: k8s.ApiClient,
    call: Callable[..., Any],
    plural: str,
    grant: str,
    continue_token: str,
    limit: int,
) -> ListPage:
    what = f"{plural.removesuffix('s')} list"
    with _translated_errors(api, f"list {plural}", grant):
        response = call(
            limit=limit,
            _continue=continue_token or None,
            _preload_content=False,
            _request_timeout=(CONNECT_TIMEOUT_SECONDS, LIST_READ_TIMEOUT_SECONDS),
        )
        body = _read_json(response, what)
    metadata = body.get("metadata") or {}
    items = body.get("items")
    if not isinstance(items, list):
        raise KubeError(f"The API server answered a {what} without items.", kind="bad_response")
    return ListPage(
        items=[item for item in items if isinstance(item, dict)],
        resource_version=str(metadata.get("resourceVersion") or ""),
        continue_token=str(metadata.get("continue") or ""),
    )


def probe_revision(api: k8s.ApiClient, timeout: float = PROBE_TIMEOUT_SECONDS) -> str:
    """The server's current resourceVersion, from a one-item Lease list.

    Without a resourceVersion a list is a quorum read of etcd, so its answer proves the
    API server and its storage answered now, and the collection's resourceVersion is the
    storage's revision at that moment: a watch stream that has delivered that far has
    missed nothing before it. The body is a single lease, so the read timeout bounds it.
    """
    call = k8s.CoordinationV1Api(api).list_lease_for_all_namespaces
    with _translated_errors(api, "probe the API server (list leases)", LEASE_GRANT):
        response = call(limit=1, _preload_content=False, _request_timeout=(timeout, timeout))
        body = _read_json(response, "lease list")
    metadata = body.get("metadata")
    revision = str(metadata.get("resourceVersion") or "") if isinstance(metadata, dict) else ""
    if not revision:
        raise KubeError(
            "The API server answered a lease list without a resourceVersion.", kind="bad_response"
        )
    return revision[:64]


def list_lease_candidates(api: k8s.ApiClient) -> tuple[str, list[dict[str, Any]]]:
    """LeaseCandidates from the newest served version; ("", []) when none is served."""
    custom = k8s.CustomObjectsApi(api)
    for version in CANDIDATE_API_VERSIONS:
        try:
            with _translated_errors(api, f"list leasecandidates ({version})", LEASE_GRANT):
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


def status_error(status: dict[str, Any], action: str, server: str, grant: str = "") -> KubeError:
    """A KubeError for a `Status` object sent inside a watch stream (an ERROR event)."""
    code = status.get("code") if isinstance(status.get("code"), int) else None
    message = str(status.get("message") or status.get("reason") or "no message")[:300]
    return _error_for_status(code, message, action, server, grant or _grant_for(action))


def _grant_for(action: str) -> str:
    return NODE_GRANT if "nodes" in action else LEASE_GRANT


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


def _error_for_status(
    code: int | None, message: str, action: str, server: str, grant: str = ""
) -> KubeError:
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
            f"lack RBAC permission; {grant or _grant_for(action)}. Server said: {message}",
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

    def __init__(self, api: k8s.ApiClient, action: str, grant: str = "") -> None:
        self.server = server_address(api)
        self.action = action
        self.grant = grant

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
            return _error_for_status(exc.status, message[:300], action, server, self.grant)
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
        # http.client's own errors come from the watch stream's direct read (watch.py):
        # IncompleteRead when the connection drops inside a chunk.
        if isinstance(
            exc,
            urllib3.exceptions.ProtocolError
            | urllib3.exceptions.HTTPError
            | OSError
            | http.client.HTTPException,
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
