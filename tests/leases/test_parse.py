from __future__ import annotations

from datetime import UTC, datetime

import pytest

from leases.models import LeaseClass
from leases.parse import parse_candidate, parse_lease, parse_time


def lease_object(**spec: object) -> dict[str, object]:
    return {
        "metadata": {
            "namespace": "kube-system",
            "name": "kube-scheduler",
            "uid": "8d1a",
            "resourceVersion": "812",
            "managedFields": [{"manager": "kube-scheduler"}],
        },
        "spec": spec,
    }


def test_parses_a_complete_lease() -> None:
    observation = parse_lease(
        lease_object(
            holderIdentity="master-0_6f1c",
            leaseDurationSeconds=15,
            acquireTime="2026-11-29T07:00:00.123456Z",
            renewTime="2026-11-29T07:10:00.500000Z",
            leaseTransitions=4,
        )
    )
    assert observation is not None
    assert observation.lease_class == LeaseClass.CONTROL_PLANE
    assert observation.holder == "master-0_6f1c"
    assert observation.renew_time == datetime(2026, 11, 29, 7, 10, 0, 500000, tzinfo=UTC)
    assert observation.expires_at == datetime(2026, 11, 29, 7, 10, 15, 500000, tzinfo=UTC)
    assert observation.lease_transitions == 4
    assert not hasattr(observation, "raw")  # the object itself is never stored


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "yesterday",
        "2026-13-45T99:00:00Z",
        1732863600,
        ["2026-11-29T07:00:00Z"],
        "9" * 500,
    ],
)
def test_null_and_garbage_times_become_none(value: object) -> None:
    assert parse_time(value) is None


def test_offset_times_are_converted_to_utc() -> None:
    assert parse_time("2026-11-29T16:00:00+09:00") == datetime(2026, 11, 29, 7, 0, tzinfo=UTC)


def test_lease_without_spec_is_released_with_no_times() -> None:
    obj = lease_object()
    del obj["spec"]
    observation = parse_lease(obj)
    assert observation is not None
    assert observation.holder == ""
    assert observation.renew_time is None and observation.expires_at is None


@pytest.mark.parametrize(
    "spec",
    [
        {"holderIdentity": 42, "leaseDurationSeconds": "15", "leaseTransitions": -1},
        {"holderIdentity": None, "leaseDurationSeconds": True, "renewTime": {"nested": 1}},
        {"leaseDurationSeconds": 10**12},
    ],
)
def test_wrong_types_are_ignored_not_fatal(spec: dict[str, object]) -> None:
    observation = parse_lease(lease_object(**spec))
    assert observation is not None
    assert observation.holder == ""
    assert observation.lease_duration_seconds is None
    assert observation.lease_transitions is None


@pytest.mark.parametrize(
    "obj",
    [None, "lease", [], {"metadata": {"name": "x"}}, {"metadata": "x"}, {"spec": {}}],
)
def test_objects_without_namespace_and_name_are_skipped(obj: object) -> None:
    assert parse_lease(obj) is None


def test_a_huge_holder_is_capped() -> None:
    observation = parse_lease(lease_object(holderIdentity="h" * 100_000))
    assert observation is not None
    assert len(observation.holder) == 16_384


@pytest.mark.parametrize(
    ("namespace", "name", "labels", "expected"),
    [
        ("kube-node-lease", "worker-1", {}, LeaseClass.NODE_HEARTBEAT),
        ("kube-system", "kube-controller-manager", {}, LeaseClass.CONTROL_PLANE),
        (
            "kube-system",
            "apiserver-abc",
            {"apiserver.kubernetes.io/identity": "kube-apiserver"},
            LeaseClass.APISERVER_IDENTITY,
        ),
        ("cert-manager", "cert-manager-controller", {}, LeaseClass.LEADER_ELECTION),
    ],
)
def test_leases_are_classified(
    namespace: str, name: str, labels: dict[str, str], expected: LeaseClass
) -> None:
    obj = {"metadata": {"namespace": namespace, "name": name, "labels": labels}, "spec": {}}
    observation = parse_lease(obj)
    assert observation is not None
    assert observation.lease_class == expected


def test_parses_a_lease_candidate() -> None:
    candidate = parse_candidate(
        {
            "metadata": {"namespace": "kube-system", "name": "kcm-master-1"},
            "spec": {
                "leaseName": "kube-controller-manager",
                "binaryVersion": "1.33.0",
                "emulationVersion": "1.32.0",
                "strategy": "OldestEmulationVersion",
                "pingTime": None,
                "renewTime": "2026-11-29T07:00:00.000000Z",
            },
        }
    )
    assert candidate is not None
    assert candidate.lease_name == "kube-controller-manager"
    assert candidate.ping_time is None
    assert candidate.renew_time == datetime(2026, 11, 29, 7, 0, tzinfo=UTC)
