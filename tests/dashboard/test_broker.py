"""The embedded broker never hands a worker a message file that is still being written."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path
from queue import Empty

import pytest
from kombu import Connection
from kombu.exceptions import ChannelError

from dashboard.broker import Channel

QUEUE = "default"
TRANSPORT = "dashboard.broker:Transport"


def channel_in(folder: Path, transport: str = TRANSPORT) -> tuple[Connection, Channel]:
    connection = Connection(
        "filesystem://localhost//",
        transport=transport,
        transport_options={
            "data_folder_in": str(folder),
            "data_folder_out": str(folder),
            "store_processed": False,
        },
    )
    return connection, connection.default_channel


def test_a_draft_being_written_is_not_taken_from_the_queue(tmp_path: Path) -> None:
    connection, channel = channel_in(tmp_path)
    with connection:
        # What a reader sees while a message is half written: the draft, empty so far.
        (tmp_path / ".1_abc.default.msg.part").write_bytes(b"")
        with pytest.raises(Empty):
            channel._get(QUEUE)
        assert (tmp_path / ".1_abc.default.msg.part").exists()


def write_messages(folder: str, transport: str, count: int) -> None:
    connection, channel = channel_in(Path(folder), transport)
    with connection:
        for number in range(count):
            channel._put(QUEUE, {"n": number, "padding": "x" * 200_000})


def test_messages_written_by_another_process_while_a_reader_polls_all_arrive_whole(
    tmp_path: Path,
) -> None:
    # Another process, as a web server and a worker are: the reader polls while the writer
    # is between creating a message file and finishing it.
    count = 150
    writer = multiprocessing.get_context("fork").Process(
        target=write_messages, args=(str(tmp_path), TRANSPORT, count)
    )
    received: list[int] = []
    errors: list[BaseException] = []
    connection, channel = channel_in(tmp_path)
    with connection:
        writer.start()
        deadline = time.monotonic() + 60
        while len(received) < count and time.monotonic() < deadline:
            try:
                received.append(channel._get(QUEUE)["n"])
            except Empty:
                continue
            except (ChannelError, ValueError) as exc:  # ValueError: an empty file's JSON
                errors.append(exc)
        writer.join(timeout=30)
    assert errors == []
    assert sorted(received) == list(range(count))
    assert not any(tmp_path.iterdir()), "no draft or message is left behind"
