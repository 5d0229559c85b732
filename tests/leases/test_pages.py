from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from dashboard.models import ApiToken
from tests.leases.factories import (
    KUBECONFIG_SECRET,
    NOW,
    known_until,
    make_candidate,
    make_cluster,
    make_lease,
    make_many_leases,
    make_transition,
)

pytestmark = pytest.mark.django_db

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def engineer(django_user_model):  # type: ignore[no-untyped-def]
    # No password: hashing one costs a second per test, and force_login needs none.
    return django_user_model.objects.create_user("erin")


def page(client: Client, url: str, **headers: str) -> str:
    response = client.get(url, **headers)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def rows(text: str) -> list[str]:
    """The lease names in the table, in order."""
    body = text.split('<table class="table compact leases">', 1)[1].split("</table>", 1)[0]
    return re.findall(r'<td><a href="/leases/[^"]+">([^<]+)</a></td>', body)


def links(text: str, rel: str) -> list[str]:
    return [html.unescape(href) for href in re.findall(rf'<a href="([^"]+)"[^>]*rel="{rel}"', text)]


# --- The Leases page -------------------------------------------------------------------------


def test_leases_page_without_clusters_says_how_to_add_one(engineer_client: Client) -> None:
    text = page(engineer_client, "/leases/")

    assert 'class="card empty"' in text
    assert "python manage.py add_kube_cluster NAME --kubeconfig FILE [--context CTX]" in text
    assert "python manage.py add_kube_cluster NAME --in-cluster" in text


def test_table_lists_each_lease_with_class_holder_ages_and_state(engineer_client: Client) -> None:
    cluster = make_cluster()
    make_lease(cluster, "kube-scheduler", holder="master-0_6f1c", renewed_ago=3, duration=15)
    make_lease(cluster, "node-7", namespace="kube-node-lease", holder="node-7", renewed_ago=50,
               duration=40)  # fmt: skip
    make_lease(cluster, "my-operator-leader", namespace="ops", holder="")

    text = page(engineer_client, "/leases/")

    # Default order: cluster, namespace, name.
    assert rows(text) == ["node-7", "kube-scheduler", "my-operator-leader"]
    scheduler = text.split(">kube-scheduler</a>", 1)[1].split("</tr>", 1)[0]
    assert "control plane" in scheduler
    assert "master-0_6f1c" in scheduler
    assert 'data-age-from="2026-11-29T07:59:57.000Z">3 s ago</time>' in scheduler
    assert 'data-expires-at="2026-11-29T08:00:12.000Z">in 12 s</time>' in scheduler
    assert "data-state-pill>held</span>" in scheduler
    node = text.split(">node-7</a>", 1)[1].split("</tr>", 1)[0]
    assert "node heartbeat" in node and "expired for 10 s" in node
    assert '<tr class="row-bad" data-state="expired">' in text
    assert '<tr class="row-quiet" data-state="released">' in text


def test_table_marks_expiry_when_the_clock_passes_it(engineer_client: Client) -> None:
    cluster = make_cluster()
    make_lease(cluster, "kube-scheduler", renewed_ago=5, duration=15)

    assert 'data-state="held"' in page(engineer_client, "/leases/")
    with time_machine.travel(NOW + timedelta(seconds=12), tick=False):
        known_until(cluster, timezone.now())  # the watcher vouches for its data up to now
        text = page(engineer_client, "/leases/")
    assert '<tr class="row-bad" data-state="expired">' in text
    assert "expired for 2 s" in text


def test_table_never_calls_a_lease_expired_from_data_older_than_its_expiry(
    engineer_client: Client,
) -> None:
    cluster = make_cluster()
    make_lease(cluster, "kube-scheduler", renewed_ago=5, duration=15)
    with time_machine.travel(NOW + timedelta(seconds=40), tick=False):
        # The API server froze at NOW: the data is 41 s old, and the renewals it would have
        # shown are not known.
        text = page(engineer_client, "/leases/")
    table = text.split('id="lease-table"', 1)[1]
    assert 'data-state="unknown"' in table and 'data-state="expired"' not in table
    assert "expired for" not in table
    assert "Data from cluster prod is 41 s old" in text


def test_filters_by_cluster_namespace_class_state_and_text(engineer_client: Client) -> None:
    prod, staging = make_cluster("prod"), make_cluster("staging")
    make_lease(prod, "kube-scheduler", holder="master-0")
    make_lease(prod, "kube-controller-manager", holder="master-1", renewed_ago=60)
    make_lease(prod, "node-1", namespace="kube-node-lease", holder="node-1")
    make_lease(staging, "kube-scheduler", holder="stage-master")
    make_lease(prod, "op-leader", namespace="ops", holder="")

    assert rows(page(engineer_client, "/leases/?cluster=staging")) == ["kube-scheduler"]
    assert rows(page(engineer_client, "/leases/?cluster=prod&namespace=ops")) == ["op-leader"]
    assert rows(page(engineer_client, "/leases/?class=node_heartbeat")) == ["node-1"]
    assert rows(page(engineer_client, "/leases/?state=expired")) == ["kube-controller-manager"]
    assert rows(page(engineer_client, "/leases/?state=released")) == ["op-leader"]
    assert rows(page(engineer_client, "/leases/?cluster=prod&q=MASTER")) == [
        "kube-controller-manager",
        "kube-scheduler",
    ]
    assert rows(page(engineer_client, "/leases/?q=node-")) == ["node-1"]
    assert rows(page(engineer_client, "/leases/?cluster=nowhere")) == []
    assert "No lease matches these filters" in page(engineer_client, "/leases/?cluster=nowhere")


def test_filter_form_shows_the_current_filters(engineer_client: Client) -> None:
    make_lease(make_cluster(), "kube-scheduler")

    text = page(engineer_client, "/leases/?cluster=prod&class=control_plane&q=sched&flapping=true")

    assert '<option value="prod" selected>prod</option>' in text
    assert '<option value="control_plane" selected>' in text
    assert 'name="q" value="sched"' in text
    assert 'name="flapping" value="true" checked' in text
    assert '<form id="lease-filters" class="filters card" method="get" action="/leases/"' in text


def test_invalid_filter_is_reported_and_the_rest_still_applies(engineer_client: Client) -> None:
    cluster = make_cluster()
    make_lease(cluster, "kube-scheduler")
    make_lease(cluster, "node-1", namespace="kube-node-lease")

    text = page(engineer_client, "/leases/?class=bogus&namespace=kube-system&after=garbage")

    assert "Some filters were not understood" in text
    assert "<code>class</code>" in text and "<code>after</code>" in text
    assert rows(text) == ["kube-scheduler"]


def test_sort_links_toggle_direction_and_keep_the_filters(engineer_client: Client) -> None:
    cluster = make_cluster()
    make_lease(cluster, "a-old", renewed_ago=9)
    make_lease(cluster, "b-new", renewed_ago=1)
    make_lease(cluster, "c-mid", renewed_ago=5)

    text = page(engineer_client, "/leases/?namespace=kube-system&sort=renewed")

    assert rows(text) == ["a-old", "c-mid", "b-new"]
    header = re.search(r'<th aria-sort="ascending"><a href="([^"]+)"', text)
    assert header is not None
    toggled = html.unescape(header.group(1))
    assert parse_qs(urlsplit(toggled).query) == {"namespace": ["kube-system"], "sort": ["-renewed"]}
    assert rows(page(engineer_client, toggled)) == ["b-new", "c-mid", "a-old"]
    name_link = html.unescape(re.search(r'<a href="([^"]*sort=name)"', text).group(1))
    assert parse_qs(urlsplit(name_link).query) == {"namespace": ["kube-system"], "sort": ["name"]}
    # The filter form sends the current order along with new filters.
    assert '<input type="hidden" name="sort" value="renewed" form="lease-filters">' in text


def test_unknown_sort_key_is_refused(engineer_client: Client) -> None:
    make_lease(make_cluster(), "kube-scheduler")

    text = page(engineer_client, "/leases/?sort=holder;drop table")

    assert "<code>sort</code>" in text
    assert rows(text) == ["kube-scheduler"]


def test_pages_follow_next_and_previous_links_and_keep_filters(engineer_client: Client) -> None:
    cluster = make_cluster()
    make_many_leases(cluster, 230)
    make_lease(cluster, "kube-scheduler")  # filtered out by the namespace

    first = page(engineer_client, "/leases/?namespace=kube-node-lease&sort=-name")
    assert len(rows(first)) == 100 and rows(first)[0] == "node-0229"
    assert links(first, "prev") == []
    (next_url,) = links(first, "next")
    query = parse_qs(urlsplit(next_url).query)
    assert query["namespace"] == ["kube-node-lease"] and query["sort"] == ["-name"]

    second = page(engineer_client, next_url)
    assert rows(second)[0] == "node-0129"
    (third_url,) = links(second, "next")
    third = page(engineer_client, third_url)
    assert rows(third) == [f"node-{index:04d}" for index in range(29, -1, -1)]
    assert links(third, "next") == []
    walked = rows(first) + rows(second) + rows(third)
    assert sorted(walked) == [f"node-{index:04d}" for index in range(230)]

    (back_url,) = links(third, "prev")
    assert rows(page(engineer_client, back_url)) == rows(second)
    assert "« First" in second


def test_htmx_refresh_returns_only_the_table_region(engineer_client: Client) -> None:
    make_lease(make_cluster(), "kube-scheduler")

    response = engineer_client.get(
        "/leases/?namespace=kube-system", HTTP_HX_TARGET="lease-table", **HTMX
    )

    text = response.content.decode()
    assert text.lstrip().startswith('<section id="lease-table"')
    assert "<html" not in text and 'id="lease-filters"' not in text
    assert rows(text) == ["kube-scheduler"]
    assert 'hx-get="/leases/?namespace=kube-system"' in text
    assert "HX-Request, HX-Target" in response["Vary"]


def test_table_region_refreshes_every_few_seconds_unless_paused(engineer_client: Client) -> None:
    make_lease(make_cluster(), "kube-scheduler")

    text = page(engineer_client, "/leases/?state=held")

    assert (
        '<section id="lease-table" class="card" hx-get="/leases/?state=held" '
        'hx-trigger="every 5s" hx-swap="outerHTML"'
    ) in text
    assert 'data-refresh-toggle="lease-table"' in text
    assert '<script src="/static/js/dashboard.js" defer></script>' in text
    # Every hx-get link also works without JavaScript.
    for tag in re.findall(r"<a [^>]*hx-get=[^>]*>", text):
        assert re.search(r'href="([^"]+)"[^>]*hx-get="\1"', tag), tag


def test_flapping_lease_stands_out(engineer_client: Client) -> None:
    lease = make_lease(make_cluster(), "kube-controller-manager")
    for seconds_ago in (400, 200, 30):
        make_transition(lease, "a", "b", seconds_ago=seconds_ago)

    text = page(engineer_client, "/leases/")

    assert '<tr class="row-warn" data-state="held">' in text
    assert 'title="3 holder changes in the last 10 min">flapping</span>' in text
    assert rows(page(engineer_client, "/leases/?flapping=true")) == ["kube-controller-manager"]


def test_deleted_leases_are_hidden_unless_asked_for(engineer_client: Client) -> None:
    cluster = make_cluster()
    make_lease(cluster, "kube-scheduler")
    make_lease(cluster, "old-leader", deleted_at=NOW - timedelta(hours=1))

    assert rows(page(engineer_client, "/leases/")) == ["kube-scheduler"]
    text = page(engineer_client, "/leases/?deleted=true")
    assert rows(text) == ["kube-scheduler", "old-leader"]
    assert '<span class="pill pill-quiet">deleted</span>' in text


def test_stale_watcher_banner_says_how_old_the_data_is_and_why(engineer_client: Client) -> None:
    make_lease(make_cluster("prod", fresh=False), "kube-scheduler")
    make_cluster("staging")
    banner = (
        "Data from cluster prod is 70 s old — its watcher is not connected: "
        "connection refused by 10.0.0.1:6443"
    )

    for url in ("/leases/", "/", "/leases/clusters/", "/leases/prod/kube-system/kube-scheduler/"):
        assert banner in page(engineer_client, url), url
    table = page(engineer_client, "/leases/", HTTP_HX_TARGET="lease-table", **HTMX)
    assert banner in table
    assert "staging" not in table.split("Watchers:", 1)[0]
    assert 'watcher is not live: the row is as last seen">stale</span>' in table


def test_the_stale_banner_comes_before_what_is_firing_on_the_overview_and_the_alerts_list(
    engineer_client: Client,
) -> None:
    make_cluster("prod", fresh=False)
    banner = "Data from cluster prod is 70 s old"
    overview = page(engineer_client, "/")
    assert overview.index(banner) < overview.index('id="firing"')
    alerts = page(engineer_client, "/alerts/")
    assert alerts.index(banner) < alerts.index('id="incidents"')
    region = page(engineer_client, "/alerts/", HTTP_HX_TARGET="stale-data", **HTMX)
    assert banner in region and 'id="incidents"' not in region


def test_connected_watcher_that_stopped_writing_is_stale_too(engineer_client: Client) -> None:
    make_cluster("prod", connected=True, last_flush_at=NOW - timedelta(seconds=45))

    text = page(engineer_client, "/leases/")

    assert (
        "Data from cluster prod is 45 s old — its watch is open, but the API server has not "
        "confirmed anything since"
    ) in text


def test_disabled_cluster_is_shown_as_not_watched(engineer_client: Client) -> None:
    make_cluster("prod", enabled=False, fresh=False)

    text = page(engineer_client, "/leases/")

    assert "Cluster prod is disabled: its leases are not watched" in text


def test_fresh_watcher_shows_no_banner(engineer_client: Client) -> None:
    make_lease(make_cluster("prod"), "kube-scheduler")

    text = page(engineer_client, "/leases/")

    assert 'role="alert"' not in text
    assert '<span class="pill pill-ok">live</span>' in text


# --- Untrusted text --------------------------------------------------------------------------

SCRIPT_HOLDER = '<script>alert("holder")</script>'
SCRIPT_NAME = "<img src=x onerror=alert(1)>"


def test_script_in_holder_and_name_is_escaped_on_every_page(engineer_client: Client) -> None:
    cluster = make_cluster()
    lease = make_lease(
        cluster,
        SCRIPT_NAME,
        namespace="ops",
        holder=SCRIPT_HOLDER,
        labels={"team": "<b>x</b>"},
        renewed_ago=300,
    )
    make_transition(lease, SCRIPT_HOLDER, "b", seconds_ago=20)
    make_transition(lease, "b", SCRIPT_HOLDER, seconds_ago=10)
    make_transition(lease, SCRIPT_HOLDER, SCRIPT_HOLDER, seconds_ago=5)
    make_candidate(lease, "<script>candidate</script>")
    detail = "/leases/prod/ops/%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E/"

    pages = ["/leases/", "/", detail, "/leases/?q=%3Cscript"]
    for url in pages:
        text = page(engineer_client, url)
        assert "<script>alert" not in text, url
        assert "<img src=x" not in text, url
        assert "&lt;script&gt;alert(&quot;holder&quot;)&lt;/script&gt;" in text, url
    text = page(engineer_client, detail)
    assert "&lt;script&gt;candidate&lt;/script&gt;" in text
    assert "&lt;b&gt;x&lt;/b&gt;" in text
    assert "<b>x</b>" not in text


def test_ten_kilobyte_holder_is_truncated_in_the_table(engineer_client: Client) -> None:
    holder = "h" * 10_000
    make_lease(make_cluster(), "kube-scheduler", holder=holder)

    text = page(engineer_client, "/leases/")

    cell = re.search(r'<td class="truncate" title="(h+…)">(h+…)</td>', text)
    assert cell is not None
    assert len(cell.group(2)) == 60
    assert len(cell.group(1)) == 1024
    assert holder not in text
    assert holder in page(engineer_client, "/leases/prod/kube-system/kube-scheduler/")


# --- One lease -------------------------------------------------------------------------------


def test_lease_page_shows_spec_fields_in_utc_and_the_time_zone(
    engineer_client: Client, settings
) -> None:  # type: ignore[no-untyped-def]
    settings.TIME_ZONE = "Asia/Seoul"
    make_lease(
        make_cluster(),
        "kube-scheduler",
        holder="master-0",
        renewed_ago=3,
        duration=15,
        renew_time=NOW - timedelta(seconds=3, microseconds=-123456),
        strategy="OldestEmulationVersion",
        preferred_holder="master-1",
        lease_transitions=7,
    )

    text = page(engineer_client, "/leases/prod/kube-system/kube-scheduler/")

    assert "2026-11-29T07:59:57.123456Z" in text
    assert "2026-11-29 16:59:57.123456 KST" in text
    assert 'data-expires-at="2026-11-29T08:00:12.000Z">in 12 s</time>' in text
    for value in ("master-0", "15 s", "OldestEmulationVersion", "master-1", "control plane"):
        assert value in text
    assert "<td>7</td>" in text
    assert "data-state-pill>held</span>" in text
    assert "&quot;holderIdentity&quot;" not in text  # the object itself is not kept


def test_lease_page_timeline_with_missed_changes(engineer_client: Client) -> None:
    lease = make_lease(make_cluster(), "kube-controller-manager", holder="master-2")
    make_transition(lease, "master-0", "master-1", seconds_ago=900, lease_transitions=4)
    make_transition(lease, "master-1", "master-2", seconds_ago=120, missed=2, lease_transitions=7)

    text = page(engineer_client, "/leases/prod/kube-system/kube-controller-manager/")

    timeline = text.split('<table class="table compact timeline">', 1)[1].split("</table>", 1)[0]
    assert re.findall(r"<code>(master-\d)</code>", timeline) == ["master-0", "master-1", "master-2"]
    assert "not seen (before the first recorded change)" in timeline
    assert "2026-11-29T07:45:00Z" in timeline and "13 min" in timeline
    assert "2 holder changes happened while the dashboard was not watching" in timeline
    assert timeline.index("not watching") < timeline.index("master-2")
    assert "since <time" in timeline
    assert 'data-suffix=" so far">2 min so far</time>' in timeline
    assert "2 holder changes were not seen as they happened" in text


def test_lease_page_lists_candidates_and_whether_they_are_alive(engineer_client: Client) -> None:
    cluster = make_cluster()
    lease = make_lease(cluster, "kube-scheduler")
    other = make_lease(cluster, "kube-controller-manager")
    make_candidate(lease, "master-0-scheduler", renewed_ago=5)
    make_candidate(lease, "master-1-scheduler", renewed_ago=300, emulation_version="1.32")
    make_candidate(other, "master-0-kcm")

    text = page(engineer_client, "/leases/prod/kube-system/kube-scheduler/")

    candidates = text.split("<h2>Candidates</h2>", 1)[1].split("</section>", 1)[0]
    assert "master-0-scheduler" in candidates and "master-1-scheduler" in candidates
    assert "master-0-kcm" not in candidates
    assert (
        "1.33.1" in candidates and "1.32" in candidates and "OldestEmulationVersion" in candidates
    )
    alive = candidates.split("master-0-scheduler", 1)[1].split("</tr>", 1)[0]
    dead = candidates.split("master-1-scheduler", 1)[1].split("</tr>", 1)[0]
    assert '<span class="pill pill-ok">alive</span>' in alive
    assert "not renewing" in dead and "5 min ago" in dead


def test_deleted_lease_page_says_so_and_keeps_its_history(engineer_client: Client) -> None:
    lease = make_lease(
        make_cluster(), "old-leader", namespace="ops", deleted_at=NOW - timedelta(hours=2)
    )
    make_transition(lease, "a", "b", seconds_ago=86_400)

    text = page(engineer_client, "/leases/prod/ops/old-leader/")

    assert "This lease was deleted from the cluster at 2026-11-29T06:00:00Z (2 h ago)" in text
    assert "<code>b</code>" in text


def test_unknown_lease_is_404(engineer_client: Client) -> None:
    make_lease(make_cluster(), "kube-scheduler")

    assert engineer_client.get("/leases/prod/kube-system/nope/").status_code == 404
    assert engineer_client.get("/leases/other/kube-system/kube-scheduler/").status_code == 404


def test_lease_page_refreshes_its_region(engineer_client: Client) -> None:
    make_lease(make_cluster(), "kube-scheduler")

    text = page(
        engineer_client,
        "/leases/prod/kube-system/kube-scheduler/",
        HTTP_HX_TARGET="lease-detail",
        **HTMX,
    )

    assert text.lstrip().startswith('<div id="lease-detail"')
    assert "<html" not in text


# --- Watchers and secrets --------------------------------------------------------------------


def test_clusters_page_shows_each_watchers_status(engineer_client: Client) -> None:
    make_cluster("prod")
    make_cluster("staging", fresh=False)

    text = page(engineer_client, "/leases/clusters/")

    prod = text.split(">prod</a>", 1)[1].split("</tr>", 1)[0]
    staging = text.split(">staging</a>", 1)[1].split("</tr>", 1)[0]
    assert '<span class="pill pill-ok">connected</span>' in prod
    for value in ("12345", "42.5", "1000", "0.25 s", "1 s ago"):
        assert value in prod
    assert "stale" in staging and "not connected" in staging
    assert "connection refused by 10.0.0.1:6443" in staging


def test_kubeconfig_never_appears_on_any_page_or_api_response(
    engineer_client: Client, engineer
) -> None:  # type: ignore[no-untyped-def]
    cluster = make_cluster("prod", fresh=False, last_error="watch failed")
    make_lease(cluster, "kube-scheduler")
    _, token = ApiToken.issue(engineer)
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    secret = KUBECONFIG_SECRET.split(": ")[1]

    responses = [
        engineer_client.get(url)
        for url in (
            "/",
            "/leases/",
            "/leases/clusters/",
            "/leases/prod/kube-system/kube-scheduler/",
        )
    ]
    responses += [
        engineer_client.get("/", HTTP_HX_TARGET="lease-overview", **HTMX),
        engineer_client.get("/leases/", HTTP_HX_TARGET="lease-table", **HTMX),
        engineer_client.get("/leases/clusters/", HTTP_HX_TARGET="watchers", **HTMX),
        engineer_client.get("/api/v1/leases", **bearer),
        engineer_client.get("/api/v1/leases/prod/kube-system/kube-scheduler", **bearer),
        engineer_client.get("/metrics"),
    ]
    for response in responses:
        assert response.status_code == 200
        assert secret not in response.content.decode()
        assert "kubeconfig:" not in response.content.decode()


# --- Overview --------------------------------------------------------------------------------


def test_overview_without_clusters_says_how_to_add_one(engineer_client: Client) -> None:
    text = page(engineer_client, "/")

    assert "python manage.py add_kube_cluster NAME --kubeconfig FILE [--context CTX]" in text
    assert 'id="workers"' in text


def test_overview_shows_each_clusters_leases_at_a_glance(engineer_client: Client) -> None:
    cluster = make_cluster()
    make_lease(cluster, "kube-scheduler")
    make_lease(cluster, "kube-controller-manager", renewed_ago=8, duration=15)  # 7 s left
    make_lease(cluster, "node-3", namespace="kube-node-lease", renewed_ago=90, duration=40)
    make_lease(cluster, "op-leader", namespace="ops", holder="")
    flapper = make_lease(cluster, "flappy-leader", namespace="ops")
    for seconds_ago in (300, 200, 100):
        make_transition(flapper, "x", "y", seconds_ago=seconds_ago)
    make_transition(flapper, "y", "x", seconds_ago=50, missed=4)

    text = page(engineer_client, "/")

    assert re.search(r"<dt>held</dt><dd><a href=\"[^\"]+\">3</a>", text)
    assert re.search(r"<dt>expired</dt><dd><a href=\"[^\"]+\">1</a>", text)
    assert re.search(r"<dt>released</dt><dd><a href=\"[^\"]+\">1</a>", text)
    assert re.search(r"<dt>expiring within 10 s</dt><dd><a href=\"[^\"]+\">1</a>", text)
    assert re.search(r"<dt>node heartbeats expired</dt><dd><a href=\"([^\"]+)\">1</a>", text)
    assert 'href="/leases/prod/kube-node-lease/node-3/">node-3</a>' in text
    assert "expired for 50 s" in text
    assert 'href="/leases/prod/kube-system/kube-controller-manager/">' in text
    assert 'data-expires-at="2026-11-29T08:00:07.000Z">in 7 s</time>' in text
    assert "4 changes in 10 min" in text
    changes = text.split("<h3>Last holder changes</h3>", 1)[1].split("</table>", 1)[0]
    assert changes.count('href="/leases/prod/ops/flappy-leader/"') == 4
    assert "+4 unseen" in changes
    assert '<span class="pill pill-ok">watcher live</span>' in text
    node_link = "/leases/?cluster=prod&amp;state=expired&amp;class=node_heartbeat"
    assert node_link in text


def test_overview_refreshes_the_lease_region_and_keeps_the_workers_region(
    engineer_client: Client,
) -> None:
    make_lease(make_cluster(), "kube-scheduler")

    leases = page(engineer_client, "/", HTTP_HX_TARGET="lease-overview", **HTMX)
    workers = page(engineer_client, "/", HTTP_HX_TARGET="workers", **HTMX)

    assert leases.lstrip().startswith('<section id="lease-overview"')
    assert 'hx-trigger="every 5s"' in leases
    assert 'id="workers"' not in leases
    assert workers.lstrip().startswith('<section id="workers"')
    assert "kube-scheduler" not in workers


def test_the_table_region_is_shared_for_a_second_but_login_is_still_checked(
    engineer_client,
    client,
    settings,  # type: ignore[no-untyped-def]
) -> None:
    from django.core.cache import cache

    cache.clear()
    settings.LEASE_TABLE_CACHE_SECONDS = 1
    cluster = make_cluster("shared")
    make_lease(cluster, "kube-scheduler", holder="first-holder")
    headers = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "lease-table"}
    url = "/leases/?q=kube-scheduler"
    assert "first-holder" in engineer_client.get(url, **headers).content.decode()
    cluster.leases.filter(name="kube-scheduler").update(holder="second-holder")
    assert "first-holder" in engineer_client.get(url, **headers).content.decode()
    anonymous = Client().get(url, **headers)
    assert anonymous.status_code == 302, "anonymous requests never see it"
    cache.clear()
    assert "second-holder" in engineer_client.get(url, **headers).content.decode()


def test_lease_page_says_why_no_candidates_are_listed(engineer_client: Client) -> None:
    forbidden = make_cluster()
    forbidden.candidates_problem = "forbidden"
    forbidden.save(update_fields=["candidates_problem"])
    make_lease(forbidden, "kube-scheduler")

    text = page(engineer_client, "/leases/prod/kube-system/kube-scheduler/")

    candidates = text.split("<h2>Candidates</h2>", 1)[1].split("</section>", 1)[0]
    assert "LeaseCandidates: forbidden" in candidates
    assert "grant get, list and watch on leasecandidates" in candidates
    assert "does not serve" not in candidates
