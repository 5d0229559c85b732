"""The shared bounded exchange, against a hostile server over real HTTP on loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from dashboard import outbound_http
from tests.dashboard.hostile_http import HostileServer, gzip_bomb

CAP = 1024 * 1024


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with outbound_http.bounded_client(timeout=httpx.Timeout(5.0)) as bounded:
        yield bounded


@pytest.mark.parametrize("body_only", [False, True], ids=["headers", "body"])
def test_a_trickling_server_is_cut_off_at_the_total_deadline(
    client: httpx.Client, body_only: bool
) -> None:
    # One byte every 0.5 s: each read is well within the 5 s per-read timeout.
    with HostileServer("trickle", interval=0.5, body_only=body_only) as server:
        started = time.monotonic()
        with pytest.raises(outbound_http.DeadlineExceeded) as caught:
            outbound_http.send(
                client, "GET", server.url, deadline=outbound_http.Deadline(1.5), max_body=CAP
            )
        elapsed = time.monotonic() - started
    assert str(caught.value) == "took longer than 1.5 s in total"
    assert 1.4 < elapsed < 2.5


def test_a_gzip_bomb_is_refused_unread(client: httpx.Client) -> None:
    bomb = gzip_bomb(128)  # 128 MiB of zeros in about 130 KB
    assert len(bomb) < CAP
    with (
        HostileServer("bomb", body=bomb) as server,
        pytest.raises(outbound_http.UnsupportedEncoding) as caught,
    ):
        outbound_http.send(
            client, "GET", server.url, deadline=outbound_http.Deadline(5), max_body=CAP
        )
    assert str(caught.value) == "answer compressed as 'gzip', which was not asked for"


def test_an_identity_answer_larger_than_the_cap_is_refused(client: httpx.Client) -> None:
    with (
        HostileServer("huge", size=64 * CAP) as server,
        pytest.raises(outbound_http.BodyTooLarge) as caught,
    ):
        outbound_http.send(
            client, "GET", server.url, deadline=outbound_http.Deadline(5), max_body=CAP
        )
    assert str(caught.value) == "answer larger than 1 MiB"
    # What the server got out before we hung up: the cap, a chunk, and the sockets' buffers;
    # far from the 64 MiB it meant to send.
    assert server.sent_body_bytes < 16 * CAP


def test_an_answer_within_its_bounds_is_returned_whole_and_identity_is_asked_for(
    client: httpx.Client,
) -> None:
    with HostileServer("huge", size=CAP) as server:
        response = outbound_http.send(
            client, "GET", server.url, deadline=outbound_http.Deadline(5), max_body=CAP
        )
    assert response.status_code == 200
    assert response.content == b"[" * CAP
    assert response.request.headers["Accept-Encoding"] == "identity"


def test_sizes_are_written_in_words() -> None:
    assert outbound_http.format_size(8 * 1024 * 1024) == "8 MiB"
    assert outbound_http.format_size(64 * 1024) == "64 KiB"
    assert outbound_http.format_size(1000) == "1000 bytes"
