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
import time
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
from leases.kube.bounded import (
    IDENTITY,
    MAX_LEASE_BYTES,
    MAX_OBJECT_BYTES,
    MAX_PAGE_BYTES,
    Cut,
    ListReader,
    list_metadata_of_prefix,
    read_body,
)
from leases.kube.deadline import DeadlinePassed, bound_connections, call_deadline
from leases.kube.errors import KubeError
from leases.kubeconfig import CheckedKubeconfig, KubeconfigRefused
from leases.kubeconfig import parse_kubeconfig as check_kubeconfig

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_SECONDS = 10.0
LIST_READ_TIMEOUT_SECONDS = 60.0
# Total deadlines: a page, however it trickles, ends by this; the whole list by the other.
LIST_PAGE_DEADLINE_SECONDS = 60.0
LIST_DEADLINE_SECONDS = 300.0
LIST_PAGE_SIZE = 500
# The probe of a server (leases.watch_probe): a tiny request that must answer at once. A
# server that takes longer is, for the watcher, a server that does not answer.
PROBE_TIMEOUT_SECONDS = 3.0
# A one-lease list: one object at its cap, and the list around it.
PROBE_MAX_BYTES = MAX_LEASE_BYTES + 64 * 1024
CANDIDATE_API_VERSIONS = ("v1beta1", "v1alpha2")
COORDINATION_GROUP = "coordination.k8s.io"
# What a 403 asks the cluster's administrator to grant, per resource.
LEASE_GRANT = "grant get, list and watch on leases and leasecandidates in coordination.k8s.io"
NODE_GRANT = "grant get, list and watch on nodes (core API group, a ClusterRole)"


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Where and how to connect: a kubeconfig's text and context, or in-cluster."""

    in_cluster: bool = False
    kubeconfig: str = field(default="", repr=False)  # a secret: never in repr or logs
    context: str = ""
    nks_api_address: str = ""  # set for a kubeconfig from NKS: see leases.egress


@dataclass(frozen=True, slots=True)
class ListPage:
    """One page read whole (list_leases, list_nodes); the watcher streams its pages."""

    items: list[dict[str, Any]]
    resource_version: str
    continue_token: str
    # Objects over their cap (leases.kube.bounded), left out of `items`.
    cut: list[Cut] = field(default_factory=list)


_END = object()


class PageStream:
    """One page of a list, read as its items are taken (leases.kube.bounded.ListReader):
    the page is never held whole. `items` can be taken once; `cut` fills as they are read;
    `resource_version` and `continue_token` are known once they were read to their end
    (the list's metadata may come after its items)."""

    def __init__(self, reader: ListReader, translated: _translated_errors) -> None:
        self._reader = reader
        self._translated = translated
        self._taken = False

    @property
    def items(self) -> Iterator[dict[str, Any]]:
        if self._taken:
            raise RuntimeError("a streamed list page's items can be read only once")
        self._taken = True
        return self._items()

    def _items(self) -> Iterator[dict[str, Any]]:
        items = self._reader.items()
        try:
            while True:
                # A broken connection or a read timeout, in an engineer's words.
                with self._translated:
                    item = next(items, _END)
                if item is _END:
                    return
                yield item  # type: ignore[misc]
        finally:
            items.close()  # a page left unread closes its connection

    @property
    def cut(self) -> list[Cut]:
        return self._reader.cut

    @property
    def resource_version(self) -> str:
        return str(self._metadata().get("resourceVersion") or "")[:64]

    @property
    def continue_token(self) -> str:
        return str(self._metadata().get("continue") or "")

    def _metadata(self) -> dict[str, Any]:
        if not self._reader.done:
            raise RuntimeError("a streamed list page says where it goes on once it is read")
        return self._reader.metadata

    def read(self) -> ListPage:
        """The whole page, held."""
        items = list(self.items)
        return ListPage(items, self.resource_version, self.continue_token, list(self.cut))


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
    api = k8s.ApiClient(configuration)
    bound_connections(api)  # each call's deadline covers its connect and headers too
    return api


def server_address(api: k8s.ApiClient) -> str:
    parts = urlsplit(api.configuration.host)
    return parts.netloc or api.configuration.host


def list_leases(
    api: k8s.ApiClient,
    continue_token: str = "",
    limit: int = LIST_PAGE_SIZE,
    *,
    deadline: float | None = None,
) -> ListPage:
    """One page of Leases across all namespaces, read whole before `deadline`
    (time.monotonic())."""
    return stream_leases(api, continue_token, limit, deadline=deadline).read()


def stream_leases(
    api: k8s.ApiClient,
    continue_token: str = "",
    limit: int = LIST_PAGE_SIZE,
    *,
    deadline: float | None = None,
) -> PageStream:
    """One page of Leases, its items read as they are taken, all before `deadline`."""
    call = k8s.CoordinationV1Api(api).list_lease_for_all_namespaces
    return _list_page(api, call, "leases", LEASE_GRANT, continue_token, limit, deadline)


def list_nodes(
    api: k8s.ApiClient,
    continue_token: str = "",
    limit: int = LIST_PAGE_SIZE,
    *,
    deadline: float | None = None,
) -> ListPage:
    """One page of Nodes (cluster-scoped), read whole before `deadline` (time.monotonic())."""
    return stream_nodes(api, continue_token, limit, deadline=deadline).read()


def stream_nodes(
    api: k8s.ApiClient,
    continue_token: str = "",
    limit: int = LIST_PAGE_SIZE,
    *,
    deadline: float | None = None,
) -> PageStream:
    """One page of Nodes, its items read as they are taken, all before `deadline`."""
    call = k8s.CoreV1Api(api).list_node
    return _list_page(api, call, "nodes", NODE_GRANT, continue_token, limit, deadline)


def iter_all_leases(
    api: k8s.ApiClient,
    limit: int = LIST_PAGE_SIZE,
    *,
    seconds: float = LIST_DEADLINE_SECONDS,
    page_seconds: float = LIST_PAGE_DEADLINE_SECONDS,
) -> Iterator[PageStream]:
    """Every page of a full list, each read as it is taken (PageStream); the last page's
    resourceVersion is where a watch starts."""
    return _iter_pages(stream_leases, api, limit, seconds, page_seconds)


def iter_all_nodes(
    api: k8s.ApiClient,
    limit: int = LIST_PAGE_SIZE,
    *,
    seconds: float = LIST_DEADLINE_SECONDS,
    page_seconds: float = LIST_PAGE_DEADLINE_SECONDS,
) -> Iterator[PageStream]:
    """Every page of a full Node list, each read as it is taken (PageStream); the last
    page's resourceVersion starts the watch."""
    return _iter_pages(stream_nodes, api, limit, seconds, page_seconds)


def _iter_pages(
    list_page: Callable[..., PageStream],
    api: k8s.ApiClient,
    limit: int,
    seconds: float,
    page_seconds: float,
) -> Iterator[PageStream]:
    """Pages until the last; the whole list ends by `seconds`, each page by `page_seconds`
    (a server that trickles pages must not hold the reader for ever). Each page is read by
    whoever takes it, before the next is asked for."""
    continue_token = ""
    list_deadline = time.monotonic() + seconds
    while True:
        deadline = min(list_deadline, time.monotonic() + page_seconds)
        page = list_page(api, continue_token, limit, deadline=deadline)
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
    deadline: float | None,
) -> PageStream:
    """One page, opened: its items are read as they are taken (PageStream)."""
    what = f"{plural.removesuffix('s')} list"
    if deadline is None:
        deadline = time.monotonic() + LIST_PAGE_DEADLINE_SECONDS
    translated = _translated_errors(api, f"list {plural}", grant)
    with call_deadline(api, deadline), translated:
        response = call(
            limit=limit,
            _continue=continue_token or None,
            _preload_content=False,
            _request_timeout=(CONNECT_TIMEOUT_SECONDS, _read_timeout(deadline)),
            _headers=IDENTITY,
        )
        reader = ListReader(response, what, MAX_OBJECT_BYTES[plural], limit, deadline)
    return PageStream(reader, translated)


def _read_timeout(deadline: float) -> float:
    """Each read's wait, no longer than the deadline leaves (the whole of connect, status
    line and headers is bounded by the deadline itself: leases.kube.deadline)."""
    return max(0.1, min(LIST_READ_TIMEOUT_SECONDS, deadline - time.monotonic()))


def _within_cap(
    items: list[Any], max_bytes: int, body_size: int
) -> tuple[list[dict[str, Any]], list[Cut]]:
    """The items under the object cap, and the others as Cuts (not ingested)."""
    objects = [item for item in items if isinstance(item, dict)]
    if body_size <= max_bytes:
        return objects, []  # no item can be larger than the whole body
    kept: list[dict[str, Any]] = []
    cut: list[Cut] = []
    for item in objects:
        size = len(orjson.dumps(item))
        if size <= max_bytes:
            kept.append(item)
            continue
        metadata = item.get("metadata") if isinstance(item.get("metadata"), dict) else {}
        cut.append(
            Cut(
                _bounded_text(metadata.get("namespace")),
                _bounded_text(metadata.get("name")),
                size,
                _bounded_text(metadata.get("resourceVersion"), 64),
            )
        )
    return kept, cut


def _bounded_text(value: object, limit: int = 253) -> str:
    return value[:limit].replace("\x00", "") if isinstance(value, str) else ""


def probe_revision(api: k8s.ApiClient, timeout: float = PROBE_TIMEOUT_SECONDS) -> str:
    """The server's current resourceVersion, from a one-item Lease list.

    Without a resourceVersion a list is a quorum read of etcd, so its answer proves the
    API server and its storage answered now, and the collection's resourceVersion is the
    storage's revision at that moment: a watch stream that has delivered that far has
    missed nothing before it. `timeout` bounds the whole call, not each read; a lease over
    its cap is not read to its end (the revision comes before the items).
    """
    call = k8s.CoordinationV1Api(api).list_lease_for_all_namespaces
    deadline = time.monotonic() + timeout
    with (
        call_deadline(api, deadline, timeout),
        _translated_errors(api, "probe the API server (list leases)", LEASE_GRANT),
    ):
        response = call(
            limit=1,
            _preload_content=False,
            _request_timeout=(timeout, timeout),
            _headers=IDENTITY,
        )
        body = read_body(response, "lease list", PROBE_MAX_BYTES, deadline)
    if body.over:
        metadata: object = list_metadata_of_prefix(body.data)
    else:
        metadata = _read_json(body.data, "lease list").get("metadata")
    revision = str(metadata.get("resourceVersion") or "") if isinstance(metadata, dict) else ""
    if not revision:
        raise KubeError(
            "The API server answered a lease list without a resourceVersion.", kind="bad_response"
        )
    return revision[:64]


def list_lease_candidates(
    api: k8s.ApiClient, seconds: float = LIST_PAGE_DEADLINE_SECONDS
) -> tuple[str, list[dict[str, Any]], list[Cut]]:
    """LeaseCandidates from the newest served version, and those left out for their size;
    ("", [], []) when none is served.

    One unpaged list (a cluster has a candidate per control-plane component), so its body
    is capped like a page of leases and over-size candidates are left out.
    """
    custom = k8s.CustomObjectsApi(api)
    deadline = time.monotonic() + seconds
    what = "lease candidate list"
    for version in CANDIDATE_API_VERSIONS:
        try:
            with (
                call_deadline(api, deadline, seconds),
                _translated_errors(api, f"list leasecandidates ({version})", LEASE_GRANT),
            ):
                response = custom.list_cluster_custom_object(
                    COORDINATION_GROUP,
                    version,
                    "leasecandidates",
                    _preload_content=False,
                    _request_timeout=(CONNECT_TIMEOUT_SECONDS, _read_timeout(deadline)),
                    _headers=IDENTITY,
                )
                body = read_body(response, what, MAX_PAGE_BYTES["leases"], deadline)
        except KubeError as error:
            if error.kind == "not_found":
                continue
            raise
        if body.over:
            raise KubeError(
                f"The API server sent a lease candidate list over "
                f"{MAX_PAGE_BYTES['leases'] // (1024 * 1024)} MiB; it was refused.",
                kind="bad_response",
            )
        items = _read_json(body.data, what).get("items")
        items = items if isinstance(items, list) else []
        kept, cut = _within_cap(items, MAX_LEASE_BYTES, body.size)
        return f"{COORDINATION_GROUP}/{version}", kept, cut
    return "", [], []


def status_error(status: dict[str, Any], action: str, server: str, grant: str = "") -> KubeError:
    """A KubeError for a `Status` object sent inside a watch stream (an ERROR event)."""
    code = status.get("code") if isinstance(status.get("code"), int) else None
    message = str(status.get("message") or status.get("reason") or "no message")[:300]
    return _error_for_status(code, message, action, server, grant or _grant_for(action))


def _grant_for(action: str) -> str:
    return NODE_GRANT if "nodes" in action else LEASE_GRANT


def _read_json(data: bytes, what: str) -> dict[str, Any]:
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise KubeError(
            f"The API server sent a {what or 'answer'} that is not JSON.", kind="bad_response"
        ) from None
    if not isinstance(body, dict):
        raise KubeError(
            f"The API server sent a {what or 'answer'} that is not an object.",
            kind="bad_response",
        )
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
        if isinstance(exc, DeadlinePassed):
            return KubeError(
                f"The API server at {server} took longer than {exc.seconds:.3g} s in total to "
                f"answer while trying to {action} (it connected, or sent its status line and "
                "headers, too slowly).",
                kind="timeout",
            )
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
