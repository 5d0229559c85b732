"""LeaseCandidates the dashboard may not read, or that the server does not serve (issue 10,
section 0.5): said in words, stored as `candidates_problem`, logged once per change, and
cleared when they are read again. Over real HTTP against the fake API server."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from django.test import Client

from fakes.kube import FakeApiServer
from leases.models import LeaseCandidate
from tests.leases.test_watcher import (
    TOKEN,
    RunningWatcher,
    eventually,
    leader_spec,
    now_micro,
    register,
    status,
)

pytestmark = pytest.mark.django_db(transaction=True)


def watchers_page(client: Client, django_user_model: Any) -> str:
    if not django_user_model.objects.filter(username="erin").exists():
        client.force_login(django_user_model.objects.create_user("erin"))
    return client.get("/leases/clusters/").content.decode()


def candidate_lines(caplog: pytest.LogCaptureFixture, words: str) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.name == "leases.watcher" and words in record.getMessage()
    ]


def test_forbidden_candidates_are_shown_as_forbidden_logged_once_and_cleared_on_recovery(
    apiserver: FakeApiServer,
    client: Client,
    django_user_model: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="leases.watcher")
    apiserver.store.apply_lease("kube-system", "kube-scheduler", leader_spec("master-0_a"))
    apiserver.store.apply_candidate(
        "kube-system",
        "kube-scheduler-master-0",
        {
            "leaseName": "kube-scheduler",
            "binaryVersion": "1.33.4",
            "emulationVersion": "1.33.0",
            "strategy": "OldestEmulationVersion",
            "renewTime": now_micro(),
        },
    )
    apiserver.forbid("leasecandidates")
    cluster = register(apiserver)
    with RunningWatcher(cluster, candidates_interval=0.1):
        eventually(lambda: status(cluster).candidates_problem == "forbidden")
        time.sleep(1.0)  # about ten more refreshes, all forbidden
        assert len(candidate_lines(caplog, "lease candidates forbidden")) == 1
        row = status(cluster)
        assert row.connected and row.last_error == "", "the Lease watch is not affected"
        page = watchers_page(client, django_user_model)
        assert "forbidden: the dashboard&#x27;s credentials may not list leasecandidates" in page
        assert "not served" not in page

        apiserver.allow("leasecandidates")
        eventually(lambda: LeaseCandidate.objects.exists())
        eventually(lambda: status(cluster).candidates_problem == "")
        time.sleep(0.5)
    assert len(candidate_lines(caplog, "lease candidates are read again")) == 1
    assert len(candidate_lines(caplog, "lease candidates forbidden")) == 1
    row = status(cluster)
    assert (row.candidates_api, row.last_error) == ("coordination.k8s.io/v1beta1", "")
    assert "coordination.k8s.io/v1beta1" in watchers_page(client, django_user_model)


def test_a_server_without_candidates_says_not_served_once(
    client: Client, django_user_model: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="leases.watcher")
    server = FakeApiServer(token=TOKEN, candidate_versions=()).start()
    try:
        cluster = register(server)
        with RunningWatcher(cluster, candidates_interval=0.1):
            eventually(lambda: status(cluster).candidates_problem == "not_served")
            time.sleep(0.5)
    finally:
        server.stop()
    assert len(candidate_lines(caplog, "serves no lease candidates")) == 1
    assert status(cluster).last_error == ""
    assert "not served by this API server" in watchers_page(client, django_user_model)


def test_an_over_size_candidate_is_left_out_and_counted_on_the_watchers_page(
    apiserver: FakeApiServer, client: Client, django_user_model: Any
) -> None:
    # A hostile server: a candidate of 300 KiB (a real one is well under 1 KiB).
    spec = {
        "leaseName": "kube-scheduler",
        "binaryVersion": "1.33.4",
        "emulationVersion": "1.33.0",
        "strategy": "OldestEmulationVersion",
        "renewTime": now_micro(),
    }
    apiserver.store.apply_lease("kube-system", "kube-scheduler", leader_spec("master-0_a"))
    apiserver.store.apply_candidate("kube-system", "kube-scheduler-master-0", spec)
    apiserver.store.apply_candidate(
        "kube-system", "kube-scheduler-huge", spec, labels={"padding": "x" * 300 * 1024}
    )
    cluster = register(apiserver)
    with RunningWatcher(cluster, candidates_interval=0.1):
        eventually(lambda: status(cluster).candidates_cut == 1)
        time.sleep(0.5)  # several more lists: a count of the latest, not a running total
        row = status(cluster)
        assert row.candidates_cut == 1
        assert row.candidates_last_cut == "kube-system/kube-scheduler-huge"
        assert row.candidates_last_cut_bytes > 300 * 1024
        assert list(LeaseCandidate.objects.values_list("name", flat=True)) == [
            "kube-scheduler-master-0"
        ]
        page = watchers_page(client, django_user_model)
        assert "sent LeaseCandidates over their size cap" in page
        assert "kube-system/kube-scheduler-huge" in page

        apiserver.store.apply_candidate("kube-system", "kube-scheduler-huge", spec, labels={})
        eventually(lambda: status(cluster).candidates_cut == 0)
    assert "LeaseCandidates over their size cap" not in watchers_page(client, django_user_model)
