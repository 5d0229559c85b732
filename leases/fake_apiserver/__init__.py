"""A fake kube-apiserver for Leases and LeaseCandidates: the demo cluster behind `make run`,
and the server tests and benchmarks talk to over real HTTP.

Run it with `python manage.py fake_apiserver` (or `python -m leases.fake_apiserver`), or
in-process with `FakeApiServer(...).start()`.
"""

from leases.fake_apiserver.scenarios import (
    DemoScenario,
    DemoTimings,
    EmptyScenario,
    NodeFleetScenario,
    Scenario,
    ScenarioRunner,
    make_scenario,
)
from leases.fake_apiserver.server import FakeApiServer, RequestRecord, kubeconfig_document
from leases.fake_apiserver.store import ObjectStore

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
    "kubeconfig_document",
    "make_scenario",
]
