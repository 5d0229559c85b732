"""Problems first, the Leases page's default order: expired, fencing token reused, flapping,
expiring soon, then the rest, each by name in natural order; paged by keyset cursors that
carry the rank, both ways, while the clock moves."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.http import QueryDict
from django.test import Client
from django.utils import timezone

from dashboard.flapping import flap_policy
from dashboard.natural import natural_key
from leases.cursors import (
    RANK_FIELD,
    SORT_KEYS,
    Cursor,
    CursorError,
    decode_cursor,
    encode_cursor,
)
from leases.forms import LeaseFilterForm
from leases.models import KubeCluster, Lease
from leases.presenters.lease_table import lease_table
from leases.queries import (
    LeaseFilters,
    Problem,
    expiring_soon,
    filter_leases,
    keyset_page,
    table_page,
    with_problem_rank,
)
from tests.leases.factories import NOW, make_cluster, make_lease, make_transition

pytestmark = pytest.mark.django_db

PROBLEMS = SORT_KEYS["problems"]
# The order at NOW of the leases `problem_leases` writes.
EXPECTED = [
    "alpha-expired",
    "zeta-expired",
    "fenced",
    "flappy",
    "soon-floor",
    "soon-share",
    "calm-share",
    "deleted-expired",
    "fenced-old",
    "released",
    "worker-2",
    "worker-10",
]


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


def lease(cluster: KubeCluster, name: str, **fields: Any) -> Lease:
    return make_lease(cluster, name, namespace="ops", name_key=natural_key(name), **fields)


@pytest.fixture
def problem_leases() -> KubeCluster:
    cluster = make_cluster()
    lease(cluster, "zeta-expired", renewed_ago=100, duration=15)
    lease(cluster, "alpha-expired", renewed_ago=16, duration=15)
    # An expired lease with a reused token is expired first: a lease has its worst problem.
    lease(cluster, "fenced", fencing_reused_at=NOW - timedelta(hours=23))
    lease(cluster, "fenced-old", fencing_reused_at=NOW - timedelta(hours=25))
    flappy = lease(cluster, "flappy")
    for seconds_ago in (300, 200, 100):
        make_transition(flappy, "a", "b", seconds_ago=seconds_ago)
    lease(cluster, "soon-floor", renewed_ago=6, duration=15)  # 9 s left: within 10 s
    lease(cluster, "soon-share", renewed_ago=80, duration=100)  # 20 s left: under a quarter
    lease(cluster, "calm-share", renewed_ago=70, duration=100)  # 30 s left of 100
    lease(cluster, "worker-10")
    lease(cluster, "worker-2")
    lease(cluster, "released", holder="", renewed_ago=100)
    lease(cluster, "deleted-expired", renewed_ago=100, deleted_at=NOW - timedelta(minutes=1))
    return cluster


def ids() -> dict[str, int]:
    return dict(KubeCluster.objects.values_list("name", "pk"))


def names_by_id() -> dict[int, str]:
    return dict(Lease.objects.values_list("pk", "name"))


def table_walk(filters: LeaseFilters, limit: int) -> tuple[list[str], list[str]]:
    """The table's names following `next` cursors to the end, then `previous` ones back."""
    names, policy = names_by_id(), flap_policy()

    def page(cursor: Cursor | None) -> tuple[list[str], str | None, str | None]:
        found = table_page(filters, NOW, ids(), policy, cursor, limit)
        return [names[row[0]] for row in found.rows], found.next_cursor, found.previous_cursor

    rows, after, before = page(None)
    forward = list(rows)
    while after is not None:
        rows, after, before = page(Cursor("after", decode_cursor(after, PROBLEMS)))
        forward += rows
    backward = rows
    while before is not None:
        rows, _, before = page(Cursor("before", decode_cursor(before, PROBLEMS)))
        backward = rows + backward
    return forward, backward


def orm_walk(filters: LeaseFilters, limit: int) -> tuple[list[str], list[str]]:
    leases = filter_leases(filters, NOW, ids())

    def page(cursor: Cursor | None) -> tuple[list[str], str | None, str | None]:
        found = keyset_page(leases, filters, cursor, limit, ("name",))
        return [row["name"] for row in found.rows], found.next_cursor, found.previous_cursor

    rows, after, before = page(None)
    forward = list(rows)
    while after is not None:
        rows, after, before = page(Cursor("after", decode_cursor(after, PROBLEMS)))
        forward += rows
    backward = rows
    while before is not None:
        rows, _, before = page(Cursor("before", decode_cursor(before, PROBLEMS)))
        backward = rows + backward
    return forward, backward


def test_problems_come_first_worst_first_then_the_rest_by_natural_name(
    problem_leases: KubeCluster,
) -> None:
    filters = LeaseFilters(include_deleted=True)

    for limit in (2, 5, 100):
        assert table_walk(filters, limit) == (EXPECTED, EXPECTED)
        assert orm_walk(filters, limit) == (EXPECTED, EXPECTED)


def test_problems_last_is_the_same_order_reversed(problem_leases: KubeCluster) -> None:
    filters = LeaseFilters(include_deleted=True, sort="-problems")

    assert table_walk(filters, 3) == (EXPECTED[::-1], EXPECTED[::-1])
    assert orm_walk(filters, 3) == (EXPECTED[::-1], EXPECTED[::-1])


def test_the_table_shows_why_a_lease_is_high(
    problem_leases: KubeCluster, engineer_client: Client
) -> None:
    text = engineer_client.get("/leases/?deleted=true").content.decode()

    names = re.findall(r'<td><a href="/leases/[^"]+">([^<]+)</a></td>', text)
    assert names == EXPECTED

    def row(name: str) -> str:
        return text.split(f">{name}</a>", 1)[1].split("</tr>", 1)[0]

    assert ">fencing token reused</span>" in row("fenced")
    assert "fencing token reused" not in row("fenced-old")
    assert ">flapping</span>" in row("flappy")
    for name in ("soon-floor", "soon-share"):
        assert ">expiring soon</span>" in row(name)
    for name in ("calm-share", "alpha-expired", "released", "deleted-expired"):
        assert "expiring soon" not in row(name)
    assert '<tr class="row-bad" data-state="held">' in text  # the reused token
    # The legend says what the order means, and how to leave it.
    assert "Problems first: expired, then a fencing token reused in the last 24 h" in text
    assert "within 10 s or the last 1/4 of its duration" in text
    assert 'href="/leases/?deleted=true&amp;sort=-problems"' in text


def test_every_old_sort_keeps_its_url_and_the_default_needs_none(
    problem_leases: KubeCluster, engineer_client: Client
) -> None:
    page = engineer_client.get("/leases/").content.decode()

    links = [html.unescape(link) for link in re.findall(r'<th[^>]*><a href="([^"]+)"', page)]
    assert links == [
        f"/leases/?sort={key}"
        for key in ("cluster", "namespace", "name", "class", "holder", "renewed", "expires")
    ] + ["/leases/?sort=transitions"]
    # The default order sends no hidden sort with the filters; another order does.
    assert 'name="sort"' not in page.split('<section id="lease-table"', 1)[1]
    by_cluster = engineer_client.get("/leases/?sort=cluster").content.decode()
    assert '<input type="hidden" name="sort" value="cluster" form="lease-filters">' in by_cluster
    assert 'href="/leases/?" hx-get="/leases/?">Sort problems first</a>' in by_cluster
    names = re.findall(r'<td><a href="/leases/[^"]+">([^<]+)</a></td>', by_cluster)
    # cluster, namespace, then names in natural order (one cluster, one namespace here).
    assert names == sorted(
        (name for name in EXPECTED if name != "deleted-expired"), key=natural_key
    )


def test_a_reader_may_keep_another_default_order() -> None:
    page = LeaseFilterForm(QueryDict(""))
    api = LeaseFilterForm(QueryDict(""), default_sort="cluster")
    page.is_valid()
    api.is_valid()

    assert (page.filters().sort, page.filters().query_string()) == ("problems", "")
    assert (api.filters().sort, api.filters().query_string()) == ("cluster", "")
    assert LeaseFilters(sort="cluster").query_string() == "sort=cluster"
    token = encode_cursor([1, "ops", natural_key("x-2"), "x-2"], 1)
    after = LeaseFilterForm(QueryDict(f"after={token}"), default_sort="cluster")
    after.is_valid()
    assert after.cursor() == Cursor("after", (1, "ops", "x-012", "x-2"))


def test_a_page_is_judged_by_its_own_clock_from_the_rank_its_cursor_carries(
    problem_leases: KubeCluster,
) -> None:
    filters, policy = LeaseFilters(), flap_policy()
    first = table_page(filters, NOW, ids(), policy, None, 4)
    names = names_by_id()
    assert [names[row[0]] for row in first.rows] == EXPECTED[:4]
    assert first.next_cursor is not None
    cursor = decode_cursor(first.next_cursor, PROBLEMS)
    assert cursor[0] == Problem.FLAPPING

    # 20 s later the calm leases have expired and the 9 s one too: they rank first now, and
    # the next page is the rest of the new order after the cursor's place in it.
    later = NOW + timedelta(seconds=20)
    with time_machine.travel(later, tick=False):
        second = table_page(filters, timezone.now(), ids(), policy, Cursor("after", cursor), 100)
        ranked = with_problem_rank(filter_leases(filters, later, ids()), later, policy)
        keys = sorted(ranked.values_list(RANK_FIELD, "name_key", "name", "namespace", "cluster_id"))
        top = table_page(filters, timezone.now(), ids(), policy, None, 3)
    assert [names[row[0]] for row in second.rows] == [key[2] for key in keys if key > cursor]
    assert "worker-2" in [key[2] for key in keys if key < cursor]  # expired meanwhile
    assert [names[row[0]] for row in top.rows] == [key[2] for key in keys[:3]]
    assert keys[0][0] == Problem.EXPIRED and "fenced" in [key[2] for key in keys[:3]]
    # Read back from the later page, the earlier one starts after what expired meanwhile.
    assert second.previous_cursor is not None
    with time_machine.travel(later, tick=False):
        back = table_page(
            filters,
            timezone.now(),
            ids(),
            policy,
            Cursor("before", decode_cursor(second.previous_cursor, PROBLEMS)),
            100,
        )
    assert [names[row[0]] for row in back.rows] == [key[2] for key in keys if key < cursor]


def test_a_cursor_naming_a_row_carries_the_rank_it_cannot_read_back(
    problem_leases: KubeCluster,
) -> None:
    long_name = "expired-" + "x" * 245
    lease(problem_leases, long_name, renewed_ago=100)
    filters = LeaseFilters()

    # Named after alpha-expired: the second row of the first page of two.
    first = table_page(filters, NOW, ids(), flap_policy(), None, 2)

    row_id = Lease.objects.get(name=long_name).pk
    assert first.next_cursor == f"i.{row_id}.{Problem.EXPIRED:d}"
    assert decode_cursor(first.next_cursor, PROBLEMS) == (
        Problem.EXPIRED,
        natural_key(long_name),
        long_name,
        "ops",
        problem_leases.pk,
    )
    forward, backward = table_walk(filters, 1)
    assert forward == backward == ["alpha-expired", long_name, *EXPECTED[1:7], *EXPECTED[8:]]
    for bad in (
        f"i.{row_id}",
        f"i.{row_id}.9",
        f"i.{row_id}.-1",
        f"i.{row_id}.x",
        f"i.{row_id}.1.1",
    ):
        with pytest.raises(CursorError):
            decode_cursor(bad, PROBLEMS)
    with pytest.raises(CursorError):
        decode_cursor(f"i.{row_id}.0", SORT_KEYS["cluster"])
    for bad_rank in (5, -1, True, "0", None):
        with pytest.raises(CursorError):
            decode_cursor(encode_cursor([bad_rank, "k", "n", "ops", 1], 1), PROBLEMS)


@pytest.mark.parametrize(
    ("renewed_ago", "duration", "soon"),
    [
        (5, 15, True),  # 10 s left: the floor includes it, as the overview counts
        (4.999999, 15, False),
        (30, 40, True),  # 10 s of 40
        (75, 100, False),  # exactly a quarter left is not under a quarter
        (75.000001, 100, True),
        (2000, 3600, False),
        (2700.5, 3600, True),
        (15, 15, False),  # expired: that is its problem
        (5, None, False),
        (80_000, 86_400, True),  # a day-long lease: no integer overflow in the database
        (10, 2**31 - 1, False),
    ],
)
def test_expiring_soon_is_judged_alike_in_sql_and_in_python(
    renewed_ago: float, duration: int | None, soon: bool
) -> None:
    made = lease(make_cluster(), "one", renewed_ago=renewed_ago, duration=duration)

    rank = with_problem_rank(Lease.objects.all(), NOW).values_list(RANK_FIELD, flat=True).get()

    assert (rank == Problem.EXPIRING_SOON) is soon
    assert expiring_soon(made.holder, made.expires_at, made.lease_duration_seconds, NOW) is soon
    # The table's rows judge it with bounds worked out once per page: alike.
    (row,) = lease_table(LeaseFilters(), NOW).rows
    assert row.expiring_soon is soon
