"""The fake kube-apiserver, checked over real HTTP with the official client and raw readers,
and against responses captured from a real kube-apiserver (fixtures/kube-apiserver-1.24)."""

from __future__ import annotations

import base64
import http.client
import itertools
import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
import urllib3
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from fakes.kube import (
    DemoScenario,
    FakeApiServer,
    NodeFleetScenario,
    ObjectStore,
    ScenarioRunner,
)
from fakes.kube.resources import format_micro_time

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURE_DIRS = (
    REPO_ROOT / "tests" / "fixtures" / "kube-apiserver-1.24",
    Path("/work/shared/fixtures/kube-apiserver-1.24"),
)
MICRO_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
LEASES_PATH = "/apis/coordination.k8s.io/v1/leases"


def fixture(name: str) -> Any:
    """A captured response body; `.txt` captures end with curl's `HTTP <code>` line."""
    for directory in FIXTURE_DIRS:
        path = directory / name
        if path.exists():
            text = path.read_text(encoding="utf-8")
            if name.endswith(".jsonl"):
                return [json.loads(line) for line in text.splitlines() if line.strip()]
            return json.loads(re.sub(r"\nHTTP \d+\s*$", "", text.strip()))
    raise AssertionError(f"fixture {name} not found in {[str(d) for d in FIXTURE_DIRS]}")


def shape(value: Any, *, ignore: frozenset[str] = frozenset({"managedFields"})) -> Any:
    """The structure of a JSON value: dict keys and value types, recursively."""
    if isinstance(value, dict):
        return {key: shape(item, ignore=ignore) for key, item in value.items() if key not in ignore}
    if isinstance(value, list):
        return [shape(item, ignore=ignore) for item in value[:1]]
    return type(value).__name__


class RawResponse:
    """A plain HTTP/1.1 request, for what the official client hides (headers, chunks)."""

    def __init__(
        self,
        server: FakeApiServer,
        path: str,
        *,
        method: str = "GET",
        body: Any = None,
        **headers: str,
    ) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        payload = None if body is None else orjson.dumps(body)
        if payload is not None:
            headers.setdefault("Content-Type", "application/json")
        self.connection.request(method, path, body=payload, headers=headers)
        self.response = self.connection.getresponse()
        self.status = self.response.status
        self._buffer = b""

    def json(self) -> Any:
        return orjson.loads(self.response.read())

    def header(self, name: str) -> str | None:
        return self.response.getheader(name)

    def next_line(self) -> bytes | None:
        """The next line of a streamed body; None once the stream ended cleanly."""
        while b"\n" not in self._buffer:
            data = self.response.read1(65536)
            if not data:
                return None
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def next_events(self, count: int) -> list[dict[str, Any]]:
        events = []
        for _ in range(count):
            line = self.next_line()
            assert line is not None, f"stream ended after {len(events)} of {count} events"
            events.append(orjson.loads(line))
        return events

    @property
    def unread(self) -> bytes:
        return self._buffer

    def close(self) -> None:
        self.connection.close()


def spec(holder: str = "holder-a", duration: int = 15) -> dict[str, Any]:
    return {
        "holderIdentity": holder,
        "leaseDurationSeconds": duration,
        "renewTime": datetime.now(UTC),
    }


def lease_body(name: str, holder: str = "holder-a") -> client.V1Lease:
    return client.V1Lease(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=15),
    )


# --- list ---------------------------------------------------------------------------------


def test_list_pages_through_all_namespaces_with_limit_and_continue(
    fake_apiserver: FakeApiServer, coordination_api: client.CoordinationV1Api
) -> None:
    for namespace, name in [("team-b", "z"), ("team-a", "c"), ("team-a", "a"), ("team-b", "y")]:
        fake_apiserver.store.apply_lease(namespace, name, spec())
    fake_apiserver.store.apply_lease("team-a", "b", spec())

    first = coordination_api.list_lease_for_all_namespaces(limit=2)
    second = coordination_api.list_lease_for_all_namespaces(
        limit=2, _continue=first.metadata._continue
    )
    third = coordination_api.list_lease_for_all_namespaces(
        limit=2, _continue=second.metadata._continue
    )

    pages = [first, second, third]
    names = [f"{i.metadata.namespace}/{i.metadata.name}" for page in pages for i in page.items]
    assert names == ["team-a/a", "team-a/b", "team-a/c", "team-b/y", "team-b/z"]
    assert [page.metadata.remaining_item_count for page in pages] == [3, 1, None]
    assert third.metadata._continue is None
    # Every page reports the resourceVersion of the first, where a watch must start.
    assert {page.metadata.resource_version for page in pages} == {"5"}
    token = json.loads(base64.urlsafe_b64decode(first.metadata._continue + "=="))
    assert token == {"v": "meta.k8s.io/v1", "rv": 5, "start": "team-a/b\x00"}


def test_namespace_label_and_field_selectors_filter_the_list(
    fake_apiserver: FakeApiServer, coordination_api: client.CoordinationV1Api
) -> None:
    store = fake_apiserver.store
    store.apply_lease("kube-system", "one", spec(), {"tier": "control-plane", "zone": "a"})
    store.apply_lease("kube-system", "two", spec(), {"tier": "control-plane", "zone": "b"})
    store.apply_lease("apps", "three", spec(), {"tier": "app"})

    def names(result: client.V1LeaseList) -> list[str]:
        return [item.metadata.name for item in result.items]

    assert names(coordination_api.list_namespaced_lease("kube-system")) == ["one", "two"]
    assert names(
        coordination_api.list_lease_for_all_namespaces(label_selector="tier=control-plane,zone=b")
    ) == ["two"]
    assert names(coordination_api.list_lease_for_all_namespaces(label_selector="tier!=app")) == [
        "one",
        "two",
    ]
    assert names(
        coordination_api.list_lease_for_all_namespaces(label_selector="zone in (a, b)")
    ) == ["one", "two"]
    assert names(
        coordination_api.list_lease_for_all_namespaces(field_selector="metadata.name=three")
    ) == ["three"]
    assert names(
        coordination_api.list_lease_for_all_namespaces(field_selector="metadata.namespace=apps")
    ) == ["three"]
    with pytest.raises(ApiException) as raised:
        coordination_api.list_lease_for_all_namespaces(field_selector="spec.holderIdentity=x")
    assert raised.value.status == 400
    assert json.loads(raised.value.body)["message"] == (
        "field label not supported: spec.holderIdentity"
    )


def test_paged_list_with_a_label_selector_omits_remaining_item_count(
    fake_apiserver: FakeApiServer, coordination_api: client.CoordinationV1Api
) -> None:
    for index in range(4):
        fake_apiserver.store.apply_lease("default", f"lease-{index}", spec(), {"app": "x"})

    page = coordination_api.list_namespaced_lease("default", limit=3, label_selector="app=x")

    assert len(page.items) == 3
    assert page.metadata._continue
    assert page.metadata.remaining_item_count is None


# --- get, create, update, delete ---------------------------------------------------------


def test_create_get_update_round_trip_keeps_microsecond_times(
    coordination_api: client.CoordinationV1Api,
) -> None:
    created = coordination_api.create_namespaced_lease("default", lease_body("roundtrip"))
    created.spec.renew_time = datetime(2026, 11, 29, 7, 0, 0, 123456, tzinfo=UTC)
    created.spec.acquire_time = datetime(2026, 11, 29, 6, 0, tzinfo=UTC)

    updated = coordination_api.replace_namespaced_lease("roundtrip", "default", created)
    raw = coordination_api.read_namespaced_lease("roundtrip", "default", _preload_content=False)

    assert int(updated.metadata.resource_version) > int(created.metadata.resource_version)
    body = json.loads(raw.data)
    assert body["spec"]["renewTime"] == "2026-11-29T07:00:00.123456Z"
    assert body["spec"]["acquireTime"] == "2026-11-29T06:00:00.000000Z"
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", body["metadata"]["creationTimestamp"])


def test_update_with_a_stale_resource_version_answers_409_conflict(
    coordination_api: client.CoordinationV1Api,
) -> None:
    stale = coordination_api.create_namespaced_lease("default", lease_body("contested"))
    fresh = coordination_api.read_namespaced_lease("contested", "default")
    fresh.spec.holder_identity = "holder-c"
    coordination_api.replace_namespaced_lease("contested", "default", fresh)

    stale.spec.holder_identity = "holder-b"
    with pytest.raises(ApiException) as raised:
        coordination_api.replace_namespaced_lease("contested", "default", stale)

    assert raised.value.status == 409
    status = json.loads(raised.value.body)
    assert status["reason"] == "Conflict"
    assert status["message"] == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "contested": the object '
        "has been modified; please apply your changes to the latest version and try again"
    )
    assert status["details"] == {
        "name": "contested",
        "group": "coordination.k8s.io",
        "kind": "leases",
    }


def test_creating_an_existing_lease_answers_409_already_exists(
    coordination_api: client.CoordinationV1Api,
) -> None:
    coordination_api.create_namespaced_lease("default", lease_body("t1"))

    with pytest.raises(ApiException) as raised:
        coordination_api.create_namespaced_lease("default", lease_body("t1"))

    assert raised.value.status == 409
    assert json.loads(raised.value.body) == fixture("create_conflict_409.txt")


def test_reading_a_missing_lease_answers_404_not_found(
    coordination_api: client.CoordinationV1Api,
) -> None:
    with pytest.raises(ApiException) as raised:
        coordination_api.read_namespaced_lease("nope", "default")

    assert raised.value.status == 404
    assert json.loads(raised.value.body) == fixture("get_404.txt")


def test_delete_answers_success_status_and_watchers_see_deleted(
    fake_apiserver: FakeApiServer, coordination_api: client.CoordinationV1Api
) -> None:
    created = coordination_api.create_namespaced_lease("default", lease_body("t1"))
    stream = RawResponse(
        fake_apiserver,
        f"{LEASES_PATH}?watch=true&resourceVersion={created.metadata.resource_version}",
    )

    status = coordination_api.delete_namespaced_lease("t1", "default")
    (deleted,) = stream.next_events(1)
    stream.close()

    expected = fixture("delete_200.json")
    expected["details"]["uid"] = created.metadata.uid
    assert status == expected
    assert deleted["type"] == "DELETED"
    assert int(deleted["object"]["metadata"]["resourceVersion"]) > int(
        created.metadata.resource_version
    )
    assert fake_apiserver.store.get_lease("default", "t1") is None


def test_invalid_lease_spec_answers_422_with_field_causes(
    coordination_api: client.CoordinationV1Api,
) -> None:
    body = lease_body("bad")
    body.spec.lease_duration_seconds = 0

    with pytest.raises(ApiException) as raised:
        coordination_api.create_namespaced_lease("default", body)

    status = json.loads(raised.value.body)
    assert raised.value.status == 422
    assert status["reason"] == "Invalid"
    assert status["message"] == (
        'Lease.coordination.k8s.io "bad" is invalid: spec.leaseDurationSeconds: '
        "Invalid value: 0: must be greater than 0"
    )
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: 0: must be greater than 0",
            "field": "spec.leaseDurationSeconds",
        }
    ]


# --- watch --------------------------------------------------------------------------------


def test_watch_streams_chunked_json_lines_with_kind_and_api_version(
    fake_apiserver: FakeApiServer,
) -> None:
    store = fake_apiserver.store
    start = store.resource_version
    stream = RawResponse(fake_apiserver, f"{LEASES_PATH}?watch=true&resourceVersion={start}")
    assert fake_apiserver.wait_for_watches(1)

    store.apply_lease("default", "w", spec("a"))
    store.apply_lease("default", "w", spec("b"))
    store.delete_lease("default", "w")
    events = stream.next_events(3)

    assert stream.status == 200
    assert stream.response.chunked
    assert stream.header("Transfer-Encoding") == "chunked"
    assert stream.header("Content-Type") == "application/json"
    assert [event["type"] for event in events] == ["ADDED", "MODIFIED", "DELETED"]
    assert [event["object"]["spec"].get("holderIdentity") for event in events] == ["a", "b", "b"]
    assert all(event["object"]["kind"] == "Lease" for event in events)
    assert all(event["object"]["apiVersion"] == "coordination.k8s.io/v1" for event in events)
    versions = [int(event["object"]["metadata"]["resourceVersion"]) for event in events]
    assert versions == [start + 1, start + 2, start + 3]
    assert MICRO_TIME.match(events[0]["object"]["spec"]["renewTime"])
    stream.close()


def test_official_client_watch_resumes_after_the_list_resource_version(
    fake_apiserver: FakeApiServer, coordination_api: client.CoordinationV1Api
) -> None:
    fake_apiserver.store.apply_lease("default", "before", spec())
    listed = coordination_api.list_lease_for_all_namespaces()
    fake_apiserver.store.apply_lease("default", "after", spec())

    watcher = watch.Watch()
    seen = []
    for event in watcher.stream(
        coordination_api.list_lease_for_all_namespaces,
        resource_version=listed.metadata.resource_version,
        timeout_seconds=2,
    ):
        seen.append((event["type"], event["object"].metadata.name))
        watcher.stop()

    assert seen == [("ADDED", "after")]
    assert isinstance(event["object"], client.V1Lease)


def test_watch_from_resource_version_zero_starts_with_added_for_current_leases(
    fake_apiserver: FakeApiServer,
) -> None:
    fake_apiserver.store.apply_lease("b", "second", spec())
    fake_apiserver.store.apply_lease("a", "first", spec())

    stream = RawResponse(fake_apiserver, f"{LEASES_PATH}?watch=1&resourceVersion=0")
    events = stream.next_events(2)
    fake_apiserver.store.apply_lease("a", "third", spec())
    (live,) = stream.next_events(1)
    stream.close()

    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "first"),
        ("ADDED", "second"),
    ]
    assert (live["type"], live["object"]["metadata"]["name"]) == ("ADDED", "third")


def test_watch_sends_periodic_bookmarks_with_the_latest_resource_version(
    fake_apiserver: FakeApiServer,
) -> None:
    fake_apiserver.store.apply_lease("default", "x", spec())
    current = fake_apiserver.store.resource_version

    stream = RawResponse(
        fake_apiserver,
        f"{LEASES_PATH}?watch=true&resourceVersion={current}&allowWatchBookmarks=true",
    )
    started = time.monotonic()
    bookmarks = stream.next_events(2)
    elapsed = time.monotonic() - started
    stream.close()

    assert [event["type"] for event in bookmarks] == ["BOOKMARK", "BOOKMARK"]
    assert bookmarks[0]["object"] == {
        "kind": "Lease",
        "apiVersion": "coordination.k8s.io/v1",
        "metadata": {"resourceVersion": str(current), "creationTimestamp": None},
        "spec": {},
    }
    assert 0.3 <= elapsed < 2.0  # two 0.2 s intervals


def test_watch_without_bookmark_permission_gets_no_bookmarks(
    fake_apiserver: FakeApiServer,
) -> None:
    stream = RawResponse(fake_apiserver, f"{LEASES_PATH}?watch=true&timeoutSeconds=1")

    assert stream.next_line() is None  # only the end of the stream, after one second


def test_timeout_seconds_ends_the_stream_cleanly(fake_apiserver: FakeApiServer) -> None:
    started = time.monotonic()
    stream = RawResponse(
        fake_apiserver, f"{LEASES_PATH}?watch=true&timeoutSeconds=1&allowWatchBookmarks=true"
    )
    lines = []
    while (line := stream.next_line()) is not None:
        lines.append(orjson.loads(line))
    elapsed = time.monotonic() - started

    assert 0.9 <= elapsed < 3.0
    # A last bookmark before closing lets the client resume without replaying events.
    assert lines and lines[-1]["type"] == "BOOKMARK"
    assert stream.response.isclosed()


def test_watch_from_a_compacted_resource_version_gets_one_410_error_event(
    fake_apiserver: FakeApiServer,
) -> None:
    fake_apiserver.store.apply_lease("default", "x", spec())
    old = fake_apiserver.store.resource_version
    fake_apiserver.store.apply_lease("default", "x", spec("other"))
    compacted_at = fake_apiserver.store.compact()

    stream = RawResponse(fake_apiserver, f"{LEASES_PATH}?watch=true&resourceVersion={old}")
    (error,) = stream.next_events(1)

    assert stream.status == 200
    assert stream.next_line() is None  # nothing after the error
    assert error == {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f"too old resource version: {old} ({compacted_at})",
            "reason": "Expired",
            "code": 410,
        },
    }
    (real,) = fixture("watch_410_expired.jsonl")
    assert shape(error) == shape(real)
    assert list(error["object"]) == list(real["object"])  # same key order, too


def test_official_client_raises_410_for_expired_watch_when_it_may_not_retry(
    fake_apiserver: FakeApiServer, coordination_api: client.CoordinationV1Api
) -> None:
    fake_apiserver.store.apply_lease("default", "x", spec())
    old = fake_apiserver.store.resource_version
    fake_apiserver.store.apply_lease("default", "x", spec("other"))
    fake_apiserver.store.compact()

    with pytest.raises(ApiException) as raised:
        for _ in watch.Watch().stream(
            coordination_api.list_namespaced_lease,
            "default",
            resource_version=str(old),
            timeout_seconds=2,
        ):
            pass

    assert raised.value.status == 410
    assert raised.value.reason.startswith("Expired: too old resource version")


def test_continue_token_from_before_a_compaction_answers_410(
    fake_apiserver: FakeApiServer, coordination_api: client.CoordinationV1Api
) -> None:
    for index in range(3):
        fake_apiserver.store.apply_lease("default", f"l{index}", spec())
    first = coordination_api.list_namespaced_lease("default", limit=1)
    fake_apiserver.store.apply_lease("default", "l9", spec())
    fake_apiserver.store.compact()

    with pytest.raises(ApiException) as raised:
        coordination_api.list_namespaced_lease(
            "default", limit=1, _continue=first.metadata._continue
        )

    status = json.loads(raised.value.body)
    assert (raised.value.status, status["reason"]) == (410, "Expired")
    assert status["message"].startswith("The provided continue parameter is too old")
    assert status["metadata"]["continue"]


def test_watch_from_a_resource_version_never_issued_answers_504_too_large(
    fake_apiserver: FakeApiServer,
) -> None:
    stream = RawResponse(fake_apiserver, f"{LEASES_PATH}?watch=true&resourceVersion=999999")
    (error,) = stream.next_events(1)

    assert error["type"] == "ERROR"
    assert error["object"]["code"] == 504
    assert error["object"]["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


def test_watch_with_namespace_and_label_selector_sees_only_matching_events(
    fake_apiserver: FakeApiServer,
) -> None:
    store = fake_apiserver.store
    stream = RawResponse(
        fake_apiserver,
        "/apis/coordination.k8s.io/v1/namespaces/apps/leases?watch=true"
        f"&resourceVersion={store.resource_version}&labelSelector=app%3Dweb",
    )
    assert fake_apiserver.wait_for_watches(1)

    store.apply_lease("other", "ignored-namespace", spec(), {"app": "web"})
    store.apply_lease("apps", "ignored-label", spec(), {"app": "db"})
    store.apply_lease("apps", "wanted", spec(), {"app": "web"})
    (event,) = stream.next_events(1)
    stream.close()

    assert event["object"]["metadata"]["name"] == "wanted"


def test_stopping_the_server_ends_open_watches(
    make_fake_apiserver: Callable[..., FakeApiServer],
) -> None:
    server = make_fake_apiserver()
    stream = RawResponse(server, f"{LEASES_PATH}?watch=true")
    assert server.wait_for_watches(1)

    started = time.monotonic()
    server.stop()
    try:
        ended = stream.next_line() is None
    except (http.client.IncompleteRead, ConnectionError):
        ended = True

    assert ended
    assert time.monotonic() - started < 2.0


def test_a_restarted_server_on_the_same_store_lets_watches_resume(
    make_fake_apiserver: Callable[..., FakeApiServer],
) -> None:
    first = make_fake_apiserver()
    first.store.apply_lease("default", "survivor", spec("a"))
    resume_from = first.store.resource_version
    port = first.port
    first.stop()
    first.store.apply_lease("default", "survivor", spec("b"))  # while the server was down

    second = make_fake_apiserver(store=first.store, port=port)
    stream = RawResponse(second, f"{LEASES_PATH}?watch=true&resourceVersion={resume_from}")
    (event,) = stream.next_events(1)
    stream.close()

    assert second.port == port
    assert (event["type"], event["object"]["spec"]["holderIdentity"]) == ("MODIFIED", "b")


def test_send_initial_events_ends_the_initial_list_with_an_annotated_bookmark(
    make_fake_apiserver: Callable[..., FakeApiServer],
) -> None:
    server = make_fake_apiserver(watch_list=True)
    server.store.apply_lease("default", "existing", spec())

    stream = RawResponse(
        server,
        f"{LEASES_PATH}?watch=true&sendInitialEvents=true&allowWatchBookmarks=true"
        "&resourceVersionMatch=NotOlderThan",
    )
    added, bookmark = stream.next_events(2)
    stream.close()

    assert (added["type"], added["object"]["metadata"]["name"]) == ("ADDED", "existing")
    assert bookmark["type"] == "BOOKMARK"
    assert bookmark["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
    assert bookmark["object"]["metadata"]["resourceVersion"] == str(server.store.resource_version)


# --- LeaseCandidates ----------------------------------------------------------------------


def test_lease_candidates_are_served_as_v1beta1(
    fake_apiserver: FakeApiServer, candidates_api: client.CoordinationV1beta1Api
) -> None:
    fake_apiserver.store.apply_candidate(
        "kube-system",
        "kube-scheduler-master-0",
        {
            "leaseName": "kube-scheduler",
            "binaryVersion": "1.33.4",
            "emulationVersion": "1.33.0",
            "strategy": "OldestEmulationVersion",
            "renewTime": datetime.now(UTC),
        },
    )

    listed = candidates_api.list_lease_candidate_for_all_namespaces()
    # The official client refuses such a body itself, so send it raw.
    rejected = RawResponse(
        fake_apiserver,
        "/apis/coordination.k8s.io/v1beta1/namespaces/kube-system/leasecandidates",
        method="POST",
        body={"metadata": {"name": "broken"}, "spec": {"binaryVersion": "1.33.4"}},
    )

    assert listed.kind == "LeaseCandidateList"
    assert [item.spec.lease_name for item in listed.items] == ["kube-scheduler"]
    assert listed.items[0].spec.strategy == "OldestEmulationVersion"
    assert rejected.status == 422
    causes = rejected.json()["details"]["causes"]
    assert {cause["field"] for cause in causes} == {"spec.leaseName", "spec.strategy"}


def test_lease_candidates_answer_404_when_the_server_does_not_serve_them(
    make_fake_apiserver: Callable[..., FakeApiServer],
    make_api_client: Callable[[FakeApiServer], client.ApiClient],
) -> None:
    server = make_fake_apiserver(candidate_versions=())
    candidates_api = client.CoordinationV1beta1Api(make_api_client(server))

    with pytest.raises(ApiException) as raised:
        candidates_api.list_lease_candidate_for_all_namespaces()
    group = RawResponse(server, "/apis/coordination.k8s.io").json()
    version = RawResponse(server, "/apis/coordination.k8s.io/v1beta1")

    assert raised.value.status == 404
    assert json.loads(raised.value.body)["message"] == (
        "the server could not find the requested resource"
    )
    assert [v["version"] for v in group["versions"]] == ["v1"]
    assert version.status == 404


def test_v1alpha2_lease_candidates_are_served_when_configured(
    make_fake_apiserver: Callable[..., FakeApiServer],
) -> None:
    server = make_fake_apiserver(candidate_versions=("v1beta1", "v1alpha2"))
    path = "/apis/coordination.k8s.io/v1alpha2/leasecandidates"
    stream = RawResponse(server, f"{path}?watch=true&resourceVersion=0")
    assert server.wait_for_watches(1)

    server.store.apply_candidate(
        "kube-system",
        "c",
        {
            "leaseName": "l",
            "binaryVersion": "1.33.0",
            "emulationVersion": "1.33.0",
            "strategy": "OldestEmulationVersion",
        },
    )
    (event,) = stream.next_events(1)
    listed = RawResponse(server, path).json()
    stream.close()

    assert event["object"]["apiVersion"] == "coordination.k8s.io/v1alpha2"
    assert listed["apiVersion"] == "coordination.k8s.io/v1alpha2"
    assert [item["metadata"]["name"] for item in listed["items"]] == ["c"]


# --- authentication and injected failures -------------------------------------------------


def test_bearer_token_is_required_when_configured(
    make_fake_apiserver: Callable[..., FakeApiServer],
    make_api_client: Callable[[FakeApiServer], client.ApiClient],
) -> None:
    server = make_fake_apiserver(token="s3cret-token")
    authorised = client.CoordinationV1Api(make_api_client(server))

    anonymous = RawResponse(server, LEASES_PATH)
    wrong = RawResponse(server, LEASES_PATH, Authorization="Bearer wrong")
    health = RawResponse(server, "/readyz")

    assert authorised.list_lease_for_all_namespaces().items == []
    assert (anonymous.status, wrong.status, health.status) == (401, 401, 200)
    assert anonymous.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }


def test_auth_failure_injection_answers_everything_with_401_or_403(
    fake_apiserver: FakeApiServer, coordination_api: client.CoordinationV1Api
) -> None:
    fake_apiserver.set_auth_failure(403)
    with pytest.raises(ApiException) as forbidden:
        coordination_api.list_namespaced_lease("kube-system")
    discovery = RawResponse(fake_apiserver, "/apis")
    fake_apiserver.set_auth_failure(401)
    with pytest.raises(ApiException) as unauthorized:
        coordination_api.list_lease_for_all_namespaces()
    fake_apiserver.set_auth_failure(None)

    assert forbidden.value.status == 403
    assert json.loads(forbidden.value.body)["message"] == (
        'leases.coordination.k8s.io is forbidden: User "system:serviceaccount:lease-dashboard:'
        'lease-dashboard" cannot list resource "leases" in API group "coordination.k8s.io" '
        'in the namespace "kube-system"'
    )
    assert discovery.status == 403
    assert unauthorized.value.status == 401
    assert coordination_api.list_lease_for_all_namespaces().items == []


def test_injected_429_carries_retry_after(fake_apiserver: FakeApiServer) -> None:
    fake_apiserver.fail_next_requests(429, retry_after_seconds=3)

    throttled = RawResponse(fake_apiserver, LEASES_PATH)
    recovered = RawResponse(fake_apiserver, LEASES_PATH)

    assert throttled.status == 429
    assert throttled.header("Retry-After") == "3"
    assert throttled.json()["reason"] == "TooManyRequests"
    assert recovered.status == 200


def test_dropped_watch_sends_half_a_line_and_cuts_the_connection(
    fake_apiserver: FakeApiServer,
) -> None:
    store = fake_apiserver.store
    since = store.resource_version
    fake_apiserver.drop_next_watches(1, after_events=1)
    stream = RawResponse(fake_apiserver, f"{LEASES_PATH}?watch=true&resourceVersion={since}")
    assert fake_apiserver.wait_for_watches(1)

    store.apply_lease("default", "first", spec())
    store.apply_lease("default", "second", spec())
    (delivered,) = stream.next_events(1)
    with pytest.raises(http.client.IncompleteRead):
        stream.next_line()
    half_line = stream.unread
    resumed = RawResponse(
        fake_apiserver,
        f"{LEASES_PATH}?watch=true&resourceVersion="
        f"{delivered['object']['metadata']['resourceVersion']}",
    )
    (redelivered,) = resumed.next_events(1)
    resumed.close()

    assert delivered["object"]["metadata"]["name"] == "first"
    assert half_line.startswith(b'{"type":"ADDED"') and not half_line.endswith(b"\n")
    assert redelivered["object"]["metadata"]["name"] == "second"


def test_official_client_watch_fails_on_a_dropped_connection(
    fake_apiserver: FakeApiServer, coordination_api: client.CoordinationV1Api
) -> None:
    fake_apiserver.drop_next_watches(1)
    watcher = watch.Watch()
    stream = watcher.stream(
        coordination_api.list_lease_for_all_namespaces,
        resource_version=str(fake_apiserver.store.resource_version),
        timeout_seconds=5,
    )
    fake_apiserver.store.apply_lease("default", "x", spec())

    with pytest.raises(urllib3.exceptions.ProtocolError):
        next(stream)


def test_garbage_and_unknown_event_types_reach_open_watches(
    fake_apiserver: FakeApiServer,
) -> None:
    stream = RawResponse(
        fake_apiserver,
        f"{LEASES_PATH}?watch=true&resourceVersion={fake_apiserver.store.resource_version}",
    )
    assert fake_apiserver.wait_for_watches(1)

    fake_apiserver.inject_watch_line(b'{"type":"MODIFIED","object":{"kind":')
    fake_apiserver.inject_unknown_event("SURPRISE")
    fake_apiserver.store.apply_lease("default", "after", spec())

    garbage = stream.next_line()
    unknown = orjson.loads(stream.next_line() or b"")
    (after,) = stream.next_events(1)
    stream.close()

    assert garbage == b'{"type":"MODIFIED","object":{"kind":'
    assert unknown["type"] == "SURPRISE"
    assert after["object"]["metadata"]["name"] == "after"


def test_end_watches_closes_streams_cleanly_for_resumption(fake_apiserver: FakeApiServer) -> None:
    stream = RawResponse(fake_apiserver, f"{LEASES_PATH}?watch=true")
    assert fake_apiserver.wait_for_watches(1)

    fake_apiserver.end_watches()

    assert stream.next_line() is None
    assert [r.status for r in fake_apiserver.requests if r.query.get("watch")] == [200]


# --- fidelity with the real apiserver's captures ------------------------------------------


def test_status_bodies_and_headers_match_the_real_apiserver(
    fake_apiserver: FakeApiServer,
) -> None:
    created = RawResponse(
        fake_apiserver,
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        method="POST",
        body={
            "metadata": {"name": "t1"},
            "spec": {"holderIdentity": "h1", "leaseDurationSeconds": 15},
        },
    )
    created_body = created.json()
    conflict = RawResponse(
        fake_apiserver,
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        method="POST",
        body={"metadata": {"name": "t1"}, "spec": {}},
    )
    missing = RawResponse(
        fake_apiserver, "/apis/coordination.k8s.io/v1/namespaces/default/leases/nope"
    )
    deleted = RawResponse(
        fake_apiserver, "/apis/coordination.k8s.io/v1/namespaces/default/leases/t1", method="DELETE"
    )

    assert created.status == 201
    assert shape(created_body) == shape(fixture("create_201.json"))
    assert created_body["spec"] == fixture("create_201.json")["spec"]
    for response, name, code in (
        (conflict, "create_conflict_409.txt", 409),
        (missing, "get_404.txt", 404),
    ):
        assert response.status == code
        assert response.json() == fixture(name)
        assert response.header("Content-Type") == "application/json"
        assert response.header("Cache-Control") == "no-cache, private"
        assert re.match(r"^[0-9a-f-]{36}$", response.header("Audit-Id") or "")
        assert response.header("X-Kubernetes-Pf-Flowschema-Uid")
        assert response.header("Server") is None  # the apiserver sends none
    real_delete = fixture("delete_200.json")
    real_delete["details"]["uid"] = created_body["metadata"]["uid"]
    assert (deleted.status, deleted.json()) == (200, real_delete)


def test_list_and_watch_objects_match_the_real_apiserver(fake_apiserver: FakeApiServer) -> None:
    store = fake_apiserver.store
    store.apply_lease("default", "probe", {"holderIdentity": "h2", "leaseDurationSeconds": 15})
    store.apply_lease("default", "t1", {"holderIdentity": "h1", "leaseDurationSeconds": 15})
    listed = RawResponse(fake_apiserver, LEASES_PATH).json()
    limited = RawResponse(fake_apiserver, f"{LEASES_PATH}?limit=1").json()
    stream = RawResponse(
        fake_apiserver,
        f"{LEASES_PATH}?watch=true&resourceVersion={listed['metadata']['resourceVersion']}",
    )
    store.apply_lease("default", "t1", {"holderIdentity": "h2", "leaseDurationSeconds": 15})
    store.delete_lease("default", "t1")
    events = stream.next_events(2)
    stream.close()

    assert shape(listed) == shape(fixture("list_all.json"))
    assert [i["spec"] for i in listed["items"]] == [
        i["spec"] for i in fixture("list_all.json")["items"]
    ]
    assert shape(limited) == shape(fixture("list_limit1.json"))
    assert limited["metadata"]["remainingItemCount"] == 1
    real_token = fixture("list_limit1.json")["metadata"]["continue"]
    ours = json.loads(base64.urlsafe_b64decode(limited["metadata"]["continue"] + "=="))
    theirs = json.loads(base64.b64decode(real_token))
    assert ours == {**theirs, "rv": int(listed["metadata"]["resourceVersion"])}
    real_events = fixture("watch_stream.jsonl")
    assert [e["type"] for e in events] == [e["type"] for e in real_events]
    assert [shape(e) for e in events] == [shape(e) for e in real_events]
    assert [e["object"]["spec"] for e in events] == [e["object"]["spec"] for e in real_events]


def test_discovery_matches_the_real_apiserver(fake_apiserver: FakeApiServer) -> None:
    resources = RawResponse(fake_apiserver, "/apis/coordination.k8s.io/v1").json()
    groups = RawResponse(fake_apiserver, "/apis").json()
    version = RawResponse(fake_apiserver, "/version").json()
    candidates = RawResponse(fake_apiserver, "/apis/coordination.k8s.io/v1beta1").json()

    real = fixture("discovery_coordination_v1.txt")
    assert shape(resources) == shape(real)
    assert resources["resources"][0]["verbs"] == real["resources"][0]["verbs"]
    assert (
        resources["resources"][0]["storageVersionHash"]
        == real["resources"][0]["storageVersionHash"]
    )
    assert groups["groups"][0]["preferredVersion"] == {
        "groupVersion": "coordination.k8s.io/v1",
        "version": "v1",
    }
    assert version["gitVersion"] == "v1.33.4" and version["minor"] == "33"
    assert candidates["resources"][0]["kind"] == "LeaseCandidate"


# --- bulk paths for benchmarks ------------------------------------------------------------


def test_prepared_renewals_stream_in_order_without_cutting_off_a_watcher(
    make_fake_apiserver: Callable[..., FakeApiServer],
) -> None:
    # A window far smaller than the burst: publishing must pace itself to the reader.
    server = make_fake_apiserver(event_window=2_000)
    server.store.seed_node_leases(500)
    since = server.store.resource_version
    prepared = server.store.prepare_renewals(10_000)
    stream = RawResponse(server, f"{LEASES_PATH}?watch=true&resourceVersion={since}")
    assert server.wait_for_watches(1)
    published: list[int] = []

    def produce() -> None:
        published.append(server.store.publish(prepared))
        server.store.emit_renewals(2_000)

    producer = threading.Thread(target=produce)
    producer.start()
    events = stream.next_events(12_000)
    producer.join(timeout=10)
    stream.close()

    versions = [int(event["object"]["metadata"]["resourceVersion"]) for event in events]
    assert versions == list(range(since + 1, since + 12_001))
    assert published == [since + 10_000]
    assert {event["type"] for event in events} == {"MODIFIED"}
    # Round-robin: 12,000 renewals over 500 nodes renew each one 24 times.
    assert len({event["object"]["metadata"]["name"] for event in events}) == 500
    final = server.store.get_lease("kube-node-lease", "node-00499")
    assert final is not None and final["metadata"]["resourceVersion"] == str(since + 12_000)


def test_rate_limited_renewals_keep_their_pace() -> None:
    store = ObjectStore()
    store.seed_node_leases(100)

    started = time.monotonic()
    store.emit_renewals(300, rate=1_500)
    elapsed = time.monotonic() - started

    assert 0.15 <= elapsed < 1.0  # 300 events at 1,500/s take 0.2 s


# --- scenarios ----------------------------------------------------------------------------


def _spec_of(store: ObjectStore, namespace: str, name: str) -> dict[str, Any]:
    lease = store.get_lease(namespace, name)
    assert lease is not None, f"{namespace}/{name} is missing"
    return lease["spec"]


def _epoch(micro_time: str) -> float:
    return datetime.fromisoformat(micro_time).timestamp()


def test_demo_scenario_builds_an_nks_like_cluster() -> None:
    store = ObjectStore()
    runner = ScenarioRunner(store, DemoScenario(seed=7), start_time=1_800_000_000.0)
    runner.advance(0)

    kube_system = {lease["metadata"]["name"]: lease for lease in store.list_leases("kube-system")}
    identities = [name for name in kube_system if name.startswith("apiserver-")]
    nodes = store.list_leases("kube-node-lease")
    controller_manager = kube_system["kube-controller-manager"]["spec"]
    candidates = store.list_candidates("kube-system")

    assert {"kube-controller-manager", "kube-scheduler", "cloud-controller-manager"} <= set(
        kube_system
    )
    assert re.match(r"^master-0_[0-9a-f-]{36}$", controller_manager["holderIdentity"])
    assert controller_manager["leaseDurationSeconds"] == 15
    assert len(identities) == 3
    for name in identities:
        assert kube_system[name]["metadata"]["labels"]["apiserver.kubernetes.io/identity"] == (
            "kube-apiserver"
        )
        assert kube_system[name]["spec"]["leaseDurationSeconds"] == 3600
    assert sorted(lease["metadata"]["name"] for lease in nodes) == sorted(
        f"demo-worker-{index}" for index in range(50)
    )
    assert {lease["spec"]["leaseDurationSeconds"] for lease in nodes} == {40}
    assert nodes[0]["metadata"]["ownerReferences"][0]["kind"] == "Node"
    assert kube_system["kube-scheduler"]["spec"]["strategy"] == "OldestEmulationVersion"
    assert kube_system["kube-scheduler"]["spec"]["holderIdentity"] in {
        candidate["metadata"]["name"] for candidate in candidates
    }
    assert {c["spec"]["leaseName"] for c in candidates} == {"kube-scheduler"}
    assert {c["spec"]["emulationVersion"] for c in candidates} == {"1.33.0"}
    assert store.get_lease("cert-manager", "cert-manager-controller") is not None
    assert store.get_lease("ingress-nginx", "ingress-nginx-leader") is not None


def test_demo_scenario_troubles_unfold_over_time() -> None:
    store = ObjectStore()
    start = 1_800_000_000.0
    runner = ScenarioRunner(store, DemoScenario(seed=7), start_time=start)
    runner.advance(0)
    flapping_before = _spec_of(store, "cert-manager", "cert-manager-controller")
    dying_before = _spec_of(store, "ingress-nginx", "ingress-nginx-leader")

    expired_ingress_seen = False
    for _ in range(60):  # two minutes in 2 s steps
        runner.advance(2)
        ingress = _spec_of(store, "ingress-nginx", "ingress-nginx-leader")
        expires = _epoch(ingress["renewTime"]) + ingress["leaseDurationSeconds"]
        expired_ingress_seen |= runner.now > expires
    runner.advance(60)  # t = 180 s: the silent node's lease has long expired

    now = runner.now
    silent = _spec_of(store, "kube-node-lease", "demo-worker-7")
    healthy = _spec_of(store, "kube-node-lease", "demo-worker-8")
    flapping = _spec_of(store, "cert-manager", "cert-manager-controller")
    dying = _spec_of(store, "ingress-nginx", "ingress-nginx-leader")
    controller_manager = _spec_of(store, "kube-system", "kube-controller-manager")
    candidate = store.get_candidate("kube-system", "kube-scheduler-master-0")

    assert now - _epoch(silent["renewTime"]) > silent["leaseDurationSeconds"]
    assert now - _epoch(healthy["renewTime"]) <= 10
    assert now - _epoch(controller_manager["renewTime"]) <= 2
    assert flapping["leaseTransitions"] >= flapping_before["leaseTransitions"] + 3
    assert flapping["holderIdentity"] != flapping_before["holderIdentity"] or (
        flapping["leaseTransitions"] >= flapping_before["leaseTransitions"] + 4
    )
    assert expired_ingress_seen
    assert dying["leaseTransitions"] == dying_before["leaseTransitions"] + 1
    assert dying["holderIdentity"] != dying_before["holderIdentity"]
    assert candidate is not None
    assert _epoch(candidate["spec"]["renewTime"]) >= _epoch(candidate["spec"]["pingTime"])
    assert MICRO_TIME.match(silent["renewTime"])

    runner.advance(240)  # the silent node recovers after four minutes of silence
    recovered = _spec_of(store, "kube-node-lease", "demo-worker-7")
    assert runner.now - _epoch(recovered["renewTime"]) <= 10


def test_nodes_scenario_spreads_renewals_evenly_over_ten_seconds() -> None:
    store = ObjectStore()
    runner = ScenarioRunner(store, NodeFleetScenario(100), start_time=1_800_000_000.0)
    runner.advance(0)
    before = store.resource_version

    runner.advance(10)
    renewals = sorted(_epoch(lease["spec"]["renewTime"]) for lease in store.list_leases())

    assert store.resource_version - before == 100  # each node renewed once
    gaps = [later - earlier for earlier, later in itertools.pairwise(renewals)]
    assert max(gaps) == pytest.approx(0.1, abs=0.01)
    assert min(gaps) == pytest.approx(0.1, abs=0.01)


def test_server_scenario_runs_with_real_time(
    make_fake_apiserver: Callable[..., FakeApiServer],
) -> None:
    server = make_fake_apiserver(scenario="nodes:20", scenario_speed=10.0)
    first = server.store.resource_version

    time.sleep(0.6)  # six scenario seconds: about 12 node renewals

    assert server.store.count() == 20
    assert server.store.resource_version - first >= 6


# --- management command -------------------------------------------------------------------


def test_management_command_serves_until_sigterm_and_writes_a_private_kubeconfig(
    tmp_path: Path,
) -> None:
    kubeconfig = tmp_path / "fake.kubeconfig"
    process = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "fake_apiserver",
            "--port=0",
            "--scenario=nodes:5",
            f"--kubeconfig-out={kubeconfig}",
            "--token=command-token",
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        banner = process.stdout.readline() if process.stdout else ""
        assert "listening on http://127.0.0.1:" in banner, banner + (
            process.stderr.read() if process.stderr and process.poll() is not None else ""
        )
        url = re.search(r"http://127\.0\.0\.1:\d+", banner)
        assert url is not None
        deadline = time.monotonic() + 10
        while not kubeconfig.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        with client.ApiClient(configuration) as api_client:
            leases = client.CoordinationV1Api(api_client).list_namespaced_lease("kube-node-lease")
        assert configuration.host == url.group(0)
        assert stat.S_IMODE(kubeconfig.stat().st_mode) == 0o600
        assert len(leases.items) == 5
        assert urlsplit(url.group(0)).port
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=10)

    assert process.returncode == 0
    assert "stopped" in output


def test_micro_time_format_has_six_fraction_digits() -> None:
    assert format_micro_time(1_800_000_000.5) == "2027-01-15T08:00:00.500000Z"
    assert format_micro_time(1_800_000_000.9999996) == "2027-01-15T08:00:01.000000Z"
