"""A fake kube-apiserver for Leases, LeaseCandidates and Nodes: the demo cluster behind
`make run`, and the server tests and benchmarks talk to over real HTTP.

Run it with `python manage.py fake_apiserver`, or in-process with `FakeApiServer(...).start()`.
"""

from fakes.kube.kubeconfig import kubeconfig_document
from fakes.kube.node_scenarios import add_node, remove_node
from fakes.kube.routes import RequestRecord
from fakes.kube.scenarios import (
    DemoScenario,
    DemoTimings,
    EmptyScenario,
    NodeFleetScenario,
    Scenario,
    ScenarioRunner,
    make_scenario,
)
from fakes.kube.server import FakeApiServer
from fakes.kube.store import ObjectStore

__all__ = [
    "DemoScenario",
    "DemoTimings",
    "EmptyScenario",
    "FakeApiServer",
    "NodeFleetScenario",
    "ObjectStore",
    "RequestRecord",
    "Scenario",
    "ScenarioRunner",
    "add_node",
    "kubeconfig_document",
    "make_scenario",
    "remove_node",
]
