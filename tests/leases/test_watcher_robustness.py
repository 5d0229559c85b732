"""A watcher survives what clusters, kubeconfigs and the database throw at it.

Over real HTTP with the fake API server: a token the HTTP client would refuse never gets
that far; an unforeseen failure is written on the status and retried, never a silent end;
NUL characters anywhere in a Lease are cleaned and counted, and the rest of the batch is
stored; a lease the database refuses is skipped alone instead of stalling its batch.
"""

from __future__ import annotations

import http.client
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from django.db import connection
from django.test import Client

from fakes.kube import FakeApiServer, kubeconfig_document
from leases.models import KubeCluster, Lease, LeaseCandidate
from leases.services import ClusterConfigError, register_kube_cluster
from leases.watcher import unexpected_error_text
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

BROKEN_TOKEN = TOKEN + "\nX-Injected: yes"


def page_text(client: Client, django_user_model: Any) -> str:
    client.force_login(django_user_model.objects.create_user("erin"))
    return client.get("/leases/clusters/").content.decode()


# --- Tokens the HTTP client would refuse ------------------------------------------------------


def test_a_token_with_a_line_break_is_refused_when_registering(apiserver: FakeApiServer) -> None:
    kubeconfig = yaml.safe_dump(
        kubeconfig_document(apiserver.url, token=BROKEN_TOKEN, context_name="prod")
    )
    with pytest.raises(ClusterConfigError) as error:
        register_kube_cluster("prod", kubeconfig=kubeconfig)
    assert "users[prod].user.token must be one line" in str(error.value)
    assert TOKEN not in str(error.value)
    assert not KubeCluster.objects.exists()
    assert apiserver.requests == []


def test_a_stored_token_with_a_line_break_is_refused_by_the_watcher_and_never_sent(
    apiserver: FakeApiServer,
) -> None:
    cluster = register(apiserver, name="prod")
    broken = yaml.safe_dump(
        kubeconfig_document(apiserver.url, token=BROKEN_TOKEN, context_name="prod")
    )
    KubeCluster.objects.filter(pk=cluster.pk).update(kubeconfig=broken)
    runner = RunningWatcher(cluster)
    with runner:
        eventually(lambda: status(cluster).last_error)
        first_error_at = status(cluster).last_error_at
        # Still alive and still trying (config errors back off 0.5 s, then 1 s, here).
        eventually(lambda: status(cluster).last_error_at != first_error_at, timeout=5)
        assert runner.thread.is_alive()
    row = status(cluster)
    assert "users[prod].user.token must be one line" in row.last_error
    assert TOKEN not in row.last_error and not row.connected
    assert apiserver.requests == [], "nothing may be sent with a refused kubeconfig"


# --- Unforeseen failures ---------------------------------------------------------------------


def terminate_other_sessions() -> int:
    """What a database failover does to the watcher's connections: end them server-side."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


def reader_errors(cluster: KubeCluster) -> str:
    row = status(cluster)
    return f"{row.last_error}\n{row.nodes_last_error}"


def test_an_unforeseen_failure_is_recorded_and_retried_not_a_silent_end(
    postgres_database: None, apiserver: FakeApiServer
) -> None:
    apiserver.store.apply_lease("kube-system", "kube-scheduler", leader_spec("master-0_a"))
    cluster = register(apiserver)
    # The readers' database calls run on the watcher's one connection, between flushes
    # (leases.watch_database): with flushes 2 s apart, the reader's call when its stream
    # ends is the first to find the connection gone.
    runner = RunningWatcher(cluster, flush_interval=2.0)
    with runner:
        assert apiserver.wait_for_watches(1)
        eventually(lambda: Lease.objects.count() == 1)
        # The flush's own work done (LeaseCandidates are refreshed after it): nothing uses
        # the connection until the next flush.
        eventually(lambda: status(cluster).candidates_api != "")
        assert terminate_other_sessions() >= 1
        # The reader writes its status when a stream ends: the connection is gone, a
        # failure the watch loop did not foresee.
        apiserver.end_watches()
        # Both streams end: whichever reader asks first meets the broken connection.
        eventually(lambda: "A database call of the watcher failed" in reader_errors(cluster))
        error = reader_errors(cluster)
        assert "OperationalError" in error and "Retrying in" in error
        # It retried: a new watch, and what the server changes is written again.
        assert apiserver.wait_for_watches(1)
        apiserver.store.apply_lease("kube-system", "kube-scheduler", leader_spec("master-1_b", 1))
        eventually(lambda: Lease.objects.get().holder == "master-1_b")
        eventually(lambda: status(cluster).connected)
        assert runner.thread.is_alive()


def test_an_unforeseen_failure_is_described_without_the_exceptions_own_text() -> None:
    # What a token with a line break did before the kubeconfig check: http.client refuses
    # the header, quoting it, token included.
    request = http.client.HTTPConnection("127.0.0.1", 9)
    request.putrequest("GET", "/apis/coordination.k8s.io/v1/leases")
    with pytest.raises(ValueError) as error:
        request.putheader("Authorization", f"Bearer {BROKEN_TOKEN}")
    assert TOKEN in str(error.value)
    text = unexpected_error_text(error.value)
    assert text == (
        "The watcher failed unexpectedly (ValueError in http/client.py, putheader()); the "
        "worker log has the traceback."
    )


# --- NUL characters and values the database refuses -----------------------------------------


def test_nul_anywhere_in_a_lease_is_cleaned_counted_and_the_batch_is_stored(
    apiserver: FakeApiServer, client: Client, django_user_model: Any
) -> None:
    store = apiserver.store
    store.apply_lease("apps", "valid-1", leader_spec("pod-1"))
    store.apply_lease("apps", "nul-label", leader_spec("pod-2"), labels={"team": "a\x00b"})
    store.apply_lease(
        "apps", "nul-annotation", leader_spec("pod-3"), annotations={"note\x00": "x\x00y"}
    )
    store.apply_lease("apps", "nul-holder", leader_spec("pod\x00-4"))
    store.apply_lease("apps", "valid-2", leader_spec("pod-5"))
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: Lease.objects.count() == 5)
        # And through the watch, after the list.
        store.apply_lease("apps", "valid-2", leader_spec("pod-\x006", transitions=1))
        eventually(lambda: Lease.objects.get(name="valid-2").holder == "pod-6")
        eventually(lambda: status(cluster).skipped_objects_total == 4)
    leases = {lease.name: lease for lease in Lease.objects.all()}
    assert leases["nul-label"].labels == {"team": "ab"}
    assert leases["nul-annotation"].annotations == {"note": "xy"}
    assert leases["nul-holder"].holder == "pod-4"
    assert leases["valid-1"].holder == "pod-1"
    for lease in leases.values():
        assert "\x00" not in repr((lease.holder, lease.labels, lease.annotations))
    assert status(cluster).last_error == ""
    text = page_text(client, django_user_model)
    cell = text.split('data-skipped-objects="test">', 1)[1].split("</td>", 1)[0]
    assert cell == "<strong>4</strong>"


def test_nul_in_a_lease_candidate_is_cleaned_and_counted(apiserver: FakeApiServer) -> None:
    apiserver.store.apply_lease("kube-system", "kube-scheduler", leader_spec("master-0_a"))
    apiserver.store.apply_candidate(
        "kube-system",
        "kube-scheduler-master-0",
        {
            "leaseName": "kube-scheduler",
            "binaryVersion": "1.33.4\x00",
            "emulationVersion": "1.33.0",
            "strategy": "OldestEmulationVersion",
            "renewTime": now_micro(),
        },
    )
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: LeaseCandidate.objects.exists())
        eventually(lambda: status(cluster).skipped_objects_total >= 1)
    candidate = LeaseCandidate.objects.get()
    assert candidate.binary_version == "1.33.4"
    assert "\x00" not in repr((candidate.binary_version, candidate.strategy))


def test_a_lease_renewed_at_the_end_of_time_is_stored_with_the_rest(
    apiserver: FakeApiServer,
) -> None:
    spec = {**leader_spec("far-future"), "renewTime": "9999-12-31T23:59:59.000000Z"}
    apiserver.store.apply_lease("apps", "far-future", spec)
    apiserver.store.apply_lease("apps", "valid", leader_spec("pod-1"))
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: Lease.objects.count() == 2)
    far = Lease.objects.get(name="far-future")
    assert far.renew_time is not None and far.renew_time.year == 9999
    assert far.expires_at is None
    assert status(cluster).last_error == ""


@pytest.fixture
def postgres_refuses_a_holder(postgres_database: None) -> Iterator[str]:
    """PostgreSQL refuses rows with this holder as it refuses a value it cannot store.

    A trigger stands in for any such value (22P05, untranslatable_character, is what a NUL
    in jsonb raises), now that every NUL is cleaned before the database sees it.
    """
    holder = "refused-by-postgres"
    with connection.cursor() as cursor:
        cursor.execute(
            """
            CREATE OR REPLACE FUNCTION test_refuse_holder() RETURNS trigger AS $$
            BEGIN
                IF NEW.holder = 'refused-by-postgres' THEN
                    RAISE EXCEPTION 'unsupported Unicode escape sequence'
                        USING ERRCODE = '22P05';
                END IF;
                RETURN NEW;
            END $$ LANGUAGE plpgsql;
            CREATE TRIGGER test_refuse_holder BEFORE INSERT OR UPDATE ON leases_lease
                FOR EACH ROW EXECUTE FUNCTION test_refuse_holder();
            """
        )
    try:
        yield holder
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                "DROP TRIGGER IF EXISTS test_refuse_holder ON leases_lease; "
                "DROP FUNCTION IF EXISTS test_refuse_holder();"
            )


def test_a_lease_the_database_refuses_is_skipped_alone_not_retried_forever(
    apiserver: FakeApiServer, postgres_refuses_a_holder: str
) -> None:
    store = apiserver.store
    for index in range(5):
        store.apply_lease("apps", f"valid-{index}", leader_spec(f"pod-{index}"))
    store.apply_lease("apps", "refused", leader_spec(postgres_refuses_a_holder))
    cluster = register(apiserver)
    with RunningWatcher(cluster):
        eventually(lambda: Lease.objects.count() == 5)
        eventually(lambda: status(cluster).skipped_objects_total == 1)
        # Later flushes are not stuck behind it: a renewal of a valid lease is written,
        # and the refused lease is stored once its value is one the database takes.
        store.apply_lease("apps", "valid-0", leader_spec("pod-0b", transitions=1))
        store.apply_lease("apps", "refused", leader_spec("pod-ok", transitions=1))
        eventually(lambda: Lease.objects.get(name="valid-0").holder == "pod-0b")
        eventually(lambda: Lease.objects.filter(name="refused", holder="pod-ok").exists())
        time.sleep(0.3)
    assert status(cluster).skipped_objects_total == 1
    assert sorted(Lease.objects.values_list("name", flat=True)) == [
        "refused",
        *[f"valid-{index}" for index in range(5)],
    ]
