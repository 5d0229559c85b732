"""kombu's filesystem broker, with messages that appear whole.

The embedded default (no Redis) queues Celery messages as files. kombu's own transport opens
the final file name and then writes into it, so a worker listing the folder at that moment can
take the file while it is still empty and die with "Unrecoverable error: JSONDecodeError".
Here a message is written aside under a name the reader ignores, then renamed into place,
which is atomic on one filesystem.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from time import monotonic
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps


class Channel(filesystem.Channel):
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:
        # The same name kombu gives a message: readers sort by its leading time.
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        final = os.path.join(self.data_folder_out, name)
        # A leading dot keeps the draft out of every queue: kombu matches "<queue>.msg" after
        # the first dot, which here is the draft's whole name.
        draft = os.path.join(self.data_folder_out, f".{name}.part")
        try:
            with open(draft, "wb") as handle:
                handle.write(str_to_bytes(dumps(payload)))
            os.replace(draft, final)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.remove(draft)
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel
