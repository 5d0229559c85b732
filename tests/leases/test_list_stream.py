"""List pages read item by item as their bytes arrive (leases.kube.bounded.ListReader), over
real HTTP: a page is never held whole, whatever order its fields come in and however it is
cut into pieces; malformed, truncated and over-full pages are refused; an object over its
cap is read past and named; continue tokens are followed and an expired one is a 410."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import orjson
import pytest
from kubernetes import client as k8s

from fakes.kube import FakeApiServer
from leases import kube
from tests.leases.test_hostile_apiserver import HostileServer, start_body

MIB = 1024 * 1024


def lease(name: str, version: int = 1, **extra: Any) -> dict[str, Any]:
    """A Lease as the API server lists it, with the bytes a scanner could stumble on:
    brackets, quotes and backslashes inside strings, numbers, nesting, managedFields."""
    return {
        "metadata": {
            "name": name,
            "namespace": "apps",
            "resourceVersion": str(version),
            "annotations": {"tricky": 'a}],{"b":"\\"[{', "path": "C:\\dir\\"},
            "managedFields": [
                {"manager": "m1", "fieldsV1": {"f:spec": {"f:holderIdentity": {}}}},
                {"manager": "m2", "fieldsV1": {"f:spec": {"f:renewTime": {}}}},
            ],
        },
        "spec": {"holderIdentity": f"holder-{name}", "leaseDurationSeconds": 15, **extra},
    }


def page_body(items: list[Any], metadata: dict[str, Any], *, items_first: bool = False) -> bytes:
    fields: list[tuple[str, Any]] = [
        ("kind", "LeaseList"),
        ("apiVersion", "coordination.k8s.io/v1"),
        ("metadata", metadata),
        ("items", items),
    ]
    if items_first:
        fields.reverse()
    return orjson.dumps(dict(fields))


def serve(
    body: bytes, piece: int = 0, *, chunked: bool = False
) -> Callable[[BaseHTTPRequestHandler], None]:
    """A GET answered with `body`, in pieces of `piece` bytes (0: at once), then closed;
    `chunked`: each piece an HTTP chunk, as the real API server sends a long list."""

    def answer(handler: BaseHTTPRequestHandler) -> None:
        start_body(handler, {"Transfer-Encoding": "chunked"} if chunked else None)
        step = piece or len(body) or 1
        for start in range(0, len(body), step):
            part = body[start : start + step]
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
            handler.wfile.flush()
        if chunked:
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()

    return answer


def listed(
    body: bytes, piece: int = 0, limit: int = 500, *, chunked: bool = False
) -> kube.ListPage:
    with HostileServer(serve(body, piece, chunked=chunked)) as server:
        return kube.list_leases(server.api(), limit=limit)


@pytest.fixture
def peak_memory() -> Iterator[Callable[[], int]]:
    tracemalloc.start()
    tracemalloc.reset_peak()
    yield lambda: tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()


# --- Any order, any pieces -----------------------------------------------------------------


@pytest.mark.parametrize("chunked", [False, True], ids=["until-closed", "chunked"])
@pytest.mark.parametrize("items_first", [False, True], ids=["metadata-first", "items-first"])
@pytest.mark.parametrize("piece", [1, 7, 0], ids=["1-byte", "7-byte", "whole"])
def test_a_page_gives_the_same_items_and_metadata_in_any_order_and_any_pieces(
    items_first: bool, piece: int, chunked: bool
) -> None:
    items = [lease("a", 3), lease("b", 4, x=[1, 2.5, True, None, {"y": []}]), lease("c", 5)]
    metadata = {"resourceVersion": "42", "continue": "tok==", "remainingItemCount": 7}
    page = listed(page_body(items, metadata, items_first=items_first), piece, chunked=chunked)
    assert page.items == items
    assert (page.resource_version, page.continue_token, page.cut) == ("42", "tok==", [])


def test_white_space_between_tokens_and_an_empty_page() -> None:
    body = (
        b' {\n "metadata" : { "resourceVersion" : "8" } ,\r\n'
        b' "items" : [ {"a" : [ 1 ] } ,\t{} ] }\n'
    )
    page = listed(body, 3)
    assert page.items == [{"a": [1]}, {}]
    assert page.resource_version == "8"
    empty = listed(b'{"items":[],"metadata":{"resourceVersion":"9"}}', 1)
    assert (empty.items, empty.resource_version, empty.continue_token) == ([], "9", "")


# --- Refused -----------------------------------------------------------------------------

GOOD = page_body([lease("a"), lease("b")], {"resourceVersion": "5"})


@pytest.mark.parametrize(
    ("body", "words"),
    [
        pytest.param(GOOD[: len(GOOD) // 2], "ended early", id="truncated-inside-an-item"),
        pytest.param(GOOD[:-2], "ended early", id="truncated-after-the-items"),
        pytest.param(GOOD[:-1], "ended early", id="the-last-brace-missing"),
        pytest.param(GOOD + b"{}", "something follows", id="trailing-bytes"),
        pytest.param(b'{"items":[{"a":1},]}', "not JSON", id="a-comma-before-the-end"),
        pytest.param(b'{"items":[{"a":1}{"b":2}]}', "not JSON", id="no-comma"),
        pytest.param(b'{"items":[{"a":1]}]}', "not JSON", id="mismatched-brackets"),
        pytest.param(b'{"items":[{"a":tru}]}', "not JSON", id="a-bad-literal"),
        pytest.param(b'{"items":[],"items":[]}', "two item lists", id="two-item-lists"),
        pytest.param(b'[{"a":1}]', "not an object", id="an-array"),
        pytest.param(b'{"metadata":{}}', "without items", id="no-items"),
        pytest.param(b'{"items":{"a":1}}', "without items", id="items-not-a-list"),
        pytest.param(b"", "ended early", id="empty"),
    ],
)
def test_a_malformed_page_is_refused_in_words(body: bytes, words: str) -> None:
    with pytest.raises(kube.KubeError) as caught:
        listed(body, 5)
    assert caught.value.kind == "bad_response"
    assert words in str(caught.value)


def test_the_items_before_a_break_are_given_and_the_break_then_raises() -> None:
    """Streamed: the items read before the body breaks are already taken (the watcher
    relists after the error, and reconciles only after a whole list)."""
    with HostileServer(serve(GOOD[: len(GOOD) - 100], 1)) as server:
        page = kube.stream_leases(server.api())
        taken = []
        with pytest.raises(kube.KubeError) as caught:
            for item in page.items:
                taken.append(item["metadata"]["name"])
    assert taken == ["a"] and caught.value.kind == "bad_response"
    with pytest.raises(RuntimeError):
        _ = page.continue_token  # never a token from a page that was not read to its end


def test_a_page_with_more_objects_than_asked_for_is_refused() -> None:
    body = page_body([lease(f"l{n}") for n in range(4)], {"resourceVersion": "5"})
    assert len(listed(body, limit=4).items) == 4
    with pytest.raises(kube.KubeError) as caught:
        listed(body, limit=3)
    assert caught.value.kind == "bad_response"
    assert "more than the 3 objects asked for" in str(caught.value)


def test_a_list_whose_own_fields_are_huge_is_refused() -> None:
    body = page_body([], {"resourceVersion": "5", "continue": "c" * (128 * 1024)})
    with pytest.raises(kube.KubeError) as caught:
        listed(body)
    assert "own fields are over 64 KiB" in str(caught.value)


# --- Bounded memory --------------------------------------------------------------------------

HUGE = lease("huge", 9, padding="x" * (6 * MIB))
HUGE_PAGE = page_body([lease("a"), HUGE, lease("b")], {"resourceVersion": "10"})


@pytest.mark.parametrize("items_first", [False, True], ids=["metadata-first", "items-first"])
def test_a_huge_object_is_read_past_named_and_never_held(
    items_first: bool, peak_memory: Callable[[], int]
) -> None:
    body = page_body([lease("a"), HUGE, lease("b")], {"resourceVersion": "10"}, items_first=True)
    body = body if items_first else HUGE_PAGE
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    page = listed(body, 64 * 1024)
    assert [item["metadata"]["name"] for item in page.items] == ["a", "b"]
    (cut,) = page.cut
    assert (cut.namespace, cut.name, cut.resource_version) == ("apps", "huge", "9")
    assert cut.size > 6 * MIB
    assert page.resource_version == "10"
    # The cap and a read or two, never the 6 MiB object (the body itself is the server's).
    assert peak_memory() - before < kube.MAX_LEASE_BYTES + 2 * MIB


def test_a_page_far_larger_than_what_is_held_is_taken_one_object_at_a_time(
    peak_memory: Callable[[], int],
) -> None:
    """500 objects of 40 KiB each: a 20 MiB page of which one read and one object are held
    while a taker that keeps only names takes them."""
    items = [lease(f"l{n:03}", n, padding="p" * (40 * 1024)) for n in range(500)]
    body = page_body(items, {"resourceVersion": "600", "continue": "more"})
    del items
    assert len(body) > 19 * MIB
    with HostileServer(serve(body, 256 * 1024)) as server:
        api = server.api()
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        page = kube.stream_leases(api)
        names = [item["metadata"]["name"] for item in page.items]
        held = peak_memory() - before
    assert names == [f"l{n:03}" for n in range(500)]
    assert page.continue_token == "more"
    assert held < 2 * MIB, held


# --- Continue tokens and 410, against the fake API server ------------------------------------


@pytest.fixture
def api_of(tmp_path: Path) -> Callable[[FakeApiServer], k8s.ApiClient]:
    from kubernetes import config

    def make(server: FakeApiServer) -> k8s.ApiClient:
        kubeconfig = server.write_kubeconfig(tmp_path / f"kubeconfig-{server.port}")
        configuration = k8s.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        return k8s.ApiClient(configuration)

    return make


def test_every_lease_of_a_paged_list_comes_once_in_order(
    fake_apiserver: FakeApiServer, api_of: Callable[[FakeApiServer], k8s.ApiClient]
) -> None:
    for number in range(1234):
        fake_apiserver.store.apply_lease("apps", f"l{number:05}", {"holderIdentity": "h"})
    api = api_of(fake_apiserver)
    names: list[str] = []
    tokens: list[str] = []
    versions: set[str] = set()
    for page in kube.iter_all_leases(api):
        names.extend(item["metadata"]["name"] for item in page.items)
        tokens.append(page.continue_token)
        versions.add(page.resource_version)
    assert names == [f"l{number:05}" for number in range(1234)]
    assert len(tokens) == 3 and all(tokens[:2]) and tokens[2] == ""
    assert versions == {"1234"}
    # Each page went back to the pool read to its end, and the next reused its connection
    # (a page's response let go late would close it under the next request).
    pools = api.rest_client.pool_manager.pools
    (key,) = pools.keys()
    assert pools[key].num_connections == 1


def test_an_expired_continue_token_is_a_410(
    fake_apiserver: FakeApiServer, api_of: Callable[[FakeApiServer], k8s.ApiClient]
) -> None:
    for number in range(7):
        fake_apiserver.store.apply_lease("apps", f"l{number}", {"holderIdentity": "h"})
    api = api_of(fake_apiserver)
    first = kube.stream_leases(api, limit=3)
    assert len(list(first.items)) == 3 and first.continue_token
    fake_apiserver.store.apply_lease("apps", "new", {"holderIdentity": "h"})
    fake_apiserver.store.compact()
    with pytest.raises(kube.KubeError) as caught:
        kube.stream_leases(api, first.continue_token, limit=3)
    assert caught.value.kind == "gone" and caught.value.status == 410


def test_a_trickled_page_ends_at_its_deadline() -> None:
    """A byte every 20 ms: the page's items are read until the deadline, then it ends."""

    def trickle(handler: BaseHTTPRequestHandler) -> None:
        start_body(handler)
        for byte in GOOD:
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()
            time.sleep(0.02)

    with HostileServer(trickle) as server:
        started = time.monotonic()
        page = kube.stream_leases(server.api(), deadline=time.monotonic() + 1.0)
        with pytest.raises(kube.KubeError) as caught:
            list(page.items)
        took = time.monotonic() - started
    assert caught.value.kind == "timeout"
    assert 0.9 <= took < 2.0
