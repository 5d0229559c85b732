"""The fake kube-apiserver's process faults for fault campaigns (a stall, stuck watch streams,
kill and restart, slow list pages, a 410 storm, streams cut mid-line), and the
resourceVersion and bookmark behaviour those campaigns lean on, over real HTTP.

Requests go over raw sockets read with a deadline: "the server sent no byte" is only
visible that way (an HTTP client would block on the status line or hide bytes in a buffer).
"""

from __future__ import annotations

import http.client
import inspect
import select
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from fakes.kube import FakeApiServer, ObjectStore, Scenario, ScenarioRunner
from fakes.kube.server import DEFAULT_BOOKMARK_INTERVAL, FORBIDDEN_USER
from tests.leases.test_fake_apiserver import fixture, shape

LEASES_PATH = "/apis/coordination.k8s.io/v1/leases"
NODES_PATH = "/api/v1/nodes"
CANDIDATES_PATH = "/apis/coordination.k8s.io/v1beta1/leasecandidates"
GROUP = "coordination.k8s.io"


class RawClient:
    """One HTTP/1.1 request on a raw socket, and every byte of the answer as it arrives."""

    def __init__(
        self, server: FakeApiServer, path: str, *, method: str = "GET", body: Any = None
    ) -> None:
        self.sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        payload = b"" if body is None else orjson.dumps(body)
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        if payload:
            head += f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
        self.sock.sendall(head.encode() + b"\r\n" + payload)
        self.data = bytearray()
        self.closed = False  # the server closed (or cut) the connection

    def receive(self, seconds: float) -> bytes:
        """What arrives within `seconds` (less if the server closes the connection)."""
        start = len(self.data)
        deadline = time.monotonic() + seconds
        while not self.closed and (remaining := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([self.sock], [], [], remaining)
            if not readable:
                break
            try:
                received = self.sock.recv(65536)
            except ConnectionResetError:
                received = b""
            if not received:
                self.closed = True
            self.data += received
        return bytes(self.data[start:])

    def wait_until(self, condition: Callable[[], bool], timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.closed or time.monotonic() > deadline:
                raise AssertionError(f"not seen in {timeout} s; received {bytes(self.data)!r}")
            self.receive(0.05)

    def close(self) -> None:
        self.sock.close()

    # --- the answer so far ----------------------------------------------------------------

    @property
    def _head_and_rest(self) -> tuple[bytes, bytes] | None:
        head, separator, rest = bytes(self.data).partition(b"\r\n\r\n")
        return (head, rest) if separator else None

    @property
    def status(self) -> int | None:
        parts = self._head_and_rest
        return int(parts[0].split(b" ")[1]) if parts else None

    def _chunked_body(self) -> tuple[bytes, bool]:
        """The body so far and whether its terminating chunk arrived."""
        parts = self._head_and_rest
        if parts is None:
            return b"", False
        rest, body = parts[1], b""
        while True:
            size_line, separator, after = rest.partition(b"\r\n")
            if not separator:
                return body, False
            size = int(size_line, 16)
            if size == 0:
                return body, True
            body += after[:size]
            if len(after) < size + 2:
                return body, False
            rest = after[size + 2 :]

    @property
    def ended_cleanly(self) -> bool:
        return self._chunked_body()[1]

    @property
    def events(self) -> list[dict[str, Any]]:
        """The complete lines of a streamed body."""
        body = self._chunked_body()[0]
        return [orjson.loads(line) for line in body.split(b"\n")[:-1]]

    @property
    def partial_line(self) -> bytes:
        """What follows the last complete line of a streamed body."""
        return self._chunked_body()[0].rpartition(b"\n")[2]

    @property
    def complete(self) -> bool:
        """A whole Content-Length answer has arrived."""
        parts = self._head_and_rest
        if parts is None:
            return False
        for line in parts[0].split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                return len(parts[1]) >= int(value)
        return False

    def json(self) -> Any:
        self.wait_until(lambda: self.complete)
        parts = self._head_and_rest
        assert parts is not None
        return orjson.loads(parts[1])


def request(
    server: FakeApiServer, path: str, *, method: str = "GET", body: Any = None
) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    payload = None if body is None else orjson.dumps(body)
    headers = {"Content-Type": "application/json"} if payload else {}
    try:
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        data = response.read()
        if response.getheader("Content-Type", "").startswith("application/json"):
            return response.status, orjson.loads(data)
        return response.status, data.decode()
    finally:
        connection.close()


def spec(holder: str = "holder-a") -> dict[str, Any]:
    return {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": datetime.now(UTC)}


def lease_body(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {"holderIdentity": "h", "leaseDurationSeconds": 15},
    }


def watch_path(path: str, resource_version: int | str, **params: str) -> str:
    query = "".join(f"&{key}={value}" for key, value in params.items())
    return f"{path}?watch=true&resourceVersion={resource_version}{query}"


def of_type(events: list[dict[str, Any]], event_type: str) -> list[dict[str, Any]]:
    return [event for event in events if event["type"] == event_type]


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


# --- stall / resume -----------------------------------------------------------------------


def test_a_stalled_server_accepts_connections_but_sends_no_byte_until_resumed(
    make_fake_apiserver: Callable[..., FakeApiServer],
) -> None:
    server = make_fake_apiserver(bookmark_interval=0.2)
    store = server.store
    store.apply_lease("default", "a", spec("before"))
    stream = RawClient(
        server, watch_path(LEASES_PATH, store.resource_version, allowWatchBookmarks="true")
    )
    stream.wait_until(lambda: bool(of_type(stream.events, "BOOKMARK")))

    server.stall()
    stream.receive(0.2)  # a write already under way when stall() returned
    before = len(stream.data)
    listing = RawClient(server, LEASES_PATH)  # the connection is accepted
    health = RawClient(server, "/healthz")
    store.apply_lease("default", "a", spec("meanwhile"))  # through another apiserver
    silent_stream = stream.receive(1.0)  # five bookmark intervals and one event

    assert silent_stream == b""
    assert listing.receive(0.05) == b"" and health.receive(0.05) == b""
    assert not stream.closed and not listing.closed

    server.resume()
    listed = listing.json()
    health.wait_until(lambda: health.complete)
    stream.wait_until(lambda: bool(of_type(stream.events, "MODIFIED")))

    assert listing.status == 200 and health.status == 200
    # A held request is answered from the state at the moment of resuming.
    assert [item["spec"]["holderIdentity"] for item in listed["items"]] == ["meanwhile"]
    assert listed["metadata"]["resourceVersion"] == str(store.resource_version)
    assert len(stream.data) > before
    (modified,) = of_type(stream.events, "MODIFIED")
    assert modified["object"]["spec"]["holderIdentity"] == "meanwhile"
    for client in (stream, listing, health):
        client.close()


def test_a_write_held_by_a_stall_is_made_on_resume_and_never_if_the_server_is_killed(
    make_fake_apiserver: Callable[..., FakeApiServer],
) -> None:
    server = make_fake_apiserver()
    store = server.store
    create_path = f"/apis/{GROUP}/v1/namespaces/default/leases"

    server.stall()
    held = RawClient(server, create_path, method="POST", body=lease_body("held"))
    time.sleep(0.5)
    assert store.get_lease("default", "held") is None  # a frozen server writes nothing
    server.resume()
    assert held.json()["metadata"]["name"] == "held" and held.status == 201

    server.stall()
    doomed = RawClient(server, create_path, method="POST", body=lease_body("doomed"))
    time.sleep(0.3)
    server.kill()
    doomed.receive(2.0)
    server.restart()

    assert doomed.closed and doomed.data == b""  # cut without a byte of answer
    assert store.get_lease("default", "doomed") is None
    assert request(server, f"{create_path}/doomed")[0] == 404
    held.close()
    doomed.close()


def test_scenario_renewals_due_during_a_stall_are_not_made_and_go_on_after_resume(
    make_fake_apiserver: Callable[..., FakeApiServer],
) -> None:
    # nodes:4 at ten times real speed: each lease renews every second, one write per 0.25 s.
    server = make_fake_apiserver(scenario="nodes:4", scenario_speed=10)
    store = server.store
    started = store.resource_version
    wait_for(lambda: store.resource_version > started)

    runner = server.scenario_runner
    assert runner is not None

    server.stall()
    time.sleep(0.2)  # the runner's tick under way when stall() returned
    frozen, stalled_at = store.resource_version, runner.now
    time.sleep(1.5)  # 15 scenario seconds: each lease missed a renewal
    during, resumed_at = store.resource_version, runner.now
    server.resume()
    time.sleep(1.3)  # every lease renews once more
    since_frozen = RawClient(server, watch_path(LEASES_PATH, frozen, timeoutSeconds="1"))
    since_frozen.wait_until(lambda: since_frozen.ended_cleanly)

    assert during == frozen
    renewals = [
        (
            event["object"]["metadata"]["name"],
            datetime.fromisoformat(event["object"]["spec"]["renewTime"]).timestamp(),
        )
        for event in since_frozen.events
    ]
    assert {name for name, _ in renewals} == {f"node-{index:05d}" for index in range(4)}
    # None was made late with a time inside the stall (one tick of slack at each end).
    slack = runner.tick_seconds * runner.speed
    assert all(not stalled_at + slack < at < resumed_at - slack for _, at in renewals), (
        renewals,
        stalled_at,
        resumed_at,
    )
    since_frozen.close()


def test_a_held_scenario_skips_repeated_writes_and_retries_one_off_ones() -> None:
    start = 1_800_000_000.0
    refused = [False]
    made: list[tuple[str, float]] = []
    scenario = Scenario()
    scenario.every(start + 1, 1.0, lambda when: made.append(("renew", when)))
    scenario.at(start + 2.5, lambda when: made.append(("step", when)))
    runner = ScenarioRunner(
        ObjectStore(), scenario, start_time=start, writes_refused=lambda: refused[0]
    )

    runner.advance(1.0)
    refused[0] = True
    runner.advance(2.0)  # the renewals due at +2 and +3 and the step at +2.5: refused
    refused[0] = False
    runner.advance(0.5)
    runner.advance(0.5)

    # The step is the client's retry once writes are taken again (+3.5); the renewals due
    # meanwhile were not made, the next one is (+4).
    assert made == [("renew", start + 1), ("step", start + 3.5), ("renew", start + 4)]


# --- stall_watch_streams / resume_watch_streams -------------------------------------------


def test_stalled_watch_streams_stay_silent_while_everything_else_answers(
    make_fake_apiserver: Callable[..., FakeApiServer],
) -> None:
    server = make_fake_apiserver(bookmark_interval=0.2)
    store = server.store
    since = store.resource_version
    stuck = RawClient(server, watch_path(LEASES_PATH, since, allowWatchBookmarks="true"))
    timing_out = RawClient(
        server,
        watch_path(LEASES_PATH, since, allowWatchBookmarks="true", timeoutSeconds="1"),
    )
    nodes = RawClient(server, watch_path(NODES_PATH, since))
    assert server.wait_for_watches(3)
    for client in (stuck, timing_out):
        client.wait_until(lambda client=client: bool(of_type(client.events, "BOOKMARK")))

    assert server.stall_watch_streams("leases") == 2
    for client in (stuck, timing_out):
        client.receive(0.2)  # a write already under way
    before = len(stuck.data)
    unseen = store.apply_lease("default", "unseen", spec())
    store.apply_node("worker-1")
    later = RawClient(server, watch_path(LEASES_PATH, since))
    nodes.wait_until(lambda: bool(nodes.events))
    later.wait_until(lambda: bool(later.events))
    status, listed = request(server, LEASES_PATH)
    silent = stuck.receive(1.5)  # seven bookmark intervals
    silent_past_its_timeout = timing_out.receive(0.05)

    assert silent == b"" and silent_past_its_timeout == b""
    assert not stuck.closed and not timing_out.closed
    assert [event["object"]["metadata"]["name"] for event in nodes.events] == ["worker-1"]
    assert [event["object"]["metadata"]["name"] for event in later.events] == ["unseen"]
    assert status == 200 and [item["metadata"]["name"] for item in listed["items"]] == ["unseen"]

    server.resume_watch_streams()
    stuck.wait_until(lambda: bool(of_type(stuck.events, "ADDED")))
    timing_out.wait_until(lambda: timing_out.ended_cleanly)

    assert len(stuck.data) > before
    assert [e["object"]["metadata"]["name"] for e in of_type(stuck.events, "ADDED")] == ["unseen"]
    # The one past its timeout ends as a timed-out watch does, with a bookmark at what it
    # sent (before the lease it did not deliver), so its client resumes without a loss.
    last = timing_out.events[-1]
    assert last["type"] == "BOOKMARK" and not of_type(timing_out.events, "ADDED")
    unseen_version = int(unseen["metadata"]["resourceVersion"])
    assert int(last["object"]["metadata"]["resourceVersion"]) < unseen_version
    for client in (stuck, timing_out, nodes, later):
        client.close()


def test_stall_watch_streams_refuses_an_unknown_resource(fake_apiserver: FakeApiServer) -> None:
    with pytest.raises(ValueError, match="unknown resource"):
        fake_apiserver.stall_watch_streams("pods")


# --- kill / restart -----------------------------------------------------------------------


def test_kill_refuses_connections_and_cuts_streams_and_restart_serves_the_same_store(
    make_fake_apiserver: Callable[..., FakeApiServer],
) -> None:
    server = make_fake_apiserver()
    store = server.store
    store.apply_lease("kube-system", "survivor", spec())
    stream = RawClient(server, watch_path(LEASES_PATH, store.resource_version))
    assert server.wait_for_watches(1)
    stream.wait_until(lambda: stream.status == 200)
    port = server.port
    last = store.resource_version

    server.kill()
    stream.receive(2.0)

    assert stream.closed and not stream.ended_cleanly  # no terminating chunk
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    assert server.port == port

    server.restart()
    status, listed = request(server, LEASES_PATH)
    created_status, created = request(
        server,
        f"/apis/{GROUP}/v1/namespaces/default/leases",
        method="POST",
        body=lease_body("after-restart"),
    )

    assert server.port == port
    assert status == 200 and listed["metadata"]["resourceVersion"] == str(last)
    assert [item["metadata"]["name"] for item in listed["items"]] == ["survivor"]
    assert created_status == 201
    assert created["metadata"]["resourceVersion"] == str(last + 1)  # the counter continues
    stream.close()


def test_a_restarted_server_answers_410_to_a_watch_from_before_its_restart_as_a_real_one(
    fake_apiserver: FakeApiServer,
) -> None:
    # A real 1.24 restarted: "too old resource version: 201 (253)" for the node watch that
    # resumed from before, while one from the current revision went on.
    store = fake_apiserver.store
    store.apply_lease("default", "a", spec())
    old = store.resource_version
    store.apply_lease("default", "a", spec("b"))
    current = store.resource_version

    fake_apiserver.restart()
    gone = RawClient(fake_apiserver, watch_path(LEASES_PATH, old))
    gone.wait_until(lambda: gone.ended_cleanly)
    resumed = RawClient(fake_apiserver, watch_path(LEASES_PATH, current))
    assert fake_apiserver.wait_for_watches(1)
    store.apply_lease("default", "a", spec("c"))
    resumed.wait_until(lambda: bool(resumed.events))
    status, listed = request(fake_apiserver, LEASES_PATH)

    (error,) = gone.events
    assert error["type"] == "ERROR" and error["object"]["code"] == 410
    assert error["object"]["message"] == f"too old resource version: {old} ({current})"
    assert [event["type"] for event in resumed.events] == ["MODIFIED"]
    assert status == 200 and [item["metadata"]["name"] for item in listed["items"]] == ["a"]
    gone.close()
    resumed.close()


def _forbidden(message: str, plural: str, group: str, name: str | None = None) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name} if name else {}
    if group:
        details["group"] = group
    details["kind"] = plural
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "Forbidden",
        "details": details,
        "code": 403,
    }


def test_a_restarted_server_answers_403_until_its_rbac_cache_is_loaded(
    make_fake_apiserver: Callable[..., FakeApiServer],
) -> None:
    server = make_fake_apiserver()
    server.store.apply_lease("kube-system", "x", spec())
    user = f'User "{FORBIDDEN_USER}"'

    server.restart(forbidden_seconds=1.5)  # a running server is killed first
    restarted = time.monotonic()
    answers = {
        "list": request(server, f"{LEASES_PATH}?limit=1"),
        "get": request(server, f"/apis/{GROUP}/v1/namespaces/kube-system/leases/x"),
        "watch": request(server, f"{NODES_PATH}?watch=true"),
        "health": request(server, "/healthz"),
        "discovery": request(server, "/apis"),
    }
    asked_within = time.monotonic() - restarted
    wait_for(lambda: time.monotonic() - restarted > 1.6)
    after = request(server, f"{LEASES_PATH}?limit=1")

    assert asked_within < 1.5
    assert answers["list"] == (
        403,
        _forbidden(
            f"leases.{GROUP} is forbidden: {user} cannot list resource "
            f'"leases" in API group "{GROUP}" at the cluster scope',
            "leases",
            GROUP,
        ),
    )
    assert answers["get"] == (
        403,
        _forbidden(
            f'leases.{GROUP} "x" is forbidden: {user} cannot get resource '
            f'"leases" in API group "{GROUP}" in the namespace "kube-system"',
            "leases",
            GROUP,
            "x",
        ),
    )
    assert answers["watch"] == (
        403,
        _forbidden(
            f'nodes is forbidden: {user} cannot watch resource "nodes" in API group "" '
            "at the cluster scope",
            "nodes",
            "",
        ),
    )
    assert answers["health"][0] == 403
    assert answers["health"][1]["message"] == (
        'forbidden: User "system:anonymous" cannot get path "/healthz"'
    )
    assert answers["discovery"][0] == 403
    assert after[0] == 200 and after[1]["items"][0]["metadata"]["name"] == "x"


def test_scenario_clients_write_nothing_while_the_server_is_killed_or_restarting(
    make_fake_apiserver: Callable[..., FakeApiServer],
) -> None:
    server = make_fake_apiserver(scenario="nodes:4", scenario_speed=10)
    store = server.store
    started = store.resource_version
    wait_for(lambda: store.resource_version > started)

    server.kill()
    time.sleep(0.2)
    killed_at = store.resource_version
    time.sleep(0.6)
    while_killed = store.resource_version
    server.restart(forbidden_seconds=0.8)
    restarted = time.monotonic()
    time.sleep(0.6)
    while_forbidden = store.resource_version
    wait_for(lambda: store.resource_version > killed_at, timeout=3.0)

    assert while_killed == killed_at == while_forbidden
    assert time.monotonic() - restarted >= 0.8


# --- slow_lists ---------------------------------------------------------------------------


def test_slow_lists_delay_every_page_and_nothing_else(fake_apiserver: FakeApiServer) -> None:
    for name in ("a", "b", "c"):
        fake_apiserver.store.apply_lease("default", name, spec())

    fake_apiserver.slow_lists(0.4)
    durations, names, token = [], [], ""
    for _ in range(3):
        started = time.monotonic()
        status, page = request(fake_apiserver, f"{LEASES_PATH}?limit=1&continue={token}")
        durations.append(time.monotonic() - started)
        assert status == 200
        names += [item["metadata"]["name"] for item in page["items"]]
        token = page["metadata"].get("continue", "")
    started = time.monotonic()
    got = request(fake_apiserver, f"/apis/{GROUP}/v1/namespaces/default/leases/a")
    get_took = time.monotonic() - started
    fake_apiserver.slow_lists(None)
    started = time.monotonic()
    request(fake_apiserver, LEASES_PATH)
    fast_list_took = time.monotonic() - started

    assert names == ["a", "b", "c"] and not token
    assert all(0.4 <= duration < 1.5 for duration in durations), durations
    assert got[0] == 200 and get_took < 0.3
    assert fast_list_took < 0.3


# --- gone_storm ---------------------------------------------------------------------------


def test_gone_storm_answers_the_next_watches_from_a_version_with_410_in_the_stream(
    fake_apiserver: FakeApiServer,
) -> None:
    store = fake_apiserver.store
    store.apply_lease("default", "a", spec())
    current = store.resource_version

    fake_apiserver.gone_storm(2)
    from_now = RawClient(fake_apiserver, f"{LEASES_PATH}?watch=true")  # no version: not counted
    from_now.wait_until(lambda: bool(from_now.events))
    gone = [RawClient(fake_apiserver, watch_path(LEASES_PATH, current)) for _ in range(2)]
    for client in gone:
        client.wait_until(lambda client=client: client.ended_cleanly)
    after = RawClient(fake_apiserver, watch_path(LEASES_PATH, current))
    assert fake_apiserver.wait_for_watches(2)
    store.apply_lease("default", "a", spec("b"))
    after.wait_until(lambda: bool(after.events))

    assert [event["type"] for event in from_now.events] == ["ADDED"]
    (real,) = fixture("watch_410_expired.jsonl")
    for client in gone:
        assert client.status == 200
        (error,) = client.events
        assert shape(error) == shape(real)
        assert error["object"] == {
            **real["object"],
            "message": f"too old resource version: {current} ({current})",
        }
    assert [event["type"] for event in after.events] == ["MODIFIED"]
    for client in (from_now, *gone, after):
        client.close()


# --- cut_stream_mid_line ------------------------------------------------------------------


def test_cut_stream_mid_line_halves_the_next_line_of_every_open_stream(
    make_fake_apiserver: Callable[..., FakeApiServer],
) -> None:
    server = make_fake_apiserver()
    store = server.store
    since = store.resource_version
    leases = RawClient(server, watch_path(LEASES_PATH, since))
    nodes = RawClient(server, watch_path(NODES_PATH, since))
    assert server.wait_for_watches(2)

    assert server.cut_stream_mid_line() == 2
    later = RawClient(server, watch_path(LEASES_PATH, since))
    assert server.wait_for_watches(3)
    store.apply_lease("default", "first", spec())
    store.apply_lease("default", "second", spec())
    store.apply_node("worker-1")
    for client in (leases, nodes):
        client.receive(2.0)
    later.wait_until(lambda: len(later.events) == 2)

    full_line = orjson.dumps(later.events[0])  # the line the cut lease stream was to send
    for client in (leases, nodes):
        assert client.closed and not client.ended_cleanly
        assert client.events == []
        assert client.partial_line.startswith(b'{"type":"ADDED","object":{"kind":')
    assert full_line.startswith(leases.partial_line)
    assert len(leases.partial_line) == (len(full_line) + 1) // 2  # the newline counted
    assert [event["object"]["metadata"]["name"] for event in later.events] == ["first", "second"]
    for client in (leases, nodes, later):
        client.close()


# --- resourceVersions and bookmarks -------------------------------------------------------


def test_one_resource_version_counter_spans_every_kind_and_lists_report_the_current_one(
    fake_apiserver: FakeApiServer,
) -> None:
    store = fake_apiserver.store
    lease = store.apply_lease("default", "a", spec())
    node = store.apply_node("worker-1")
    candidate = store.apply_candidate(
        "kube-system",
        "c",
        {
            "leaseName": "kube-scheduler",
            "binaryVersion": "1.33.0",
            "emulationVersion": "1.33.0",
            "strategy": "OldestEmulationVersion",
            "renewTime": datetime.now(UTC),
        },
    )

    versions = [int(obj["metadata"]["resourceVersion"]) for obj in (lease, node, candidate)]
    assert versions == [versions[0], versions[0] + 1, versions[0] + 2]
    current = str(store.resource_version)
    assert current == str(versions[-1])
    # The last lease change is two revisions old: a list still answers the current one.
    for path in (f"{LEASES_PATH}?limit=1", f"{NODES_PATH}?limit=1", CANDIDATES_PATH):
        status, listed = request(fake_apiserver, path)
        assert (status, listed["metadata"]["resourceVersion"]) == (200, current), path


def test_a_watch_with_timeout_seconds_replays_every_change_after_its_version_then_ends(
    fake_apiserver: FakeApiServer,
) -> None:
    store = fake_apiserver.store
    store.apply_lease("default", "old", spec())
    since = store.resource_version
    store.apply_lease("default", "a", spec("1"))
    store.apply_node("worker-1")  # another kind: not in a lease watch
    store.apply_lease("default", "a", spec("2"))
    store.delete_lease("default", "old")

    started = time.monotonic()
    stream = RawClient(fake_apiserver, watch_path(LEASES_PATH, since, timeoutSeconds="1"))
    stream.wait_until(lambda: stream.ended_cleanly)
    took = time.monotonic() - started

    assert [(event["type"], event["object"]["metadata"]["name"]) for event in stream.events] == [
        ("ADDED", "a"),
        ("MODIFIED", "a"),
        ("DELETED", "old"),
    ]
    assert [int(e["object"]["metadata"]["resourceVersion"]) for e in stream.events] == [
        since + 1,
        since + 3,
        since + 4,
    ]
    assert 0.9 <= took < 2.5
    stream.close()


def test_bookmarks_carry_the_current_revision_also_when_another_kind_made_it(
    make_fake_apiserver: Callable[..., FakeApiServer],
) -> None:
    server = make_fake_apiserver(bookmark_interval=0.2)
    store = server.store
    store.apply_lease("default", "a", spec())
    stream = RawClient(
        server,
        watch_path(LEASES_PATH, store.resource_version, allowWatchBookmarks="true"),
    )
    assert server.wait_for_watches(1)
    node = store.apply_node("worker-1")
    revision = node["metadata"]["resourceVersion"]

    stream.wait_until(
        lambda: any(
            event["object"]["metadata"]["resourceVersion"] == revision
            for event in of_type(stream.events, "BOOKMARK")
        ),
        timeout=2.0,
    )
    stream.close()


def test_bookmarks_come_about_once_a_minute_by_default(
    make_fake_apiserver: Callable[..., FakeApiServer],
) -> None:
    default = inspect.signature(FakeApiServer).parameters["bookmark_interval"].default
    server = make_fake_apiserver(bookmark_interval=DEFAULT_BOOKMARK_INTERVAL)
    stream = RawClient(
        server, watch_path(LEASES_PATH, "", allowWatchBookmarks="true", timeoutSeconds="2")
    )
    stream.wait_until(lambda: stream.ended_cleanly)

    assert default == DEFAULT_BOOKMARK_INTERVAL == 60.0
    # Only the one sent just before the watch's timeout.
    assert [event["type"] for event in stream.events] == ["BOOKMARK"]
    stream.close()
