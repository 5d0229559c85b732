"""Hand-edited and hostile page links: a bad cursor is the client's mistake, never a 500.

Cursors are URL parameters anyone can edit. Each of these once reached the database and
failed there (a ValueError, SQLite's OverflowError, PostgreSQL's refusal of NUL).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

import orjson
import pytest
import time_machine
from django.test import Client

from dashboard.models import ApiToken
from leases.cursors import encode_cursor
from tests.leases.factories import NOW, make_cluster, make_lease

pytestmark = pytest.mark.django_db

PLUS_14 = timezone(timedelta(hours=14))
MINUS_14 = timezone(timedelta(hours=-14))


def raw_cursor(*values: Any) -> str:
    """A "v." cursor as a hand-editor makes one: any JSON, integers of any size included."""
    payload = [value.isoformat() if isinstance(value, datetime) else value for value in values]
    return "v." + base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode()


# (sort, after) pairs that are malformed, or well-formed but impossible to hold in a column.
BAD_CURSORS = [
    pytest.param("", "i.²", id="superscript-digit-id"),
    pytest.param("", "i.١٢", id="arabic-indic-digit-id"),
    pytest.param("", "i." + "9" * 2000, id="id-of-2000-digits"),
    pytest.param("", f"i.{2**63}", id="id-beyond-64-bits"),
    pytest.param("", "i.-1", id="negative-id"),
    pytest.param("", "v.%%%", id="not-base64"),
    pytest.param("", "v." + "A" * 2000, id="base64-of-garbage"),
    pytest.param("", raw_cursor(2**63, "kube-system", "x"), id="cluster-beyond-64-bits"),
    pytest.param("", raw_cursor(-(2**63) - 1, "a", "b"), id="cluster-below-64-bits"),
    pytest.param("", raw_cursor(10**30, "a", "b"), id="cluster-10-to-the-30"),
    pytest.param(
        "renewed", raw_cursor(datetime(1, 1, 1, tzinfo=PLUS_14), 1), id="year-1-at-plus-14"
    ),
    pytest.param(
        "renewed",
        raw_cursor(datetime(9999, 12, 31, 23, tzinfo=MINUS_14), 1),
        id="year-9999-at-minus-14",
    ),
    pytest.param("renewed", raw_cursor("2026-11-29T08:00:00", 1), id="naive-time"),
    pytest.param("holder", raw_cursor("a\x00b", 1), id="nul-in-holder"),
    pytest.param("holder", raw_cursor("a", 2**64), id="id-value-beyond-64-bits"),
    pytest.param("transitions", raw_cursor(10**30, 1), id="transitions-10-to-the-30"),
    pytest.param("", raw_cursor(True, "a", "b"), id="boolean-for-integer"),
]


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture(autouse=True)
def leases() -> None:
    cluster = make_cluster()
    make_lease(cluster, "kube-scheduler")
    make_lease(cluster, "kube-controller-manager")


@pytest.fixture
def engineer_client(client: Client, django_user_model: Any) -> Client:
    client.force_login(django_user_model.objects.create_user("erin"))
    client.raise_request_exception = False
    return client


@pytest.fixture
def api(django_user_model: Any) -> Client:
    _, token = ApiToken.issue(django_user_model.objects.create_user("script"), name="tests")
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}", raise_request_exception=False)


def query(sort: str, direction: str, cursor: str) -> str:
    params = f"{direction}={quote(cursor, safe='')}"
    return f"{params}&sort={sort}" if sort else params


@pytest.mark.parametrize("direction", ["after", "before"])
@pytest.mark.parametrize(("sort", "cursor"), BAD_CURSORS)
def test_a_bad_cursor_on_the_api_is_a_400_naming_the_parameter(
    api: Client, sort: str, cursor: str, direction: str
) -> None:
    response = api.get(f"/api/v1/leases?{query(sort, direction, cursor)}")

    assert response.status_code == 400, response.content
    body = orjson.loads(response.content)
    assert body["error"] == "invalid filter"
    assert set(body["fields"]) == {direction}
    assert "This page link is invalid" in body["fields"][direction][0]["message"]


@pytest.mark.parametrize(("sort", "cursor"), BAD_CURSORS)
def test_a_bad_cursor_on_the_page_shows_the_first_page_with_a_banner(
    engineer_client: Client, sort: str, cursor: str
) -> None:
    response = engineer_client.get(f"/leases/?{query(sort, 'after', cursor)}")

    assert response.status_code == 200
    text = response.content.decode()
    assert "Some filters were not understood" in text
    assert "<code>after</code>" in text and "This page link is invalid" in text
    # The first page, in the asked-for order: the engineer loses the position, not the data.
    assert "kube-scheduler" in text and "kube-controller-manager" in text


def test_extreme_but_valid_times_in_a_cursor_page_as_usual(api: Client) -> None:
    early = encode_cursor([datetime(1, 1, 2, tzinfo=UTC), 1], 1)
    late = encode_cursor([datetime(9999, 12, 30, tzinfo=UTC), 1], 1)

    after_early = api.get(f"/api/v1/leases?sort=renewed&after={early}")
    after_late = api.get(f"/api/v1/leases?sort=renewed&after={late}")

    assert after_early.status_code == 200 and after_late.status_code == 200
    assert len(orjson.loads(after_early.content)["results"]) == 2
    assert orjson.loads(after_late.content)["results"] == []


def test_a_cursor_for_a_row_id_that_fits_but_does_not_exist_says_the_lease_is_gone(
    api: Client,
) -> None:
    response = api.get(f"/api/v1/leases?after=i.{2**63 - 1}")

    assert response.status_code == 400
    message = orjson.loads(response.content)["fields"]["after"][0]["message"]
    assert "the lease this page started at is gone" in message


def test_a_cursor_naming_a_row_still_pages_from_that_row(api: Client) -> None:
    cluster = make_cluster("staging")
    first = make_lease(cluster, "a-long-holder", holder="a" + "h" * 10_000)
    token = encode_cursor([first.holder, first.pk], first.pk)
    assert token == f"i.{first.pk}"

    response = api.get(f"/api/v1/leases?sort=holder&after={token}")

    assert response.status_code == 200
    names = [row["name"] for row in orjson.loads(response.content)["results"]]
    # Both others hold "holder-a", after the "ah…" holder; ties go by id (creation order).
    assert names == ["kube-scheduler", "kube-controller-manager"]
