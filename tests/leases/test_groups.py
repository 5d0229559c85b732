"""leader-k8s slot groups as the groups page and the group page show them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import time_machine
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from leases.groups import GroupStatus, SlotState, leader_group, leader_groups
from leases.models import LeaderGroup
from leases.presenters.groups import group_detail, group_url, groups_page, slot_ranges
from tests.leases.factories import NOW, make_cluster
from tests.leases.group_factories import make_leader_k8s_lease, make_slot, token

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


def page(client: Client, url: str, **headers: str) -> str:
    response = client.get(url, **headers)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def test_group_url_is_the_routes_url() -> None:
    assert group_url("prod", "apps", "orders") == reverse(
        "leases:group", args=["prod", "apps", "orders"]
    )


def test_a_lock_containing_slot_is_parsed_from_the_right() -> None:
    cluster = make_cluster()
    make_slot(cluster, "jobs-slot-1", 0)
    make_slot(cluster, "jobs-slot-1", 2)
    [group] = leader_groups(NOW)
    assert (group.name, [slot.index for slot in group.seen]) == ("jobs-slot-1", [0, 2])
    assert [slot.index for slot in group.unseen] == [1]
    assert group.least_size == 3


def test_a_plain_lease_named_like_a_slot_is_no_group_member() -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0)
    make_leader_k8s_lease(cluster, "orders-slot-1", holder="pod-7", managed=False)
    make_leader_k8s_lease(cluster, "billing-slot-0", holder="pod-8", managed=False)
    groups = leader_groups(NOW)
    assert [(group.name, len(group.seen)) for group in groups] == [("orders", 1)]
    assert [slot.state for slot in groups[0].slots] == [SlotState.HELD]


def test_slots_of_one_lock_in_two_namespaces_are_two_groups() -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0, namespace="a")
    make_slot(cluster, "orders", 0, namespace="b")
    assert [(group.namespace, group.name) for group in leader_groups(NOW)] == [
        ("a", "orders"),
        ("b", "orders"),
    ]


def test_groups_sort_naturally() -> None:
    cluster = make_cluster()
    for name in ("worker-10", "worker-2", "worker-1"):
        make_slot(cluster, name, 0)
    assert [group.name for group in leader_groups(NOW)] == ["worker-1", "worker-2", "worker-10"]


def test_slot_states_and_group_status_follow_the_clock() -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0)
    make_slot(cluster, "orders", 1, renewed_ago=60)  # expired 45 s ago
    make_slot(cluster, "orders", 3, holder="")  # released
    group = leader_group("prod", "apps", "orders", NOW)
    assert group is not None
    assert [(slot.index, slot.state) for slot in group.slots] == [
        (0, SlotState.HELD),
        (1, SlotState.EXPIRED),
        (2, SlotState.UNSEEN),
        (3, SlotState.FREE),
    ]
    assert (group.held, group.status) == (1, GroupStatus.STAFFED)
    LeaderGroup.objects.create(cluster=cluster, namespace="apps", name="orders", expected_size=6)
    group = leader_group("prod", "apps", "orders", NOW)
    assert group is not None
    assert group.status == GroupStatus.DEGRADED
    assert [slot.index for slot in group.unseen] == [2, 4, 5]


def test_a_group_with_no_slot_held_is_unstaffed_since_its_last_slot_expired() -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0, renewed_ago=100)
    make_slot(cluster, "orders", 1, renewed_ago=40)
    group = leader_group("prod", "apps", "orders", NOW)
    assert group is not None
    assert group.status == GroupStatus.UNSTAFFED
    assert group.unstaffed_since() == group.slots[1].lease.expires_at  # type: ignore[union-attr]


def test_deleted_slot_leases_are_no_members() -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0)
    make_slot(cluster, "orders", 1, deleted_at=NOW)
    group = leader_group("prod", "apps", "orders", NOW)
    assert group is not None
    assert [slot.index for slot in group.seen] == [0]


def test_groups_are_read_in_a_fixed_number_of_queries() -> None:
    cluster = make_cluster()
    for index in range(3):
        make_slot(cluster, f"group-{index}", 0)
    with CaptureQueriesContext(connection) as three:
        leader_groups(NOW)
    for index in range(3, 30):
        make_slot(cluster, f"group-{index}", 0)
        make_slot(cluster, f"group-{index}", 1)
    with CaptureQueriesContext(connection) as thirty:
        leader_groups(NOW)
    assert len(thirty) == len(three) == 3


def test_slot_ranges_compress_never_seen_slots() -> None:
    assert [str(r) for r in slot_ranges([1, 2, 3, 5, 9998, 9999])] == ["1-3", "5", "9998-9999"]


# --- Pages -----------------------------------------------------------------------------------


def test_groups_page_lists_each_group_with_held_and_size(engineer_client: Client) -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0)
    make_slot(cluster, "orders", 2, holder="")
    text = page(engineer_client, reverse("leases:groups"))
    assert 'href="/leases/clusters/prod/groups/apps/orders/"' in text
    assert "≥ 3 slots (highest slot seen)" in text
    assert 'href="/leases/groups/"' in text  # the navigation link


def test_groups_page_without_groups_says_what_a_group_is(engineer_client: Client) -> None:
    make_cluster()
    assert "No leader group seen" in page(engineer_client, reverse("leases:groups"))


def test_group_page_shows_identity_with_the_token_beside_it(engineer_client: Client) -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0, seed=11, node_id="pod-orders-7f9c")
    make_slot(cluster, "orders", 2, holder="")
    text = page(engineer_client, "/leases/clusters/prod/groups/apps/orders/")
    assert "pod-orders-7f9c" in text
    assert f'<code class="muted" title="fencing token">{token(11)}</code>' in text
    assert 'href="/leases/prod/apps/orders-slot-0/"' in text  # the slot's history
    assert 'data-slot="2" data-slot-state="free"' in text
    assert "≥ 3 slots (highest slot seen)" in text
    # Slot 1 was never seen.
    assert "<dt>never seen</dt>\n        <dd>1</dd>" in text


def test_group_page_shows_held_over_expected_when_an_admin_set_it(engineer_client: Client) -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0)
    LeaderGroup.objects.create(cluster=cluster, namespace="apps", name="orders", expected_size=3)
    text = page(engineer_client, "/leases/clusters/prod/groups/apps/orders/")
    assert "1 / 3" in text
    assert 'data-status="degraded"' in text
    assert "3 expected" in text


def test_a_foreign_writer_on_a_slot_is_a_warning(engineer_client: Client) -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0, holder="kubectl-was-here")
    text = page(engineer_client, "/leases/clusters/prod/groups/apps/orders/")
    assert "foreign writer" in text


def test_group_page_region_refreshes_alone(engineer_client: Client) -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0)
    text = page(
        engineer_client,
        "/leases/clusters/prod/groups/apps/orders/",
        HTTP_HX_TARGET="group-detail",
        **HTMX,
    )
    assert text.lstrip().startswith('<div id="group-detail"')
    assert "<html" not in text


def test_unknown_group_and_non_member_leases_are_404(engineer_client: Client) -> None:
    cluster = make_cluster()
    make_leader_k8s_lease(cluster, "billing-slot-0", holder="pod-8", managed=False)
    for url in (
        "/leases/clusters/prod/groups/apps/billing/",
        "/leases/clusters/prod/groups/apps/nothing/",
        "/leases/clusters/nope/groups/apps/billing/",
    ):
        assert engineer_client.get(url).status_code == 404


def test_hostile_identity_is_escaped(engineer_client: Client) -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0, node_id='<script>alert("x")</script>')
    text = page(engineer_client, "/leases/clusters/prod/groups/apps/orders/")
    assert "<script>alert" not in text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in text


def test_only_who_may_change_the_group_in_admin_records_the_expected_size(
    engineer_client: Client,
    engineer,  # type: ignore[no-untyped-def]
) -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0)
    url = "/leases/clusters/prod/groups/apps/orders/expected-size/"
    group_page = "/leases/clusters/prod/groups/apps/orders/"
    assert "Expected size" not in page(engineer_client, group_page)
    assert engineer_client.post(url, {"expected_size": "3"}).status_code == 403
    # Staff alone is not enough: admin refuses that user the row, so does the page.
    engineer.is_staff = True
    engineer.save()
    assert "Expected size" not in page(engineer_client, group_page)
    assert engineer_client.post(url, {"expected_size": "3"}).status_code == 403
    assert not LeaderGroup.objects.exists()
    # The group has no row yet: changing one is not enough either, adding one is needed.
    engineer.user_permissions.add(Permission.objects.get(codename="change_leadergroup"))
    assert engineer_client.post(url, {"expected_size": "3"}).status_code == 403
    engineer.user_permissions.add(Permission.objects.get(codename="add_leadergroup"))
    # Refused: back to the group page (post/redirect/get) with the value and its error.
    refused = engineer_client.post(url, {"expected_size": "0"})
    assert refused.status_code == 303
    assert refused["Location"] == "/leases/clusters/prod/groups/apps/orders/?refused_size=0"
    text = page(engineer_client, refused["Location"])
    assert "greater than or equal to 1" in text
    assert 'value="0"' in text and "autofocus" in text
    assert not LeaderGroup.objects.filter(name="orders", expected_size__isnull=False).exists()
    # The form's URL itself, reloaded or typed: the group page, never a 405.
    assert engineer_client.get(url)["Location"] == "/leases/clusters/prod/groups/apps/orders/"
    response = engineer_client.post(url, {"expected_size": "3"})
    assert response.status_code == 302
    assert LeaderGroup.objects.get(cluster=cluster, name="orders").expected_size == 3
    engineer_client.post(url, {"expected_size": ""})
    assert LeaderGroup.objects.get(cluster=cluster, name="orders").expected_size is None


def test_a_recorded_group_takes_the_change_permission_as_in_admin(
    engineer_client: Client,
    engineer,  # type: ignore[no-untyped-def]
) -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0)
    LeaderGroup.objects.create(cluster=cluster, namespace="apps", name="orders", expected_size=2)
    url = "/leases/clusters/prod/groups/apps/orders/expected-size/"
    engineer.is_staff = True
    engineer.save()
    engineer.user_permissions.add(Permission.objects.get(codename="add_leadergroup"))
    assert engineer_client.post(url, {"expected_size": "3"}).status_code == 403
    engineer.user_permissions.add(Permission.objects.get(codename="change_leadergroup"))
    assert "Expected size" in page(engineer_client, "/leases/clusters/prod/groups/apps/orders/")
    assert engineer_client.post(url, {"expected_size": "3"}).status_code == 302
    assert LeaderGroup.objects.get(name="orders").expected_size == 3


def test_group_pages_read_a_fixed_number_of_queries(engineer_client: Client) -> None:
    cluster = make_cluster()
    make_slot(cluster, "orders", 0)
    with CaptureQueriesContext(connection) as one:
        group_detail("prod", "apps", "orders", NOW)
        groups_page(NOW)
    for index in range(1, 12):
        make_slot(cluster, "orders", index, holder="" if index % 3 else token(index))
        make_slot(cluster, f"group-{index}", 0)
    with CaptureQueriesContext(connection) as many:
        detail = group_detail("prod", "apps", "orders", NOW)
        groups_page(NOW)
    assert detail is not None and len(detail.slots) == 12
    assert len(many) == len(one)


def test_on_the_group_pages_groups_is_the_current_navigation_item(
    engineer_client: Client,
) -> None:
    make_slot(make_cluster(), "orders", 0)
    for url in ("/leases/groups/", "/leases/clusters/prod/groups/apps/orders/"):
        text = page(engineer_client, url)
        assert text.count('aria-current="page"') == 1
        assert '<a href="/leases/groups/" aria-current="page">Groups</a>' in text
    text = page(engineer_client, "/leases/")
    assert '<a href="/leases/" aria-current="page">Leases</a>' in text
    assert '<a href="/leases/groups/">Groups</a>' in text


def test_groups_page_shows_a_page_and_says_what_is_not_shown(engineer_client: Client) -> None:
    from leases.presenters.groups import GROUPS_PAGE_SIZE

    cluster = make_cluster()
    for number in range(GROUPS_PAGE_SIZE + 4):
        make_slot(cluster, f"g{number}", 0)
    # More problem groups than a page holds: the first page is all problem groups, and it
    # says how many more there are.
    for number in range(GROUPS_PAGE_SIZE + 2):
        make_slot(cluster, f"down{number}", 0, holder="")
    total = 2 * GROUPS_PAGE_SIZE + 6
    text = page(engineer_client, reverse("leases:groups"))
    assert f"{total} groups, {GROUPS_PAGE_SIZE + 2} under-staffed." in text
    shown = f"Showing 1\u2013{GROUPS_PAGE_SIZE}, under-staffed first"
    assert f"{shown}; {total - GROUPS_PAGE_SIZE} not shown." in text
    assert "2 under-staffed groups are not on this page." in text
    assert 'data-group="prod/apps/down0"' in text
    assert 'data-group="prod/apps/g0"' not in text
    following = groups_page(NOW)
    assert following.next_query
    second = page(engineer_client, f"{reverse('leases:groups')}?{following.next_query}")
    assert 'data-group="prod/apps/down0"' not in second
    assert 'data-group="prod/apps/g0"' in second
    # The problem groups on the first page are not on this one: it links back to them.
    assert f"{GROUPS_PAGE_SIZE} under-staffed groups are not on this page." in second
    assert f'hx-get="/leases/groups/?{following.next_query}"' in second  # refreshes this page
    refused = page(engineer_client, f"{reverse('leases:groups')}?after=garbage")
    assert "That page link is no longer valid" in refused
    assert 'data-group="prod/apps/down0"' in refused


def test_groups_page_reads_only_the_slot_leases_of_its_groups() -> None:
    cluster = make_cluster()
    for number in range(3):
        make_slot(cluster, f"g{number}", 0)
    small = groups_page(NOW, limit=2)
    for number in range(3, 40):
        make_slot(cluster, f"g{number}", 0)
        make_slot(cluster, f"g{number}", 1)
    with CaptureQueriesContext(connection) as captured:
        large = groups_page(NOW, limit=2)
    assert [row.name for row in small.groups] == [row.name for row in large.groups] == ["g0", "g1"]
    assert large.total == 40
    # The slot leases read as rows (not the aggregate): only those of the two groups shown,
    # looked up by their names.
    [slots] = [
        query["sql"]
        for query in captured.captured_queries
        if '"group_slot"' in query["sql"] and "SUM(" not in query["sql"]
    ]
    assert "'g0'" in slots and "'g1'" in slots
    assert not any(f"'g{number}'" in slots for number in range(2, 40))
