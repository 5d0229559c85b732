"""The resize form's errors and hints, for keyboard and screen reader users: a focused error
summary linking each field, fields described by their hints and errors, the nodes to remove as a
named group, and resize progress in a polite live region."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

import pytest
from django.test import Client

from fakes.nks import FakeNks
from nks.models import NksAccount, NksNodegroup
from tests.nks.nodes import nodes_like_the_fake
from tests.nks.refusals import assert_refused_back_on_the_page

pytestmark = pytest.mark.django_db

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    parents: list[Element]
    text: list[str] = field(default_factory=list)

    def inside(self, element_id: str) -> bool:
        return any(parent.attrs.get("id") == element_id for parent in self.parents)


class Page(HTMLParser):
    """Every element with its attributes, its ancestors and the text within it."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.elements: list[Element] = []
        self._open: list[Element] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs}, list(self._open))
        self.elements.append(element)
        if tag not in VOID:
            self._open.append(element)

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i].tag == tag:
                del self._open[i:]
                break

    def handle_data(self, data: str) -> None:
        for element in self._open:
            element.text.append(data)

    def by_id(self, element_id: str) -> Element:
        [element] = [e for e in self.elements if e.attrs.get("id") == element_id]
        return element

    def text_of(self, element_id: str) -> str:
        return " ".join("".join(self.by_id(element_id).text).split())


def page_url(nodegroup: NksNodegroup) -> str:
    return f"/clusters/{nodegroup.cluster.uuid}/nodegroups/{nodegroup.name}/"


@pytest.fixture
def nodegroup(polled: NksAccount, fake_nks: FakeNks) -> NksNodegroup:
    nodes_like_the_fake(fake_nks, "prod-api")
    return NksNodegroup.objects.select_related("cluster").get(
        cluster__name="prod-api", name="default-worker"
    )


def refused(client: Client, nodegroup: NksNodegroup, data: dict[str, str]) -> Page:
    response = client.post(f"{page_url(nodegroup)}resize/", data, follow=True)
    assert_refused_back_on_the_page(response)
    return Page(response.content.decode())


def test_the_error_summary_is_focused_and_links_each_error_to_its_field(
    nodegroup: NksNodegroup, operator_client: Client
) -> None:
    # Scaling in from 3 to 2 without choosing a node or typing the name: two field errors.
    page = refused(operator_client, nodegroup, {"node_count": "2", "reason": "x"})
    summary = page.by_id("resize-errors")
    assert summary.attrs["role"] == "alert"
    assert summary.attrs["tabindex"] == "-1" and "autofocus" in summary.attrs
    assert summary.attrs["aria-labelledby"] == "resize-errors-title"
    assert page.text_of("resize-errors-title") == "The resize was not sent."
    links = {
        e.attrs["href"]: "".join(e.text)
        for e in page.elements
        if e.tag == "a" and e.inside("resize-errors")
    }
    assert set(links) == {"#id_nodes_to_remove_0", "#id_confirm_name"}
    assert "choose exactly 1" in links["#id_nodes_to_remove_0"]
    assert "type default-worker exactly" in links["#id_confirm_name"]
    # Each link's target exists: a link that lands nowhere helps no one.
    for href in links:
        page.by_id(href.removeprefix("#"))
    # The summary comes before the form it summarises.
    ids = [e.attrs.get("id") for e in page.elements]
    assert ids.index("resize-errors") < ids.index("id_node_count")


def test_a_number_error_links_to_the_number_field(
    nodegroup: NksNodegroup, operator_client: Client
) -> None:
    page = refused(operator_client, nodegroup, {"node_count": "99", "reason": "x"})
    links = [e.attrs["href"] for e in page.elements if e.tag == "a" and e.inside("resize-errors")]
    assert links == ["#id_node_count"]


def test_a_form_wide_error_is_listed_without_a_link(
    nodegroup: NksNodegroup, operator_client: Client
) -> None:
    NksNodegroup.objects.filter(pk=nodegroup.pk).update(autoscaler_enabled=True)
    page = refused(operator_client, nodegroup, {"node_count": "5", "reason": "x"})
    assert "cluster autoscaler is enabled" in page.text_of("resize-errors")
    assert not [e for e in page.elements if e.tag == "a" and e.inside("resize-errors")]


def test_invalid_fields_are_marked_and_described_by_their_hint_and_error(
    nodegroup: NksNodegroup, operator_client: Client
) -> None:
    page = refused(operator_client, nodegroup, {"node_count": "99", "reason": ""})
    count = page.by_id("id_node_count")
    assert count.attrs["aria-invalid"] == "true"
    assert count.attrs["aria-describedby"] == "id_node_count_hint id_node_count_error"
    assert page.text_of("id_node_count_hint").startswith("now 3; 1 to 10")
    assert "less than or equal to 10" in page.text_of("id_node_count_error")
    reason = page.by_id("id_reason")
    assert reason.attrs["aria-invalid"] == "true"
    assert reason.attrs["aria-describedby"] == "id_reason_error"
    confirm = page.by_id("id_confirm_name")
    assert "aria-invalid" not in confirm.attrs


def test_a_fresh_form_has_hints_but_no_error_marks(
    nodegroup: NksNodegroup, operator_client: Client
) -> None:
    page = Page(operator_client.get(page_url(nodegroup)).content.decode())
    count = page.by_id("id_node_count")
    assert count.attrs["aria-describedby"] == "id_node_count_hint"
    assert "aria-invalid" not in count.attrs
    assert not [e for e in page.elements if e.attrs.get("id") == "resize-errors"]


def test_nodes_to_remove_are_a_fieldset_named_by_its_legend_and_described(
    nodegroup: NksNodegroup, operator_client: Client
) -> None:
    page = refused(operator_client, nodegroup, {"node_count": "2", "reason": "x"})
    group = page.by_id("nodes-to-remove")
    assert group.tag == "fieldset"
    [legend] = [e for e in page.elements if e.tag == "legend" and e.inside("nodes-to-remove")]
    assert "".join(legend.text).split()[:3] == ["Nodes", "to", "remove"]
    assert group.attrs["aria-describedby"] == "id_nodes_to_remove_helptext id_nodes_to_remove_error"
    assert "choose exactly the nodes to remove" in page.text_of("id_nodes_to_remove_helptext")
    assert "choose exactly 1" in page.text_of("id_nodes_to_remove_error")
    boxes = [
        e
        for e in page.elements
        if e.attrs.get("type") == "checkbox" and e.inside("nodes-to-remove")
    ]
    assert boxes and all(box.attrs.get("aria-invalid") == "true" for box in boxes)
    # No label is left tied to nothing.
    for label in (e for e in page.elements if e.tag == "label" and e.inside("resize")):
        target = label.attrs.get("for")
        assert target is None or page.by_id(target), target


def test_an_unwatched_cluster_describes_the_group_by_its_note(
    polled: NksAccount, operator_client: Client
) -> None:
    nodegroup = NksNodegroup.objects.select_related("cluster").get(
        cluster__name="prod-api", name="default-worker"
    )
    page = Page(operator_client.get(page_url(nodegroup)).content.decode())
    group = page.by_id("nodes-to-remove")
    assert group.attrs["aria-describedby"] == "id_nodes_to_remove_unwatched"
    assert "This cluster is not watched" in page.text_of("id_nodes_to_remove_unwatched")


def test_resize_progress_sits_in_a_polite_live_region(
    nodegroup: NksNodegroup, operator_client: Client
) -> None:
    operator_client.post(f"{page_url(nodegroup)}resize/", {"node_count": "5", "reason": "a"})
    page = Page(operator_client.get(page_url(nodegroup)).content.decode())
    progress = page.by_id("resize-progress")
    [live] = [p for p in progress.parents if p.attrs.get("aria-live")]
    assert live.attrs["aria-live"] == "polite"
    # The live region itself is never swapped out (the progress box inside it is).
    assert "id" not in live.attrs and "hx-get" not in live.attrs
    assert "queued" in page.text_of("resize-progress").lower()


def korean_refusal(client: Client, nodegroup: NksNodegroup) -> Page:
    client.cookies["django_language"] = "ko"
    response = client.post(
        f"{page_url(nodegroup)}resize/",
        {"node_count": "99", "reason": "x"},
        HTTP_ACCEPT_LANGUAGE="ko",
        follow=True,
    )
    assert_refused_back_on_the_page(response)
    return Page(response.content.decode())


def test_the_error_summary_links_read_in_korean(
    nodegroup: NksNodegroup, operator_client: Client
) -> None:
    page = korean_refusal(operator_client, nodegroup)
    [link] = [e for e in page.elements if e.tag == "a" and e.inside("resize-errors")]
    assert link.attrs["href"] == "#id_node_count"
    assert "".join(link.text) == "10 이하의 값을 입력해 주세요."
    [legend] = [e for e in page.elements if e.tag == "legend" and e.inside("nodes-to-remove")]
    assert " ".join("".join(legend.text).split()) == "삭제할 노드 (스케일 인 시)"


def test_the_error_summary_title_reads_in_korean(
    nodegroup: NksNodegroup, operator_client: Client
) -> None:
    page = korean_refusal(operator_client, nodegroup)
    assert page.text_of("resize-errors-title") == "크기 조정 요청을 보내지 않았습니다."
