"""The demo cluster's cloud-controller-manager: its Nodes follow the fake NKS's resizes.

On NHN Cloud, the OpenStack cloud-controller-manager deletes a Node whose instance is gone,
and a new instance's kubelet registers its Node. The fake NKS runs in another process, so this
asks it over HTTP, through answers the NKS API guide documents only, which instances each
worker nodegroup of staging-web has: a thread reads the nodegroup list and each worker
nodegroup's detail (`node_addresses`, `node_count`) every `period` wall seconds, with a
Keystone v2 token. A failure (NKS down, an error answer, addresses that do not add up to the
count) is no answer, and no answer changes nothing: a controller that cannot ask the cloud
must never conclude that instances are gone. Each answer is acted on once, in the scenario's
thread beside the kubelets, so a kubelet never posts to a Node being deleted:
- A Magnum-labelled Node whose InternalIP no nodegroup lists has lost its instance, and its
  kubelet dies with the machine. As the real controller asks the cloud only about nodes that
  are not Ready, the Node is deleted once it is not: on the next answer for a NotReady node,
  about 40 s later for a Ready one (when the node lifecycle controller marks it Unknown). Its
  heartbeat Lease goes too, as the garbage collector follows the owner reference.
- A listed address that no Node has is a new instance: `register_after` scenario seconds later
  its kubelet registers the Node NotReady (no CNI yet), renews its Lease every 10 s, and posts
  Ready `ready_after` seconds after registering.

NKS lists addresses, never node names or instance uuids. A new Node takes the name and uuid
the fake NKS gives the nodegroup's next node, from a copy of its demo state (as `demo_nodes`
derives the first Nodes), one per new address in allocation order. So a fake NKS resized
before this server started is followed right only if none of the nodes it added were removed.
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlsplit

from fakes.kube.demo import DemoScenario
from fakes.kube.demo_nodes import (
    DEMO_NKS_CLUSTER,
    LEASE_RENEW_INTERVAL,
    NODEGROUP_LABEL,
    STATUS_REPORT_INTERVAL,
    DemoNode,
    Kubelet,
    demo_nks_state,
    register_node,
)
from fakes.kube.node_scenarios import remove_node
from fakes.kube.timeline import ScenarioRunner
from fakes.nks.model import FakeCluster
from fakes.nks.routes import IDENTITY_PREFIX
from fakes.nks.scenarios import DEFAULT_PASSWORD, DEFAULT_TENANT_ID, DEFAULT_USERNAME

logger = logging.getLogger(__name__)

WORKER_FLAVOR = "m2.c4m8"  # what demo_nodes gives the first workers


@dataclass(frozen=True, slots=True)
class NksAccount:
    api_url: str
    identity_url: str
    tenant_id: str
    username: str
    password: str = field(repr=False)

    @classmethod
    def demo(cls, api_url: str) -> NksAccount:
        """The fake NKS demo's published account, the one `setup_demo` registers."""
        base = api_url.rstrip("/")
        return cls(
            base, f"{base}{IDENTITY_PREFIX}", DEFAULT_TENANT_ID, DEFAULT_USERNAME, DEFAULT_PASSWORD
        )


@dataclass(frozen=True, slots=True)
class NodegroupInstances:
    """One worker nodegroup as its detail answer shows it."""

    name: str
    addresses: tuple[str, ...]
    zone: str
    kube_tag: str


class NksUnavailable(Exception):
    """NKS gave no answer this controller can act on."""


class NksReader:
    """The worker instances NKS lists for one cluster, read over its documented API."""

    def __init__(self, account: NksAccount, cluster: str, *, timeout: float = 5.0) -> None:
        for url in (account.api_url, account.identity_url):
            if urlsplit(url).scheme not in ("http", "https"):
                raise ValueError(f"not an http(s) URL: {url!r}")
        self.account = account
        self.cluster = cluster
        self.timeout = timeout
        # No proxy from the environment: the demo's NKS is on this machine.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._token: str | None = None
        self._renew_at = 0.0

    def worker_nodegroups(self) -> list[NodegroupInstances]:
        cluster = quote(self.cluster, safe="")
        groups = []
        for item in _items(self._get(f"/v1/clusters/{cluster}/nodegroups"), "nodegroups"):
            # NKS runs the control plane itself: its masters are no Nodes of the cluster.
            if item.get("role") != "worker":
                continue
            ref = quote(str(item.get("uuid") or item.get("name")), safe="")
            detail = self._get(f"/v1/clusters/{cluster}/nodegroups/{ref}")
            name = detail.get("name")
            addresses = detail.get("node_addresses")
            if (
                not isinstance(name, str)
                or not isinstance(addresses, list)
                or not all(isinstance(address, str) for address in addresses)
                or _count(detail.get("node_count")) != len(addresses)
            ):
                raise NksUnavailable(f"nodegroup {name!r}: node_addresses do not match node_count")
            labels = detail.get("labels") if isinstance(detail.get("labels"), dict) else {}
            groups.append(
                NodegroupInstances(
                    name,
                    tuple(addresses),
                    str(labels.get("availability_zone") or "kr1-pub-a"),
                    str(labels.get("kube_tag") or "v1.29.3"),
                )
            )
        return groups

    def _get(self, path: str) -> dict[str, Any]:
        url = f"{self.account.api_url}{path}"
        status, body = self._call("GET", url, token=self._current_token())
        if status == 401:
            # The guide's rule: on a 401, renew the token once and retry once.
            self._token = None
            status, body = self._call("GET", url, token=self._current_token())
        if status != 200 or not isinstance(body, dict):
            raise NksUnavailable(f"GET {path}: HTTP {status}")
        return body

    def _current_token(self) -> str:
        if self._token is not None and time.time() < self._renew_at:
            return self._token
        request = {
            "auth": {
                "tenantId": self.account.tenant_id,
                "passwordCredentials": {
                    "username": self.account.username,
                    "password": self.account.password,
                },
            }
        }
        status, body = self._call("POST", f"{self.account.identity_url}/v2.0/tokens", body=request)
        token = _dig(body, "access", "token")
        if status != 200 or not isinstance(token, dict) or not isinstance(token.get("id"), str):
            raise NksUnavailable(f"identity service: HTTP {status}")
        self._token = token["id"]
        # Renewed a little before it expires; an unreadable expiry means asking every time.
        self._renew_at = time.time()
        with contextlib.suppress(TypeError, ValueError):
            self._renew_at = datetime.fromisoformat(token["expires"]).timestamp() - 10
        return self._token

    def _call(
        self, method: str, url: str, *, token: str | None = None, body: Any = None
    ) -> tuple[int, Any]:
        headers = {
            "Accept": "application/json",
            "Content-Type": "application/json",
            "OpenStack-API-Version": "container-infra latest",
        }
        if token is not None:
            headers["X-Auth-Token"] = token
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, headers=headers, method=method)  # noqa: S310 - http(s), checked above
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        except (OSError, http.client.HTTPException) as error:
            raise NksUnavailable(f"{method} {url}: {error}") from None
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, None


@dataclass(frozen=True, slots=True)
class CloudTimings:
    period: float = 5.0  # wall seconds between looks at NKS (the CCM's node monitor period)
    register_after: float = 20.0  # scenario seconds from a new instance to its Node
    ready_after: float = 30.0  # scenario seconds from registering to Ready (CNI up)
    tick: float = 0.5  # scenario seconds between checks for a fresh answer


class CloudController:
    """Follows NKS for the demo scenario run by `runner`; build it before the runner starts,
    since the scenario's agenda is only safe to add to from its own thread once running."""

    def __init__(
        self,
        runner: ScenarioRunner,
        reader: NksReader,
        *,
        timings: CloudTimings | None = None,
    ) -> None:
        scenario = runner.scenario
        if not isinstance(scenario, DemoScenario) or scenario.fleet is None:
            raise ValueError("the cloud controller follows the demo scenario's NKS cluster only")
        self.scenario = scenario
        self.reader = reader
        self.timings = timings or CloudTimings()
        self._answer: list[NodegroupInstances] | None = None
        self._answer_lock = threading.Lock()
        # Scenario thread only: the addresses of the last answer, and instances still booting.
        self._listed: set[str] = set()
        self._booting: dict[str, str] = {}
        # start_time is fixed on first use, so this also fixes when the scenario begins.
        start = runner.start_time
        self._names = demo_nks_state(start)
        self._named_cluster: FakeCluster = next(
            c for c in self._names.clusters.values() if c.name == DEMO_NKS_CLUSTER
        )
        scenario.every(start + self.timings.tick, self.timings.tick, self._act)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> CloudController:
        if self._thread is None:
            self._stopping.clear()
            self._thread = threading.Thread(target=self._poll, name="cloud-controller", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=2 * self.reader.timeout + 1)

    def _poll(self) -> None:
        # `make run` starts both fakes at once: a first miss is NKS still starting, no trouble.
        answered = failing = False
        while not self._stopping.is_set():
            try:
                answer = self.reader.worker_nodegroups()
            except NksUnavailable as error:
                if not failing:
                    logger.log(
                        logging.WARNING if answered else logging.INFO,
                        "NKS gives no answer, so no Node is deleted or added: %s",
                        error,
                    )
                failing = True
            else:
                if failing:
                    logger.info("NKS answers")
                answered, failing = True, False
                with self._answer_lock:
                    self._answer = answer
            self._stopping.wait(self.timings.period)

    # --- in the scenario's thread ------------------------------------------------------

    def _act(self, when: float) -> None:
        with self._answer_lock:
            answer, self._answer = self._answer, None
        fleet = self.scenario.node_fleet
        if answer is None or fleet is None:
            return
        self._listed = {address for group in answer for address in group.addresses}
        store = self.scenario.store
        registered: set[str] = set()
        for node in store.list_nodes():
            name = node["metadata"]["name"]
            address = _internal_ip(node)
            if address:
                registered.add(address)
            labels = node["metadata"].get("labels") or {}
            if not address or NODEGROUP_LABEL not in labels or address in self._listed:
                continue  # its instance is there, or it is no Magnum node to match to one
            fleet.power_off(name)
            if _ready(node) == "True":
                continue  # the controller asks the cloud about not-Ready nodes only
            logger.info("deleting node since it is no longer present in cloud provider: %s", name)
            remove_node(store, name)
            fleet.forget(name)
        for group in answer:
            new = [a for a in group.addresses if a not in registered and a not in self._booting]
            for address in sorted(new, key=_allocation_order):
                self._boot(group, address, when)

    def _boot(self, group: NodegroupInstances, address: str, when: float) -> None:
        named_group = next(
            (g for g in self._named_cluster.nodegroups if g.name == group.name), None
        )
        if named_group is None:
            logger.warning("no Node name for new instance %s of nodegroup %s", address, group.name)
            return
        (instance,) = self._names.add_nodes(self._named_cluster, named_group, 1)
        node = DemoNode(
            name=instance.name,
            instance_uuid=instance.uuid,
            internal_ip=address,
            nodegroup=group.name,
            role="worker",
            ready=False,
            zone=group.zone,
            flavor=WORKER_FLAVOR,
            kubelet_version=group.kube_tag,
            age_seconds=0.0,
        )
        self._booting[address] = node.name
        self.scenario.at(when + self.timings.register_after, lambda at: self._register(node, at))

    def _register(self, node: DemoNode, at: float) -> None:
        self._booting.pop(node.internal_ip, None)
        fleet = self.scenario.node_fleet
        if fleet is None or node.internal_ip not in self._listed:
            return  # the instance went away before its kubelet started
        store = self.scenario.store
        register_node(store, node, at, ready=False)
        # The node lifecycle controller taints a NotReady node at once.
        store.set_node_ready(node.name, False, at=at)
        kubelet = Kubelet(store, node, lambda when: True, at)
        fleet.start(
            self.scenario,
            kubelet,
            first_renewal=at + LEASE_RENEW_INTERVAL,
            first_status=at + STATUS_REPORT_INTERVAL,
        )
        self.scenario.at(
            at + self.timings.ready_after, lambda when: self._network_up(kubelet, when)
        )
        logger.info(
            "node %s registered (instance %s, %s)", node.name, node.instance_uuid, node.internal_ip
        )

    def _network_up(self, kubelet: Kubelet, when: float) -> None:
        if kubelet.running and not kubelet.unknown:
            self.scenario.store.set_node_ready(kubelet.name, True, at=when)


def _items(body: dict[str, Any], key: str) -> list[dict[str, Any]]:
    items = body.get(key)
    if not isinstance(items, list):
        raise NksUnavailable(f"no {key} list in the answer")
    return [item for item in items if isinstance(item, dict)]


def _dig(value: Any, *keys: str) -> Any:
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _count(value: Any) -> int | None:
    # The guide writes counts as integers or as strings.
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _internal_ip(node: dict[str, Any]) -> str:
    for address in node.get("status", {}).get("addresses", []):
        if address.get("type") == "InternalIP":
            return str(address.get("address", ""))
    return ""


def _ready(node: dict[str, Any]) -> str:
    for condition in node.get("status", {}).get("conditions", []):
        if condition.get("type") == "Ready":
            return str(condition.get("status", "Unknown"))
    return "Unknown"


def _allocation_order(address: str) -> tuple[int, int, str]:
    # NKS hands out addresses in rising order; unparsable ones (data, not ours) go last.
    try:
        return 0, int(ipaddress.ip_address(address)), address
    except ValueError:
        return 1, 0, address
