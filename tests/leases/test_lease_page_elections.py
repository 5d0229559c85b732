"""The lease page of an election: who really leads, the availability strip and figures,
fencing anomalies and foreign writers, on scripted histories with the clock frozen."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.test import Client

from leases.models import (
    KubeCluster,
    Lease,
    LeaseHolderSpan,
    LeaseLibrary,
    LeaseTransition,
    WatchCoverage,
)
from tests.leases.factories import NOW, make_cluster, make_lease, make_transition

pytestmark = pytest.mark.django_db

TOKEN_A = "b4k-" + "A" * 22
TOKEN_B = "b4k-" + "B" * 22
HOSTILE = '<script>alert("node")</script>'
URL = "/leases/prod/apps/billing-slot-1/"


@pytest.fixture(autouse=True)
def frozen_clock() -> Iterator[None]:
    with time_machine.travel(NOW, tick=False):
        yield


def ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)


def page(client: Client, url: str = URL) -> str:
    response = client.get(url)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


@pytest.fixture
def cluster() -> KubeCluster:
    cluster = make_cluster()
    WatchCoverage.objects.create(cluster=cluster, started_at=ago(2 * 1440), last_seen_at=ago(0))
    return cluster


def slot_lease(cluster: KubeCluster, **fields: Any) -> Lease:
    values: dict[str, Any] = {
        "holder": TOKEN_B,
        "library": LeaseLibrary.LEADER_K8S,
        "identity": "worker-7 / audit-7",
        "token": TOKEN_B,
        "group_name": "billing",
        "group_slot": 1,
        "created_at": ago(300),
    }
    values.update(fields)
    return make_lease(cluster, "billing-slot-1", namespace="apps", **values)


def takeover(lease: Lease, *, fencing_reused: bool = False, to_holder: str = TOKEN_B) -> None:
    change = make_transition(lease, TOKEN_A, to_holder, seconds_ago=30 * 60)
    LeaseTransition.objects.filter(pk=change.pk).update(
        from_identity="worker-3", to_identity="worker-7 / audit-7", fencing_reused=fencing_reused
    )


def section(text: str, start: str, end: str = "</section>") -> str:
    return text.split(start, 1)[1].split(end, 1)[0]


def test_strip_shows_holders_gaps_and_unobserved_time_above_the_holder_table(
    engineer_client: Client,
) -> None:
    cluster = make_cluster()
    # A 10-minute outage while worker-3 held the lease (a gap it fell in would count nowhere).
    WatchCoverage.objects.create(cluster=cluster, started_at=ago(600), last_seen_at=ago(200))
    WatchCoverage.objects.create(cluster=cluster, started_at=ago(190), last_seen_at=ago(0))
    lease = slot_lease(cluster)
    LeaseHolderSpan.objects.create(
        lease=lease, holder=TOKEN_A, identity="worker-3", started_at=ago(300), ended_at=ago(100)
    )
    LeaseHolderSpan.objects.create(
        lease=lease, holder=TOKEN_B, identity="worker-7 / audit-7", started_at=ago(30)
    )
    takeover(lease)

    text = page(engineer_client)

    assert text.index('class="strip lease-strip"') < text.index("<h2>Holders</h2>")
    strip = section(text, "<svg", "</svg>")
    kinds = re.findall(r'data-segment="(\w+)"', strip)
    # worker-3 before and after the outage, then worker-7; one gap; two unobserved stretches.
    assert (kinds.count("held"), kinds.count("gap"), kinds.count("unobserved")) == (3, 1, 2)
    assert 'class="tl-held tl-c0"' in strip and 'class="tl-held tl-c1"' in strip
    assert "worker-3 (" + TOKEN_A + ")" in strip
    # The window's first 19 hours, before the lease existed, and the 10-minute outage.
    assert strip.count('class="tl-unobserved"') == 2
    figures = section(text, '<table class="table compact availability">', "</table>")
    hour = section(figures, 'data-window="1h"', "</tr>")
    # 1 h: the outage (200..190 min ago) is outside it; leaderless from 60 to 30 min ago, and
    # worker-7 took over 70 min after worker-3 expired.
    assert "<strong>50.00 %</strong>" in hour
    assert re.findall(r"<td>([^<]*)</td>", hour) == ["60 min", "1", "30 min", "70 min"]
    day = section(figures, 'data-window="24h"', "</tr>")
    assert "4 h" in day  # observed: 5 hours of life less the 10-minute outage, coarsely


def test_takeover_median_and_no_gap_dash(engineer_client: Client, cluster: KubeCluster) -> None:
    lease = slot_lease(cluster)
    LeaseHolderSpan.objects.create(
        lease=lease, holder=TOKEN_A, started_at=ago(300), ended_at=ago(31)
    )
    LeaseHolderSpan.objects.create(lease=lease, holder=TOKEN_B, started_at=ago(30))

    hour = section(page(engineer_client), 'data-window="1h"', "</tr>")

    assert "<strong>98.33 %</strong>" in hour
    assert "60 s" in hour  # the takeover


def test_identity_is_the_holder_with_the_token_beside_it_muted(
    engineer_client: Client, cluster: KubeCluster
) -> None:
    takeover(slot_lease(cluster))

    text = page(engineer_client)

    leader = section(text, '<td class="wrap" data-identity>', "</td>")
    assert "worker-7 / audit-7" in leader
    assert f'<code class="muted" title="fencing token">{TOKEN_B}</code>' in leader
    assert "leader-k8s (bluetape4k)" in text
    history = section(text, '<table class="table compact timeline">', "</table>")
    assert "<code>worker-3</code>" in history
    assert f'<code class="muted" title="fencing token">{TOKEN_A}</code>' in history
    assert "<code>worker-7 / audit-7</code>" in history
    group = section(text, "data-group-link>", "</td>")
    assert group.startswith("billing</a>, slot 1")
    assert 'href="/leases/clusters/prod/groups/apps/billing/" data-group-link' in text


def test_fencing_reuse_is_marked_critical_in_the_history(
    engineer_client: Client, cluster: KubeCluster
) -> None:
    takeover(slot_lease(cluster, fencing_reused_at=ago(30)), fencing_reused=True)

    text = page(engineer_client)

    assert "data-fencing-reused>" in text and "Fencing broken" in text
    history = section(text, '<table class="table compact timeline">', "</table>")
    marked = section(history, 'class="row-bad fencing-reused" data-fencing-reused>', "</tr>")
    assert '<span class="pill pill-bad">critical</span> fencing token reused' in marked


def test_a_foreign_writer_is_a_warning(engineer_client: Client, cluster: KubeCluster) -> None:
    slot_lease(
        cluster, holder="kubectl-edit", token="", identity="kubectl-edit", foreign_writer=True
    )

    text = page(engineer_client)

    assert "data-foreign-writer>" in text
    pill = 'title="holderIdentity is not a leader-k8s token">foreign writer</span>'
    assert f'<span class="pill pill-warn" {pill}' in text


def test_a_plain_lease_shows_no_token_and_a_heartbeat_no_strip(
    engineer_client: Client, cluster: KubeCluster
) -> None:
    make_lease(cluster, "my-app", namespace="apps", holder="pod-1", identity="pod-1")
    make_lease(cluster, "node-1", namespace="kube-node-lease", holder="node-1", identity="node-1")

    plain = page(engineer_client, "/leases/prod/apps/my-app/")
    heartbeat = page(engineer_client, "/leases/prod/kube-node-lease/node-1/")

    assert 'title="fencing token"' not in plain and "plain (client-go style)" in plain
    assert "Leadership availability" in plain and "Foreign writer" not in plain
    assert "Leadership availability" not in heartbeat and "lease-strip" not in heartbeat


def test_hostile_identity_and_token_are_escaped_everywhere_on_the_page(
    engineer_client: Client, cluster: KubeCluster
) -> None:
    lease = slot_lease(cluster, identity=HOSTILE, holder=HOSTILE, token="", foreign_writer=True)
    LeaseHolderSpan.objects.create(
        lease=lease, holder=HOSTILE, identity=HOSTILE, started_at=ago(30)
    )
    change = make_transition(lease, TOKEN_A, HOSTILE, seconds_ago=1800)
    LeaseTransition.objects.filter(pk=change.pk).update(from_identity=HOSTILE, to_identity=HOSTILE)

    text = page(engineer_client)

    assert "<script>alert" not in text
    escaped = "&lt;script&gt;alert(&quot;node&quot;)&lt;/script&gt;"
    assert text.count(escaped) >= 5  # leader, holder, strip title and legend, history
    assert escaped in section(text, "<svg", "</svg>")


def test_a_node_leading_again_under_a_new_token_keeps_its_colour(
    engineer_client: Client, cluster: KubeCluster
) -> None:
    lease = slot_lease(cluster)
    for holder, identity, start, end in (
        (TOKEN_A, "worker-3", 300, 200),
        ("b4k-" + "C" * 22, "worker-5", 200, 100),
        (TOKEN_B, "worker-3", 100, None),
    ):
        LeaseHolderSpan.objects.create(
            lease=lease,
            holder=holder,
            identity=identity,
            started_at=ago(start),
            ended_at=ago(end) if end is not None else None,
        )

    strip = section(page(engineer_client), "<svg", "</svg>")

    colours = re.findall(r'class="tl-held (tl-c\d)"[^>]*>\s*<title>([\w-]+) ', strip)
    assert colours == [("tl-c0", "worker-3"), ("tl-c1", "worker-5"), ("tl-c0", "worker-3")]
