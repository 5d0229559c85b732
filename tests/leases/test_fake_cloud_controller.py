"""The demo's cloud controller, with both fakes over real HTTP: Nodes follow NKS resizes.

The scenario runs 20 times faster than the wall clock, so the node lifecycle controller's
40 s grace, a new kubelet's 20 s to register and its 30 s to Ready pass in a second or two.
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Callable, Iterator
from io import StringIO
from typing import Any

import orjson
import pytest
from django.core.management import CommandError, call_command

from fakes.kube import FakeApiServer
from fakes.kube.cloud_controller import CloudController, CloudTimings, NksAccount, NksReader
from fakes.kube.demo_nodes import DEMO_NKS_CLUSTER, NODEGROUP_LABEL
from fakes.nks import FakeNks
from nks import client as nks

SPEED = 20.0
GROUP = "default-worker"
LEASES_PATH = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


class Demo:
    """Both fakes as `make run` starts them, the controller polling NKS every 0.1 s."""

    def __init__(self) -> None:
        self.nks = FakeNks(resize_delay=0.1).start()
        self.kube = FakeApiServer(scenario="demo", scenario_speed=SPEED)
        assert self.kube.scenario_runner is not None
        reader = NksReader(NksAccount.demo(self.nks.url), DEMO_NKS_CLUSTER, timeout=1.0)
        self.controller = CloudController(
            self.kube.scenario_runner, reader, timings=CloudTimings(period=0.1)
        )
        self.kube.start()
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()
        self.kube.stop()
        self.nks.stop()

    def get(self, path: str) -> dict[str, Any]:
        connection = http.client.HTTPConnection("127.0.0.1", self.kube.port, timeout=5)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            assert response.status == 200
            answer: dict[str, Any] = orjson.loads(response.read())
            return answer
        finally:
            connection.close()

    def nodes(self) -> dict[str, dict[str, Any]]:
        return {node["metadata"]["name"]: node for node in self.get("/api/v1/nodes")["items"]}

    def lease_names(self) -> set[str]:
        return {lease["metadata"]["name"] for lease in self.get(LEASES_PATH)["items"]}

    def resize(self, node_count: int, nodes_to_remove: list[str] | None = None) -> None:
        with nks.NksClient(self.nks.url, **self.nks.credentials()) as api:
            api.resize(DEMO_NKS_CLUSTER, GROUP, node_count, nodes_to_remove)


@pytest.fixture
def demo() -> Iterator[Demo]:
    running = Demo()
    yield running
    running.stop()


def wait_for(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def instance_uuid(node: dict[str, Any]) -> str:
    return str(node["spec"]["providerID"]).removeprefix("openstack:///")


def ready(node: dict[str, Any]) -> str:
    return next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready")


def internal_ip(node: dict[str, Any]) -> str:
    return next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")


def group_nodes(demo: Demo) -> dict[str, dict[str, Any]]:
    return {
        name: node
        for name, node in demo.nodes().items()
        if node["metadata"]["labels"][NODEGROUP_LABEL] == GROUP
    }


def test_a_scale_in_with_nodes_to_remove_deletes_exactly_those_nodes_and_leases(
    demo: Demo,
) -> None:
    before = demo.nodes()
    workers = group_nodes(demo)
    # What the resize form picks: the NotReady node, plus a Ready one to show the grace.
    not_ready = next(name for name, node in workers.items() if ready(node) != "True")
    ready_one = next(name for name, node in workers.items() if ready(node) == "True")
    removed = {not_ready, ready_one}
    assert removed <= demo.lease_names()

    demo.resize(1, [instance_uuid(workers[name]) for name in sorted(removed)])

    wait_for(lambda: not removed & set(demo.nodes()))
    wait_for(lambda: not removed & demo.lease_names())
    time.sleep(0.5)  # a few more looks at NKS change nothing else
    assert set(demo.nodes()) == set(before) - removed
    assert demo.lease_names() == set(before) - removed


def test_a_scale_out_registers_new_nodes_not_ready_then_ready_and_heartbeating(
    demo: Demo,
) -> None:
    before = set(demo.nodes())

    demo.resize(5)

    wait_for(lambda: len(set(demo.nodes()) - before) == 2)
    new = {name: demo.nodes()[name] for name in set(demo.nodes()) - before}
    assert {ready(node) for node in new.values()} == {"False"}
    with demo.nks.state.lock:
        cluster = demo.nks.state.find_cluster(DEMO_NKS_CLUSTER)
        instances = {n.name: n for n in demo.nks.state.find_nodegroup(cluster, GROUP).nodes}
    for name, node in new.items():
        # Name, instance uuid and address are those NKS gave the instance.
        assert instance_uuid(node) == instances[name].uuid
        assert internal_ip(node) == instances[name].address
        assert node["metadata"]["labels"][NODEGROUP_LABEL] == GROUP
        assert node["metadata"]["labels"]["magnum.openstack.org/role"] == "worker"

    wait_for(lambda: {ready(demo.nodes()[name]) for name in new} == {"True"})
    leases = {
        lease["metadata"]["name"]: lease["spec"]["renewTime"]
        for lease in demo.get(LEASES_PATH)["items"]
    }
    wait_for(
        lambda: all(
            lease["spec"]["renewTime"] > leases[lease["metadata"]["name"]]
            for lease in demo.get(LEASES_PATH)["items"]
            if lease["metadata"]["name"] in new
        )
    )


def test_an_nks_outage_deletes_nothing(demo: Demo) -> None:
    wait_for(lambda: demo.nks.requests_seen("/v1/clusters/staging-web/nodegroups/.+"))
    before = set(demo.nodes())
    demo.nks.stop()
    with demo.nks.state.lock:
        # What NKS would answer now, had the controller been able to ask.
        demo.nks.state.find_cluster(DEMO_NKS_CLUSTER).nodegroups.clear()

    time.sleep(3.5)  # 70 scenario seconds: every silent node is long Unknown

    assert set(demo.nodes()) == before
    assert demo.lease_names() >= before
    demo.nks.start()  # the same port: the next answer is acted on
    wait_for(lambda: not demo.nodes())


def test_nks_url_goes_with_the_demo_scenario() -> None:
    with pytest.raises(CommandError, match="--scenario demo"):
        call_command(
            "fake_apiserver",
            "--port=0",
            "--scenario=empty",
            "--nks-url=http://127.0.0.1:1",
            stdout=StringIO(),
        )
