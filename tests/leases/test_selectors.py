from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
import time_machine
from django.urls import reverse
from django.utils import timezone

from dashboard.links import lease_url
from dashboard.timefmt import format_duration
from leases.cursors import (
    MAX_CURSOR_CHARS,
    SORT_KEYS,
    Cursor,
    CursorError,
    decode_cursor,
    encode_cursor,
)
from leases.flapping import flap_counts
from leases.models import Lease, LeaseState
from leases.presenters.lease_detail import holder_timeline
from leases.presenters.lease_table import lease_table
from leases.presenters.overview import leases_overview
from leases.queries import LeaseFilters, filter_leases, keyset_page
from tests.leases.factories import NOW, known_until, make_cluster, make_lease, make_transition

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


def test_state_turns_from_held_to_expired_as_the_clock_passes_expires_at() -> None:
    cluster = make_cluster()
    make_lease(cluster, "kube-scheduler", renewed_ago=5, duration=15)  # expires at NOW+10s

    assert lease_table(LeaseFilters(), timezone.now()).rows[0].state == LeaseState.HELD
    with time_machine.travel(NOW + timedelta(seconds=9.9), tick=False):
        known_until(cluster, timezone.now())
        row = lease_table(LeaseFilters(), timezone.now()).rows[0]
        assert (row.state, row.expires_text) == ("held", "in 0 s")
    with time_machine.travel(NOW + timedelta(seconds=10), tick=False):
        known_until(cluster, timezone.now())
        row = lease_table(LeaseFilters(), timezone.now()).rows[0]
        assert (row.state, row.row_class) == ("expired", "row-bad")
        assert row.expires_text == "expired for 0 s"
    with time_machine.travel(NOW + timedelta(seconds=75), tick=False):
        known_until(cluster, timezone.now())
        assert lease_table(LeaseFilters(), timezone.now()).rows[0].expires_text == (
            "expired for 65 s"
        )


def test_an_expiry_past_the_data_as_of_moment_reads_unknown_not_expired() -> None:
    cluster = make_cluster()
    make_lease(cluster, "kube-scheduler", renewed_ago=5, duration=15)  # expires at NOW+10s
    with time_machine.travel(NOW + timedelta(seconds=12), tick=False):
        known_until(cluster, NOW + timedelta(seconds=9))  # current, but not past the expiry
        row = lease_table(LeaseFilters(), timezone.now()).rows[0]
        assert (row.state, row.row_class) == ("unknown", "")
        assert "not known" in row.expires_text and "expired" not in row.expires_text
    with time_machine.travel(NOW + timedelta(seconds=30), tick=False):
        # The watcher went quiet at NOW + 9 s: 21 s later nothing is known of now.
        assert lease_table(LeaseFilters(), timezone.now()).rows[0].state == "unknown"


def test_state_filter_follows_the_clock_too() -> None:
    cluster = make_cluster()
    make_lease(cluster, "kube-scheduler", renewed_ago=5, duration=15)
    make_lease(cluster, "released-one", holder="")
    ids = {cluster.name: cluster.pk}

    def names(state: str) -> list[str]:
        leases = filter_leases(LeaseFilters(state=state), timezone.now(), ids)
        return sorted(leases.values_list("name", flat=True))

    assert names("held") == ["kube-scheduler"]
    assert names("released") == ["released-one"]
    assert names("expired") == []
    with time_machine.travel(NOW + timedelta(seconds=11), tick=False):
        known_until(cluster, timezone.now())
        assert names("held") == []
        assert names("expired") == ["kube-scheduler"]
        assert names("unknown") == []
    with time_machine.travel(NOW + timedelta(seconds=40), tick=False):
        # Stale: every lease of the cluster is unknown, none expired, held or released.
        assert names("unknown") == ["kube-scheduler", "released-one"]
        assert names("expired") == names("held") == names("released") == []


def test_three_holder_changes_in_ten_minutes_flag_a_lease_as_flapping() -> None:
    lease = make_lease(make_cluster(), "kube-controller-manager")
    for seconds_ago in (500, 300, 100):
        make_transition(lease, "a", "b", seconds_ago=seconds_ago)

    assert flap_counts([lease.pk], NOW) == {lease.pk: 3}
    row = lease_table(LeaseFilters(), NOW).rows[0]
    assert (row.flapping, row.row_class) == (True, "row-warn")
    assert lease_table(LeaseFilters(flapping=True), NOW).rows[0].name == lease.name


def test_two_holder_changes_are_not_flapping() -> None:
    lease = make_lease(make_cluster(), "kube-controller-manager")
    make_transition(lease, "a", "b", seconds_ago=200)
    make_transition(lease, "b", "a", seconds_ago=100)

    row = lease_table(LeaseFilters(), NOW).rows[0]
    assert (row.flaps, row.flapping, row.row_class) == (2, False, "")
    assert lease_table(LeaseFilters(flapping=True), NOW).rows == []


def test_changes_older_than_the_window_do_not_count_as_flapping() -> None:
    lease = make_lease(make_cluster(), "kube-controller-manager")
    for seconds_ago in (3600, 1800, 601, 100):
        make_transition(lease, "a", "b", seconds_ago=seconds_ago)

    assert flap_counts([lease.pk], NOW) == {lease.pk: 1}
    assert not lease_table(LeaseFilters(), NOW).rows[0].flapping
    # Two more inside the window's edge make three.
    make_transition(lease, "b", "a", seconds_ago=599)
    make_transition(lease, "a", "b", seconds_ago=598)
    assert lease_table(LeaseFilters(), NOW).rows[0].flapping


def _walk(filters: LeaseFilters, limit: int) -> tuple[list[int], list[list[int]]]:
    """Follow `next` cursors to the end, then come back with `before` cursors."""
    leases = Lease.objects.all()
    pages: list[list[int]] = []
    cursor = None
    while True:
        page = keyset_page(leases, filters, cursor, limit, ("id",))
        pages.append([row["id"] for row in page.rows])
        if page.next_cursor is None:
            break
        cursor = Cursor("after", decode_cursor(page.next_cursor, filters.sort_key))
    back: list[list[int]] = [pages[-1]]
    first_of_last = keyset_page(leases, filters, cursor, limit, ("id",)).previous_cursor
    cursor = (
        Cursor("before", decode_cursor(first_of_last, filters.sort_key)) if first_of_last else None
    )
    while cursor is not None:
        page = keyset_page(leases, filters, cursor, limit, ("id",))
        back.insert(0, [row["id"] for row in page.rows])
        cursor = (
            Cursor("before", decode_cursor(page.previous_cursor, filters.sort_key))
            if page.previous_cursor
            else None
        )
    return [name for rows in pages for name in rows], back


@pytest.mark.parametrize("sort", [*SORT_KEYS, *(f"-{key}" for key in SORT_KEYS)])
def test_keyset_pages_walk_every_row_once_in_order_both_ways(sort: str) -> None:
    first, second = make_cluster("a-cluster"), make_cluster("b-cluster")
    # Ties, NULLs and two clusters with the same names: the cases keyset paging gets wrong.
    for index in range(13):
        make_lease(
            first if index % 2 else second,
            f"lease-{index % 7}",
            namespace=f"ns-{index % 3}",
            holder=["", "x", "y"][index % 3],
            renewed_ago=float(index % 4),
            duration=None if index % 5 == 0 else 15,
            renew_time=None if index % 6 == 0 else NOW - timedelta(seconds=index % 4),
            lease_transitions=None if index % 4 == 0 else index % 3,
        )
    filters = LeaseFilters(sort=sort)

    walked, pages_back = _walk(filters, limit=4)

    everything = keyset_page(Lease.objects.all(), filters, None, 100, ("id",))
    assert walked == [row["id"] for row in everything.rows]
    assert sorted(walked) == sorted(Lease.objects.values_list("id", flat=True))
    assert [row_id for rows in pages_back for row_id in rows] == walked


def test_nulls_sort_last_in_both_directions() -> None:
    cluster = make_cluster()
    make_lease(cluster, "never-renewed", renew_time=None, expires_at=None)
    make_lease(cluster, "old", renewed_ago=30)
    make_lease(cluster, "recent", renewed_ago=1)

    def order(sort: str) -> list[str]:
        return [row.name for row in lease_table(LeaseFilters(sort=sort), NOW).rows]

    assert order("renewed") == ["old", "recent", "never-renewed"]
    assert order("-renewed") == ["recent", "old", "never-renewed"]


def test_a_cursor_for_another_sort_order_or_garbage_is_rejected() -> None:
    # Issue 11: the cluster order lists names naturally (name_key, then the name itself).
    token = encode_cursor([1, "kube-system", "kube-scheduler", "kube-scheduler"], 7)
    assert decode_cursor(token, SORT_KEYS["cluster"]) == (
        1,
        "kube-system",
        "kube-scheduler",
        "kube-scheduler",
    )
    for bad, sort in [
        (token, "renewed"),
        ("v.not-base64!", "cluster"),
        ("x.123", "cluster"),
        (encode_cursor(["when?", 3], 3), "renewed"),
        (encode_cursor([None, 3], 3), "holder"),
    ]:
        with pytest.raises(CursorError):
            decode_cursor(bad, SORT_KEYS[sort])


def test_a_huge_sort_value_makes_a_cursor_that_names_the_row() -> None:
    lease = make_lease(make_cluster(), "big", holder="h" * 10_000)
    token = encode_cursor(["h" * 10_000, lease.pk], lease.pk)

    assert token == f"i.{lease.pk}"
    assert len(token) < MAX_CURSOR_CHARS
    assert decode_cursor(token, SORT_KEYS["holder"]) == ("h" * 10_000, lease.pk)
    with pytest.raises(CursorError):
        decode_cursor("i.999999", SORT_KEYS["holder"])


def test_lease_url_helper_agrees_with_reverse() -> None:
    args = ("prod", "kube-system", "kube-scheduler.v1")
    assert lease_url(reverse("leases:index"), *args) == reverse("leases:detail", args=args)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0 s"), (119.9, "119 s"), (120, "2 min"), (7199, "119 min"), (7200, "2 h"), (-3, "3 s")],
)
def test_durations_are_coarse_and_match_the_javascript(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert format_duration(3 * 86_400) == "3 d"


def test_timeline_has_one_period_per_holder_oldest_first() -> None:
    lease = make_lease(make_cluster(), "kube-scheduler", holder="c")
    make_transition(lease, "", "a", seconds_ago=900)
    make_transition(lease, "a", "b", seconds_ago=600)
    make_transition(lease, "b", "c", seconds_ago=60, missed=2)
    transitions = list(lease.transitions.all())

    periods = holder_timeline(lease, transitions, truncated=False, now=NOW)

    # Nobody held it before its first holder: no empty period is made up.
    assert [p.holder for p in periods] == ["a", "b", "c"]
    assert [p.duration for p in periods] == ["5 min", "9 min", "60 s"]
    assert [p.missed_before for p in periods] == [0, 0, 2]
    assert [p.current for p in periods] == [False, False, True]


def test_timeline_trusts_the_lease_when_the_last_change_row_disagrees() -> None:
    lease = make_lease(make_cluster(), "kube-scheduler", holder="z")
    make_transition(lease, "a", "b", seconds_ago=100)

    periods = holder_timeline(lease, list(lease.transitions.all()), truncated=False, now=NOW)

    assert [(p.holder, p.current) for p in periods] == [("a", False), ("b", False), ("z", True)]


def test_overview_counts_each_cluster_by_state() -> None:
    cluster = make_cluster()
    make_lease(cluster, "held")
    make_lease(cluster, "soon", renewed_ago=10, duration=15)
    make_lease(cluster, "expired", renewed_ago=100)
    make_lease(cluster, "node-1", namespace="kube-node-lease", renewed_ago=100, duration=40)
    make_lease(cluster, "released", holder="")
    make_lease(cluster, "gone", deleted_at=NOW, renewed_ago=100)

    card = leases_overview(NOW).clusters[0]

    assert (card.held, card.expired, card.released) == (2, 2, 1)
    assert card.expiring_soon == 1
    assert [link.name for link in card.expiring_soon_leases] == ["soon"]
    assert card.nodes_expired == 1
    assert [link.name for link in card.expired_nodes] == ["node-1"]
