"""The watch stream reader (leases.kube.watch) over real HTTP: whole lines in order, in
batches per read; blank lines left out; a connection cut inside a line is a KubeError of
kind "connection" and the cut line is never handed over."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest
from kubernetes import client as k8s

from fakes.kube import FakeApiServer
from leases import kube


def test_lines_arrive_whole_and_in_order_across_reads(
    fake_apiserver: FakeApiServer, make_api_client: Callable[[FakeApiServer], k8s.ApiClient]
) -> None:
    fake_apiserver.store.seed_node_leases(50)
    api = make_api_client(fake_apiserver)
    start = str(fake_apiserver.store.resource_version)
    stream = kube.open_lease_watch(api, start, timeout_seconds=5)
    try:
        fake_apiserver.inject_watch_line(b"   ")  # blank: not an event
        fake_apiserver.store.emit_renewals(300)
        versions: list[int] = []
        for batch in stream.batches():
            assert all(line.strip() for line in batch)
            for line in batch:
                event = orjson.loads(line)
                if event["type"] == "MODIFIED":
                    versions.append(int(event["object"]["metadata"]["resourceVersion"]))
            if len(versions) == 300:
                break
    finally:
        stream.close()
    assert versions == sorted(versions) and len(set(versions)) == 300


def test_a_connection_cut_inside_a_line_is_a_connection_error(
    fake_apiserver: FakeApiServer, make_api_client: Callable[[FakeApiServer], k8s.ApiClient]
) -> None:
    fake_apiserver.store.seed_node_leases(5)
    api = make_api_client(fake_apiserver)
    start = str(fake_apiserver.store.resource_version)
    fake_apiserver.drop_next_watches(after_events=3)
    stream = kube.open_lease_watch(api, start, timeout_seconds=5)
    lines: list[bytes] = []
    try:
        fake_apiserver.store.emit_renewals(5)
        with pytest.raises(kube.KubeError) as caught:
            for line in stream.lines():
                lines.append(line)
    finally:
        stream.close()
    assert caught.value.kind == "connection"
    assert len(lines) == 3
    assert all(orjson.loads(line)["type"] == "MODIFIED" for line in lines)
