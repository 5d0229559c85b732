"""A hostile Kubernetes API server cannot exhaust the watch worker or the pages.

Over real HTTP on loopback: a tiny hostile server (below) for what no real API server
sends (a line that never ends, a gzip bomb against Accept-Encoding: identity, a body one
byte at a time), and the fake API server for what a real one may store (a Lease of
megabytes of annotations). Memory is measured with tracemalloc (what the client held at
its peak), time with the monotonic clock.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import re
import shutil
import socket
import ssl
import subprocess
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import pytest
import yaml
from django.test import Client
from kubernetes import client as k8s

from dashboard.models import ApiToken
from fakes.kube import FakeApiServer
from fakes.kube.kubeconfig import kubeconfig_document
from leases import kube
from leases.models import KubeCluster, Lease
from tests.leases.test_watcher import RunningWatcher, eventually, leader_spec, register, status

MIB = 1024 * 1024

Behaviour = Callable[[BaseHTTPRequestHandler], None]


class HostileServer:
    """An HTTP server on loopback whose every GET runs `behaviour`; it counts the body
    bytes it got out and remembers the request headers."""

    def __init__(self, behaviour: Behaviour) -> None:
        owner = self
        self.sent = 0
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                owner.headers.append({k.lower(): v for k, v in self.headers.items()})
                owner.paths.append(self.path)
                # The client hanging up is what these tests want.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    behaviour(self)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def write(self, handler: BaseHTTPRequestHandler, data: bytes) -> None:
        handler.wfile.write(data)
        handler.wfile.flush()
        self.sent += len(data)

    def __enter__(self) -> HostileServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def api(self) -> k8s.ApiClient:
        configuration = k8s.Configuration()
        configuration.host = f"http://127.0.0.1:{self.server.server_address[1]}"
        configuration.retries = False
        return k8s.ApiClient(configuration)


def start_body(handler: BaseHTTPRequestHandler, headers: dict[str, str] | None = None) -> None:
    """Headers of a body that ends when the connection closes (no length, no chunks)."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Connection", "close")
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()


def event(name: str, version: int, annotation: str = "") -> bytes:
    obj = {
        "kind": "Lease",
        "apiVersion": "coordination.k8s.io/v1",
        "metadata": {
            "name": name,
            "namespace": "apps",
            "resourceVersion": str(version),
            "annotations": {"padding": annotation} if annotation else {},
        },
        "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15},
    }
    return orjson.dumps({"type": "MODIFIED", "object": obj}) + b"\n"


@pytest.fixture
def peak_memory() -> Iterator[Callable[[], int]]:
    """The most bytes Python held at once since the fixture began (tracemalloc)."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    yield lambda: tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()


# --- A watch line that never ends ------------------------------------------------------------


def test_a_watch_line_that_never_ends_is_read_past_unkept_and_the_stream_closed(
    peak_memory: Callable[[], int],
) -> None:
    sent_limit = kube.bounded.MAX_SKIPPED_LINE_BYTES + 32 * MIB

    def endless(handler: BaseHTTPRequestHandler) -> None:
        start_body(handler)
        server.write(handler, event("endless", 9, "x" * 100)[:-3])  # the line goes on...
        block = b"a" * (256 * 1024)
        while server.sent < sent_limit:  # ...for longer than any client should read
            server.write(handler, block)

    with HostileServer(endless) as server:
        stream = kube.open_lease_watch(server.api(), "1", timeout_seconds=5)
        with pytest.raises(kube.KubeError) as caught:
            for _ in stream.batches():
                pass
        stream.close()
    assert caught.value.kind == "too_large"
    # Closed at the cap, not at the end of what the server would send; never kept.
    (cut,) = stream.cut
    assert (cut.namespace, cut.name) == ("apps", "endless")
    assert (
        kube.bounded.MAX_SKIPPED_LINE_BYTES < cut.size < kube.bounded.MAX_SKIPPED_LINE_BYTES + MIB
    )
    assert peak_memory() < 4 * MIB


# Built before any memory is measured: the server shares the test's process.
HUGE_EVENT = event("huge", 7, "x" * (6 * MIB))


def test_a_large_watch_event_is_skipped_named_and_the_stream_goes_on(
    peak_memory: Callable[[], int],
) -> None:
    def large_then_small(handler: BaseHTTPRequestHandler) -> None:
        start_body(handler)
        server.write(handler, event("small-1", 6))
        server.write(handler, HUGE_EVENT)
        server.write(handler, event("small-2", 8))

    with HostileServer(large_then_small) as server:
        stream = kube.open_lease_watch(server.api(), "1", timeout_seconds=5)
        lines = [line for batch in stream.batches() for line in batch]
        stream.close()
    names = [orjson.loads(line)["object"]["metadata"]["name"] for line in lines]
    assert names == ["small-1", "small-2"]
    (cut,) = stream.cut
    assert (cut.namespace, cut.name, cut.resource_version) == ("apps", "huge", "7")
    assert cut.size > 6 * MIB
    # At most the cap and a read or two were held for it, never the 6 MiB event.
    assert peak_memory() < kube.MAX_LEASE_BYTES + 2 * MIB


# --- A compressed body against Accept-Encoding: identity -------------------------------------

BOMB = gzip.compress(b'{"metadata":{"resourceVersion":"5"},"items":[' + b" " * (64 * MIB) + b"]}")


def gzip_bomb(handler: BaseHTTPRequestHandler) -> None:
    start_body(handler, {"Content-Encoding": "gzip", "Content-Length": str(len(BOMB))})
    handler.wfile.write(BOMB)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda api: kube.list_leases(api), id="list-page"),
        pytest.param(lambda api: kube.probe_revision(api), id="probe"),
        pytest.param(lambda api: kube.list_lease_candidates(api), id="candidates"),
        pytest.param(lambda api: kube.open_node_watch(api, "1", 5), id="watch"),
    ],
)
def test_a_compressed_body_is_refused_unread(
    call: Callable[[k8s.ApiClient], object], peak_memory: Callable[[], int]
) -> None:
    assert len(BOMB) < MIB
    with HostileServer(gzip_bomb) as server, pytest.raises(kube.KubeError) as caught:
        call(server.api())
    assert caught.value.kind == "bad_response"
    assert "compressed (gzip)" in str(caught.value)
    assert server.headers[0]["accept-encoding"] == "identity"
    assert peak_memory() < 2 * MIB  # the 64 MiB it inflates to was never made


# --- A body trickled one byte at a time --------------------------------------------------------


def trickle(handler: BaseHTTPRequestHandler) -> None:
    """A valid answer, one byte every 20 ms: about 12 s for the whole of it."""
    start_body(handler)
    body = b'{"metadata":{"resourceVersion":"5"},"items":[]' + b" " * 600 + b"}"
    for byte in body:
        handler.wfile.write(bytes([byte]))
        handler.wfile.flush()
        time.sleep(0.02)


@pytest.mark.parametrize(
    ("call", "deadline"),
    [
        pytest.param(
            lambda api: kube.list_leases(api, deadline=time.monotonic() + 1.0), 1.0, id="page"
        ),
        pytest.param(
            lambda api: read_all(kube.iter_all_nodes(api, seconds=1.0, page_seconds=5.0)),
            1.0,
            id="whole-list",
        ),
        pytest.param(lambda api: kube.probe_revision(api, timeout=0.5), 0.5, id="probe"),
        pytest.param(
            lambda api: kube.changes_since(api, "leases", "4", deadline=time.monotonic() + 1.0),
            1.0,
            id="quiet-check",
        ),
    ],
)
def test_a_trickled_answer_ends_at_its_deadline(
    call: Callable[[k8s.ApiClient], object], deadline: float
) -> None:
    with HostileServer(trickle) as server:
        started = time.monotonic()
        with pytest.raises(kube.KubeError) as caught:
            call(server.api())
        took = time.monotonic() - started
    assert caught.value.kind == "timeout"
    assert deadline - 0.1 <= took < deadline + 1.0


# --- A Lease of megabytes, from a server that stores it ----------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_huge_lease_is_left_out_and_shown_as_cut_and_a_large_one_stays_small(
    apiserver: FakeApiServer, client: Client, django_user_model: Any
) -> None:
    store = apiserver.store
    # Near the cap, ingested: 100 annotations of 2 KiB, more than are kept and longer.
    many = {f"note-{index:03}": "y" * 2048 for index in range(100)}
    store.apply_lease("apps", "large", leader_spec("holder-1"), annotations=many)
    store.apply_lease("apps", "huge", leader_spec("holder-2"), annotations={"x": "z" * 10 * MIB})
    store.apply_lease("apps", "plain", leader_spec("holder-3"))
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: Lease.objects.filter(name="plain").exists())
        eventually(lambda: status(cluster).leases_cut_total == 1)
        # Through the watch too: the stream skips it and goes on.
        store.apply_lease("apps", "huge-2", leader_spec("h"), annotations={"x": "w" * 2 * MIB})
        store.apply_lease("apps", "after", leader_spec("holder-4"))
        eventually(lambda: Lease.objects.filter(name="after").exists())
        eventually(lambda: status(cluster).leases_cut_total == 2)
    row: KubeCluster = status(cluster)
    assert row.leases_last_cut == "apps/huge-2"
    assert row.leases_last_cut_bytes > 2 * MIB
    assert not Lease.objects.filter(name__startswith="huge").exists()
    large = Lease.objects.get(name="large")
    assert len(large.annotations) == 64 and large.annotations_cut == 100
    assert all(len(value) == 1024 for value in large.annotations.values())

    user = django_user_model.objects.create_user("erin")
    client.force_login(user)
    page = client.get(f"/leases/{cluster.name}/apps/large/").content
    assert 70_000 < len(page) < 150_000  # the 64 annotations kept, never the 200 KiB object
    watchers = client.get("/leases/clusters/").content.decode()
    banner = watchers.split(f'data-cut-objects="{cluster.name}">', 1)[1].split("</p>", 1)[0]
    assert "2 were left out" in banner and "apps/huge-2" in banner and "256" in banner
    _, token = ApiToken.issue(user, name="tests")
    answer = client.get("/api/v1/leases", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert answer.status_code == 200 and len(answer.content) < 20_000


# --- A list page over what used to be its cap --------------------------------------------------

GIANT_PAGE = orjson.dumps(
    {
        "kind": "LeaseList",
        "metadata": {"resourceVersion": "9", "continue": "next"},
        "items": [{"metadata": {"name": "giant", "namespace": "apps"}, "x": "z" * (17 * MIB)}],
    }
)


def test_a_page_with_one_giant_object_is_read_once_and_the_object_cut(
    peak_memory: Callable[[], int],
) -> None:
    def giant(handler: BaseHTTPRequestHandler) -> None:
        start_body(handler)
        server.write(handler, GIANT_PAGE)

    with HostileServer(giant) as server:
        tracemalloc.reset_peak()
        page = kube.list_leases(server.api())
    # Streamed: no page is held, so none is asked for again with a smaller limit.
    assert [path.split("limit=")[1].split("&")[0] for path in server.paths] == ["500"]
    assert (page.items, page.continue_token, page.resource_version) == ([], "next", "9")
    (cut,) = page.cut
    assert (cut.namespace, cut.name) == ("apps", "giant")
    assert cut.size > 17 * MIB
    # What was held: the object cap and a read or two, never the 17 MiB object.
    assert peak_memory() < kube.MAX_LEASE_BYTES + 2 * MIB


def read_all(pages: Iterator[kube.PageStream]) -> list[kube.ListPage]:
    return [page.read() for page in pages]


# --- A status line and headers trickled one byte at a time -------------------------------------

SLOW_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
    + b"X-Padding: "
    + b"p" * 150
    + b"\r\n\r\n"
)


def trickled_headers(handler: BaseHTTPRequestHandler) -> None:
    """A valid answer whose status line and headers come one byte every 20 ms (about 5 s);
    every read gets a byte long before any per-read timeout."""
    for byte in SLOW_HEAD:
        handler.wfile.write(bytes([byte]))
        handler.wfile.flush()
        time.sleep(0.02)
    handler.wfile.write(b'{"metadata":{"resourceVersion":"5"},"items":[]}')
    handler.close_connection = True


HEADER_CALLS = [
    pytest.param(
        lambda api: kube.list_leases(api, deadline=time.monotonic() + 1.0), 1.0, id="page"
    ),
    pytest.param(
        lambda api: read_all(kube.iter_all_nodes(api, seconds=1.0, page_seconds=5.0)),
        1.0,
        id="whole-list",
    ),
    pytest.param(lambda api: kube.probe_revision(api, timeout=0.5), 0.5, id="probe"),
    pytest.param(
        lambda api: kube.changes_since(api, "leases", "4", deadline=time.monotonic() + 1.0),
        1.0,
        id="quiet-check",
    ),
    pytest.param(lambda api: kube.list_lease_candidates(api, seconds=1.0), 1.0, id="candidates"),
    # The headers wait of a watch is WATCH_HEADERS_TIMEOUT_SECONDS, set to 1 s below.
    pytest.param(lambda api: kube.open_lease_watch(api, "4", 60), 1.0, id="watch-open"),
]


def ends_at_its_deadline(call: Callable[[], object], deadline: float) -> kube.KubeError:
    started = time.monotonic()
    with pytest.raises(kube.KubeError) as caught:
        call()
    took = time.monotonic() - started
    assert caught.value.kind == "timeout"
    assert deadline - 0.1 <= took < deadline + 1.0, took
    return caught.value


@pytest.mark.parametrize(("call", "deadline"), HEADER_CALLS)
def test_trickled_headers_end_at_the_calls_deadline(
    call: Callable[[k8s.ApiClient], object], deadline: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kube.watch, "WATCH_HEADERS_TIMEOUT_SECONDS", 1.0)
    with HostileServer(trickled_headers) as server:
        api = server.api()
        error = ends_at_its_deadline(lambda: call(api), deadline)
    # What the call had left when it began (the first list of Nodes imports the SDK's API).
    assert re.search(r"took longer than [\d.]+ s in total", str(error)), error


def test_a_client_whose_call_ran_out_of_time_calls_again_on_a_fresh_connection() -> None:
    answers = iter([trickled_headers])

    def first_slow_then_quick(handler: BaseHTTPRequestHandler) -> None:
        behaviour = next(answers, None)
        if behaviour is not None:
            behaviour(handler)
            return
        body = b'{"metadata":{"resourceVersion":"6"},"items":[]}'
        start_body(handler, {"Content-Length": str(len(body))})
        handler.wfile.write(body)

    with HostileServer(first_slow_then_quick) as server:
        api = server.api()
        ends_at_its_deadline(lambda: kube.probe_revision(api, timeout=0.5), 0.5)
        assert kube.probe_revision(api, timeout=2.0) == "6"
        # A call with time to spare is not cut: the alarm was switched off.
        assert kube.list_leases(api).resource_version == "6"


# --- The same over TLS, through connect() -----------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1: (certificate file, key file)."""
    if shutil.which("openssl") is None:
        pytest.fail("openssl is needed to make a test certificate")
    folder = tmp_path_factory.mktemp("tls")
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return str(cert), str(key)


def tls_api(url: str, cert: str) -> k8s.ApiClient:
    """A client from a kubeconfig that trusts `cert`, made by leases.kube.connect."""
    document = kubeconfig_document(url, token="t0ken", context_name="tls")
    with open(cert, "rb") as pem:
        authority = base64.b64encode(pem.read()).decode()
    document["clusters"][0]["cluster"]["certificate-authority-data"] = authority
    return kube.connect(kube.ClusterConfig(kubeconfig=yaml.safe_dump(document)))


@pytest.mark.parametrize(("call", "deadline"), [HEADER_CALLS[2], HEADER_CALLS[5]])
def test_trickled_headers_over_tls_end_at_the_calls_deadline(
    call: Callable[[k8s.ApiClient], object],
    deadline: float,
    certificate: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kube.watch, "WATCH_HEADERS_TIMEOUT_SECONDS", 1.0)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    with HostileServer(trickled_headers) as server:
        server.server.socket = context.wrap_socket(server.server.socket, server_side=True)
        api = tls_api(f"https://127.0.0.1:{server.server.server_address[1]}", certificate[0])
        ends_at_its_deadline(lambda: call(api), deadline)
    # The certificate was verified: the trickle came over TLS.
    assert server.paths


def test_a_tls_handshake_that_never_ends_ends_at_the_pages_deadline(
    certificate: tuple[str, str],
) -> None:
    """A listener that takes the connection and never answers the TLS hello: each read
    waits as long as connecting may take (10 s), the page's deadline is shorter."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    taker = threading.Thread(target=lambda: accepted.append(listener.accept()[0]), daemon=True)
    taker.start()
    try:
        api = tls_api(f"https://127.0.0.1:{listener.getsockname()[1]}", certificate[0])
        error = ends_at_its_deadline(
            lambda: kube.list_leases(api, deadline=time.monotonic() + 1.0), 1.0
        )
        assert "took longer than 1 s in total" in str(error)
    finally:
        for sock in accepted:
            sock.close()
        listener.close()
