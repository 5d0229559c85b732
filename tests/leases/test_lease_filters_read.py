"""`read_filters`: what the filter form makes of a Leases URL, kept per URL but never for a
cursor that names a row (that row's values can change between two refreshes)."""

from __future__ import annotations

import pytest
from django.http import QueryDict

from leases.cursors import Cursor, encode_cursor
from leases.forms import LeaseFilterForm, read_filters
from tests.leases.factories import make_cluster, make_lease

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "query",
    [
        "",
        "cluster=prod&class=node_heartbeat&state=held",
        "state=nonsense&q=%20sched%20&sort=-renewed",
        "flapping=yes&deleted=true&sort=nonsense",
        f"sort=holder&after={encode_cursor(['holder-a', 7], 7)}",
        "after=v.garbage",
    ],
)
def test_read_filters_answers_as_the_form_does_also_when_asked_again(query: str) -> None:
    form = LeaseFilterForm(QueryDict(query))
    form.is_valid()

    assert read_filters(QueryDict(query)) == (form.filters(), form.cursor())
    assert read_filters(QueryDict(query)) == (form.filters(), form.cursor())


def test_a_cursor_naming_a_row_reads_the_row_again_every_time() -> None:
    lease = make_lease(make_cluster(), "kube-scheduler", holder="pod-a")
    query = QueryDict(f"sort=holder&after=i.{lease.pk}")
    assert read_filters(query)[1] == Cursor("after", ("pod-a", lease.pk))

    lease.holder = "pod-b"
    lease.save()

    assert read_filters(query)[1] == Cursor("after", ("pod-b", lease.pk))
