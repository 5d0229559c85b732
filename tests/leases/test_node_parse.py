"""Node objects into NodeObservation: the stored fields, and hostile or broken input."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from fakes.kube import add_node
from fakes.kube.store import ObjectStore
from leases.models import ConditionStatus
from leases.node_parse import (
    MAX_LABELS,
    MAX_MESSAGE_LENGTH,
    MAX_TAINTS,
    node_identity,
    node_name_of,
    parse_node,
)

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def kubelet_node(name: str = "prod-default-worker-node-0", **options: Any) -> dict[str, Any]:
    """A Node as the fake kube-apiserver serves it (the shapes of a real 1.24 server)."""
    store = ObjectStore(clock=lambda: T0)
    return add_node(
        store,
        name,
        provider_id="openstack:///0b6c1f2e-9d47-4c38-8a1e-2f5d7c9e4b10",
        internal_ip="192.168.0.12",
        labels={
            "magnum.openstack.org/nodegroup": "default-worker",
            "magnum.openstack.org/role": "worker",
        },
        at=T0,
        created_at=T0 - 86_400,
        **options,
    )


def condition(kind: str, status: str, **fields: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "lastHeartbeatTime": "2027-01-15T08:05:00Z",
        "lastTransitionTime": "2027-01-15T08:01:00Z",
        **fields,
    }


def test_a_kubelet_node_is_read_into_the_stored_fields() -> None:
    node = kubelet_node()
    node["status"]["conditions"].append(condition("NetworkUnavailable", "False"))
    node["status"]["conditions"].append(condition("KernelDeadlock", "False"))  # an add-on's

    observation = parse_node(node)

    assert observation is not None
    assert observation.name == "prod-default-worker-node-0"
    assert observation.uid == node["metadata"]["uid"]
    assert observation.resource_version == node["metadata"]["resourceVersion"]
    assert observation.created_at == datetime(2027, 1, 14, 8, 0, tzinfo=UTC)
    assert observation.provider_id == "openstack:///0b6c1f2e-9d47-4c38-8a1e-2f5d7c9e4b10"
    assert observation.nodegroup_label == "default-worker"
    assert observation.labels["kubernetes.io/hostname"] == "prod-default-worker-node-0"
    assert observation.unschedulable is False
    assert observation.taints == []
    assert set(observation.conditions) == {
        "Ready",
        "MemoryPressure",
        "DiskPressure",
        "PIDPressure",
        "NetworkUnavailable",
    }
    assert observation.conditions["Ready"] == {
        "status": "True",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
        "last_transition_time": "2027-01-15T08:00:00+00:00",
    }
    assert observation.ready.status is ConditionStatus.TRUE
    assert observation.ready.last_transition_time == datetime(2027, 1, 15, 8, 0, tzinfo=UTC)
    assert observation.kubelet_version == "v1.24.17"
    assert observation.internal_address == "192.168.0.12"
    assert (observation.cleaned, observation.cut) == (False, 0)


def test_cordon_and_taints_are_read() -> None:
    node = kubelet_node()
    node["spec"]["unschedulable"] = True
    node["spec"]["taints"] = [
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": "x"},
        {"key": "dedicated", "value": "gpu", "effect": "NoExecute"},
    ]

    observation = parse_node(node)

    assert observation is not None
    assert observation.unschedulable is True
    assert observation.taints == [
        {"key": "node.kubernetes.io/unschedulable", "value": "", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "gpu", "effect": "NoExecute"},
    ]


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ("True", ConditionStatus.TRUE),
        ("False", ConditionStatus.FALSE),
        ("Unknown", ConditionStatus.UNKNOWN),
        ("maybe", ConditionStatus.UNKNOWN),  # reported, but not in words Kubernetes uses
        ("", ConditionStatus.MISSING),
        (None, ConditionStatus.MISSING),
        (1, ConditionStatus.MISSING),
    ],
)
def test_ready_status_is_one_of_the_stored_choices(
    status: object, expected: ConditionStatus
) -> None:
    node = kubelet_node()
    node["status"]["conditions"] = [condition("Ready", status)]  # type: ignore[arg-type]

    observation = parse_node(node)

    assert observation is not None
    assert observation.ready.status is expected
    assert observation.conditions["Ready"]["status"] == expected.value


def test_a_node_without_a_ready_condition_reports_none() -> None:
    node = kubelet_node()
    node["status"] = {"conditions": [condition("MemoryPressure", "False")]}

    observation = parse_node(node)

    assert observation is not None
    assert observation.ready.status is ConditionStatus.MISSING
    assert observation.ready.last_transition_time is None
    assert observation.kubelet_version == ""


def test_the_first_of_two_ready_conditions_counts_as_kubernetes_reads_it() -> None:
    node = kubelet_node()
    node["status"]["conditions"] = [condition("Ready", "False"), condition("Ready", "True")]

    observation = parse_node(node)

    assert observation is not None
    assert observation.ready.status is ConditionStatus.FALSE
    assert observation.conditions["Ready"]["status"] == "False"


@pytest.mark.parametrize(
    "obj",
    [
        None,
        [],
        "node",
        {},
        {"metadata": None},
        {"metadata": {"name": ""}},
        {"metadata": {"name": 7}},
        {"metadata": {"name": "\x00"}},
    ],
)
def test_something_without_a_name_is_refused(obj: object) -> None:
    assert parse_node(obj) is None
    assert node_identity(obj) is None
    assert node_name_of(obj) is None


def test_fields_of_the_wrong_type_read_as_empty() -> None:
    observation = parse_node(
        {
            "metadata": {"name": "n", "labels": ["a"], "creationTimestamp": 12, "uid": {}},
            "spec": {"providerID": 5, "unschedulable": "true", "taints": {"key": "x"}},
            "status": {
                "conditions": "Ready",
                "addresses": [None, {"type": "InternalIP", "address": ["10.0.0.1"]}],
                "nodeInfo": "v1.24",
            },
        }
    )

    assert observation is not None
    assert (observation.uid, observation.labels, observation.created_at) == ("", {}, None)
    assert (observation.provider_id, observation.unschedulable) == ("", False)
    assert (observation.taints, observation.conditions) == ([], {})
    assert (observation.internal_address, observation.kubelet_version) == ("", "")
    assert observation.ready.status is ConditionStatus.MISSING


def test_garbage_times_read_as_none() -> None:
    node = kubelet_node()
    node["status"]["conditions"] = [
        condition("Ready", "True", lastTransitionTime="yesterday"),
        condition("DiskPressure", "False", lastTransitionTime="9" * 100),
    ]

    observation = parse_node(node)

    assert observation is not None
    assert observation.ready.last_transition_time is None
    assert observation.conditions["DiskPressure"]["last_transition_time"] is None


def test_nul_characters_are_removed_everywhere_and_counted() -> None:
    node = kubelet_node()
    node["metadata"]["name"] = "node\x00-0"
    node["metadata"]["labels"]["evil\x00key"] = "evil\x00value"
    node["status"]["conditions"][-1]["message"] = "broken\x00 kubelet"
    node["spec"]["providerID"] = "openstack:///\x00abc"

    observation = parse_node(node)
    identity = node_identity(node)

    assert observation is not None and identity is not None
    assert observation.cleaned is True
    assert observation.name == identity.name == node_name_of(node) == "node-0"
    assert observation.labels["evilkey"] == "evilvalue"
    assert observation.conditions["Ready"]["message"] == "broken kubelet"
    assert identity.ready.message == "broken kubelet"
    assert observation.provider_id == "openstack:///abc"


def test_huge_labels_are_cut_and_capped_with_a_count() -> None:
    node = kubelet_node()
    labels = node["metadata"]["labels"]
    labels["long-value"] = "v" * 5000
    labels["k" * 5000] = "long-key"
    for index in range(MAX_LABELS + 100):
        labels[f"filler-{index:04d}"] = "x"
    count = len(labels)

    observation = parse_node(node)

    assert observation is not None
    assert len(observation.labels) == MAX_LABELS
    assert observation.labels["long-value"] == "v" * 63
    assert "k" * 317 in observation.labels
    assert observation.cut == 2 + (count - MAX_LABELS)
    # Magnum's labels come first on a real node, so they survive the cap.
    assert observation.nodegroup_label == "default-worker"


def test_long_messages_many_taints_and_huge_condition_lists_are_bounded() -> None:
    node = kubelet_node()
    node["status"]["conditions"][-1]["message"] = "m" * 100_000
    node["status"]["conditions"][-1]["reason"] = "r" * 500
    node["spec"]["taints"] = [
        {"key": f"taint-{index}", "effect": "NoSchedule"} for index in range(MAX_TAINTS + 36)
    ]
    node["status"]["conditions"] += [condition(f"Noise{index}", "True") for index in range(500)]

    observation = parse_node(node)

    assert observation is not None
    assert len(observation.conditions["Ready"]["message"] or "") == MAX_MESSAGE_LENGTH
    assert len(observation.ready.message) == MAX_MESSAGE_LENGTH
    assert len(observation.ready.reason) == 128
    assert len(observation.taints) == MAX_TAINTS
    # Message, reason, 36 taints, and the conditions beyond the first 256 read.
    assert observation.cut == 2 + 36 + (4 + 500 - 256)


def test_node_identity_reads_the_same_ready_as_the_full_parse() -> None:
    node = kubelet_node()
    node["status"]["conditions"][-1].update(status="False", reason="KubeletNotReady")

    identity = node_identity(node)
    observation = parse_node(node)

    assert identity is not None and observation is not None
    assert identity.name == observation.name
    assert identity.ready == observation.ready
