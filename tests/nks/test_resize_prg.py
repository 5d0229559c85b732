"""The resize form never strands the page: a refused resize redirects to the nodegroup page
(post/redirect/get) with what was typed, whose regions refresh from GET-able URLs; every form
URL answers GET with a redirect; a double-submitted form makes one resize."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from fakes.nks import FakeNks
from nks.models import NksAccount, NksNodegroup, ResizeRequest, ResizeState
from tests.nks.nodes import nodes_like_the_fake
from tests.nks.refusals import assert_refused_back_on_the_page

pytestmark = pytest.mark.django_db


def group(cluster: str, name: str) -> NksNodegroup:
    return NksNodegroup.objects.select_related("cluster").get(cluster__name=cluster, name=name)


def page_url(nodegroup: NksNodegroup) -> str:
    return f"/clusters/{nodegroup.cluster.uuid}/nodegroups/{nodegroup.name}/"


@pytest.fixture
def nodegroup(polled: NksAccount, fake_nks: FakeNks) -> NksNodegroup:
    nodes_like_the_fake(fake_nks, "prod-api")
    return group("prod-api", "default-worker")


def hx_gets(html: str) -> list[str]:
    return re.findall(r'hx-get="([^"]*)"', html)


def test_an_invalid_resize_redirects_to_the_page_with_the_state_typed(
    nodegroup: NksNodegroup, operator_client: Client
) -> None:
    response = operator_client.post(
        f"{page_url(nodegroup)}resize/", {"node_count": "99", "reason": "kept reason"}
    )
    assert response.status_code == 303
    location = response["Location"]
    # No fragment: a browser skips autofocus (the error summary's) when the URL has one.
    assert location.startswith(f"{page_url(nodegroup)}?refused=") and "#" not in location
    shown = operator_client.get(location)
    assert shown.status_code == 200
    html = shown.content.decode()
    assert 'value="99"' in html and "kept reason</textarea>" in html
    assert "less than or equal to 10" in html and 'id="resize-errors"' in html
    assert ResizeRequest.objects.count() == 0


def test_a_reload_of_the_refused_page_shows_the_same_errors_again(
    nodegroup: NksNodegroup, operator_client: Client
) -> None:
    # A reload is a GET of the same URL: the same form and errors, nothing sent.
    location = operator_client.post(
        f"{page_url(nodegroup)}resize/", {"node_count": "0", "reason": "x"}
    )["Location"]
    first, again = (operator_client.get(location).content.decode() for _ in range(2))
    for html in (first, again):
        assert 'value="0"' in html and "greater than or equal to 1" in html
    assert ResizeRequest.objects.count() == 0


def test_two_tabs_keep_their_own_refused_forms(
    nodegroup: NksNodegroup, operator_client: Client
) -> None:
    url = f"{page_url(nodegroup)}resize/"
    one = operator_client.post(url, {"node_count": "99", "reason": "tab one"})["Location"]
    two = operator_client.post(url, {"node_count": "0", "reason": "tab two"})["Location"]
    assert one != two
    assert "tab one</textarea>" in operator_client.get(one).content.decode()
    assert "tab two</textarea>" in operator_client.get(two).content.decode()


def test_an_unknown_or_foreign_refusal_token_shows_a_fresh_form(
    nodegroup: NksNodegroup, operator_client: Client, django_user_model: Any
) -> None:
    location = operator_client.post(
        f"{page_url(nodegroup)}resize/", {"node_count": "99", "reason": "mine"}
    )["Location"]
    # Another browser given the link sees the plain form: what was typed stays in its session.
    other = Client()
    other.force_login(django_user_model.objects.get(username="olivia"))
    for client, url in ((other, location), (operator_client, f"{page_url(nodegroup)}?refused=x")):
        html = client.get(url).content.decode()
        assert 'id="resize-errors"' not in html and "mine</textarea>" not in html
        assert 'id="id_node_count"' in html


def test_what_a_crafted_post_parks_in_the_session_is_bounded(
    nodegroup: NksNodegroup, operator_client: Client
) -> None:
    url = f"{page_url(nodegroup)}resize/"
    for _ in range(8):
        operator_client.post(
            url, {"node_count": "0", "reason": "r" * 50_000, "nodes_to_remove": ["n"] * 500}
        )
    kept = operator_client.session["refused_resizes"]
    assert len(kept) == 5
    for entry in kept.values():
        assert len(entry["data"]["reason"][0]) <= 2000
        assert len(entry["data"]["nodes_to_remove"]) <= 100
        assert "csrfmiddlewaretoken" not in entry["data"]


def test_after_an_invalid_resize_every_region_refreshes_from_the_nodegroup_page(
    nodegroup: NksNodegroup, operator_client: Client, fake_nks: FakeNks
) -> None:
    # A resize in flight makes the progress box poll too.
    operator_client.post(f"{page_url(nodegroup)}resize/", {"node_count": "5", "reason": "a"})
    response = operator_client.post(
        f"{page_url(nodegroup)}resize/", {"node_count": "0", "reason": "b"}, follow=True
    )
    assert_refused_back_on_the_page(response)
    html = response.content.decode()
    targets = hx_gets(html)
    assert len(targets) >= 2, targets
    assert {target.partition("?")[0] for target in targets} == {page_url(nodegroup)}
    assert not [target for target in targets if "refused=" in target]
    assert f'name="next" value="{page_url(nodegroup)}"' in html or "watch-leases" not in html
    # What those refreshes GET answers 200 with the region, never 405.
    for target in ("nks-nodegroup", "resize-progress"):
        region = operator_client.get(
            page_url(nodegroup), HTTP_HX_REQUEST="true", HTTP_HX_TARGET=target
        )
        assert region.status_code == 200
        assert f'id="{target}"' in region.content.decode()


def test_get_on_the_resize_url_redirects_to_the_form_on_its_page(
    nodegroup: NksNodegroup, operator_client: Client
) -> None:
    for method in ("get", "head"):
        response = getattr(operator_client, method)(f"{page_url(nodegroup)}resize/")
        assert response.status_code == 302
        assert response["Location"] == f"{page_url(nodegroup)}#resize"
    followed = operator_client.get(f"{page_url(nodegroup)}resize/", follow=True)
    assert followed.status_code == 200
    assert 'id="resize"' in followed.content.decode()


def test_get_on_the_watch_leases_url_redirects_to_the_cluster_page(
    nodegroup: NksNodegroup, operator_client: Client
) -> None:
    uuid = nodegroup.cluster.uuid
    response = operator_client.get(f"/clusters/{uuid}/watch-leases/")
    assert response.status_code == 302
    assert response["Location"] == f"/clusters/{uuid}/"


def test_get_on_a_form_url_redirects_even_for_a_viewer(
    nodegroup: NksNodegroup, client: Client, django_user_model: Any
) -> None:
    # Someone who may not resize still gets the page (which offers no form), not a 403 or 405.
    client.force_login(django_user_model.objects.create_user("viewer"))
    response = client.get(f"{page_url(nodegroup)}resize/")
    assert response.status_code == 302


def test_other_methods_on_a_form_url_still_answer_405(
    nodegroup: NksNodegroup, operator_client: Client
) -> None:
    assert operator_client.put(f"{page_url(nodegroup)}resize/").status_code == 405


def test_a_double_submitted_resize_makes_one_request(
    nodegroup: NksNodegroup,
    operator_client: Client,
    django_capture_on_commit_callbacks: Any,
) -> None:
    form = {"node_count": "5", "reason": "double-click"}
    with django_capture_on_commit_callbacks() as callbacks:
        first = operator_client.post(f"{page_url(nodegroup)}resize/", form)
        second = operator_client.post(f"{page_url(nodegroup)}resize/", form, follow=True)
    created = ResizeRequest.objects.get()
    assert first.status_code == 302
    assert first["Location"] == f"/clusters/resizes/{created.pk}/"
    # The second answer (the one the browser shows) names the first and sent nothing.
    assert_refused_back_on_the_page(second)
    html = second.content.decode()
    assert f'href="/clusters/resizes/{created.pk}/"' in html
    assert "Nothing new was sent." in html
    assert len(callbacks) == 1


def test_a_refused_page_stops_naming_a_conflict_that_has_finished(
    nodegroup: NksNodegroup, operator_client: Client
) -> None:
    form = {"node_count": "5", "reason": "a"}
    operator_client.post(f"{page_url(nodegroup)}resize/", form)
    location = operator_client.post(f"{page_url(nodegroup)}resize/", form)["Location"]
    page = location
    assert "already in flight" in operator_client.get(page).content.decode()
    ResizeRequest.objects.update(state=ResizeState.SUCCEEDED)
    # A reload once the first resize is done: the form as typed, ready to send, no conflict.
    html = operator_client.get(page).content.decode()
    assert "already in flight" not in html and 'id="resize-errors"' not in html
    assert 'value="5"' in html


def test_the_progress_poll_answers_no_content_until_the_progress_changes(
    nodegroup: NksNodegroup, operator_client: Client
) -> None:
    # The progress box sits in a live region: the same words swapped in every 2 s would be
    # read out every 2 s, so an unchanged box answers 204, which htmx does not swap.
    operator_client.post(f"{page_url(nodegroup)}resize/", {"node_count": "5", "reason": "a"})
    html = operator_client.get(page_url(nodegroup)).content.decode()
    [poll] = re.findall(r'<section id="resize-progress" hx-get="([^"]*)"', html)

    def ask() -> Any:
        return operator_client.get(poll, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="resize-progress")

    unchanged = ask()
    assert unchanged.status_code == 204 and unchanged.content == b""
    ResizeRequest.objects.update(state=ResizeState.SUBMITTED)
    changed = ask()
    assert changed.status_code == 200
    box = changed.content.decode()
    assert 'data-resize-state="submitted"' in box
    # The new box asks with its own version: unchanged again from here.
    [next_poll] = re.findall(r'hx-get="([^"]*)"', box)
    assert next_poll != poll
    assert (
        operator_client.get(
            next_poll, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="resize-progress"
        ).status_code
        == 204
    )
