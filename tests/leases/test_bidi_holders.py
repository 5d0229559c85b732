"""A holderIdentity with bidi controls reads as what it is: on pages each control is shown as
its escape (`\\u202e`), as mail and chat show it; the API keeps the exact string, which a
JSON reader decodes as data.

U+202E turns "master-0\\u202etxt.exe" into what a reader takes for another holder's name.
"""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest
import time_machine
from django.test import Client

from dashboard.hostile_input import visible_text
from dashboard.models import ApiToken
from tests.leases.factories import NOW, make_cluster, make_lease, make_transition

pytestmark = pytest.mark.django_db

BIDI = [
    "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
    "\u2066", "\u2067", "\u2068", "\u2069",
    "\u200e", "\u200f", "\u061c",
]  # fmt: skip
HOLDER = "master-0\u202egnp.exe\u2066x\u2069\u200f\u061c"
SHOWN = "master-0\\u202egnp.exe\\u2066x\\u2069\\u200f\\u061c"


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


def page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


@pytest.mark.parametrize("character", BIDI)
def test_each_bidi_control_is_written_as_its_escape(character: str) -> None:
    shown = visible_text(f"a{character}b")
    assert shown == f"a\\u{ord(character):04x}b"
    assert character not in shown


def test_plain_names_are_unchanged() -> None:
    assert visible_text("master-0_6b7c-4a1e") == "master-0_6b7c-4a1e"
    assert visible_text("노드-1 café") == "노드-1 café"


def test_the_lease_list_shows_the_controls(engineer_client: Client) -> None:
    make_lease(make_cluster(), "kube-scheduler", holder=HOLDER)

    for url in ("/leases/", "/leases/?holder=master"):
        html = page(engineer_client, url)
        assert SHOWN in html, url
        assert not any(character in html for character in BIDI), url


def test_the_lease_page_shows_the_controls(engineer_client: Client) -> None:
    lease = make_lease(make_cluster(), "kube-scheduler", holder=HOLDER)
    make_transition(lease, "master-1", HOLDER, seconds_ago=60)

    html = page(engineer_client, "/leases/prod/kube-system/kube-scheduler/")

    assert SHOWN in html
    assert not any(character in html for character in BIDI)


def test_the_overview_shows_the_controls(engineer_client: Client) -> None:
    lease = make_lease(make_cluster(), "kube-scheduler", holder=HOLDER)
    make_transition(lease, "master-1", HOLDER, seconds_ago=60)

    html = page(engineer_client, "/")

    assert SHOWN in html
    assert not any(character in html for character in BIDI)


def test_the_api_keeps_the_exact_holder(client: Client, engineer: object) -> None:
    make_lease(make_cluster(), "kube-scheduler", holder=HOLDER)
    _, token = ApiToken.issue(engineer)  # type: ignore[arg-type]

    response = client.get("/api/v1/leases", HTTP_AUTHORIZATION=f"Bearer {token}")

    assert response.status_code == 200
    assert orjson.loads(response.content)["results"][0]["holder"] == HOLDER
