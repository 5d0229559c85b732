"""spec.providerID into the instance UUID that nodes_to_remove takes, or a refusal that says why."""

from __future__ import annotations

import pytest

from leases.provider_id import instance_uuid

UUID = "3f1c2b7e-9a4d-4e8b-8f00-0123456789ab"


@pytest.mark.parametrize(
    "provider_id",
    [f"openstack:///{UUID}", f"openstack://kr1/{UUID}", f"openstack://RegionOne/{UUID.upper()}"],
)
def test_openstack_provider_ids_give_the_instance_uuid(provider_id: str) -> None:
    parsed = instance_uuid(provider_id)
    assert parsed.ok and parsed.uuid == UUID and parsed.problem == ""


@pytest.mark.parametrize(
    ("provider_id", "why"),
    [
        ("", "the node has no providerID"),
        (f"aws:///{UUID}", "is not an openstack:// ID"),
        ("openstack:///not-a-uuid", "does not end in a UUID"),
        (f"openstack:///{UUID}/extra", "does not end in a UUID"),
        (f"openstack:///{{{UUID}}}", "does not end in a UUID"),
        (f"openstack:///{UUID.replace('-', '')}", "does not end in a UUID"),
        (f"openstack://../{UUID}", "is not openstack://[region]/<uuid>"),
        (f"openstack://{UUID}", "is not openstack://[region]/<uuid>"),
        ("openstack:///" + "x" * 500, "…"),
    ],
)
def test_anything_else_is_refused_with_the_reason(provider_id: str, why: str) -> None:
    parsed = instance_uuid(provider_id)
    assert parsed.uuid is None and not parsed.ok
    assert why in parsed.problem
    assert len(parsed.problem) < 200, "a hostile providerID is quoted short"
