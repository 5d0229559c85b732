"""A call's total deadline over what comes before its body: connect, TLS, status and headers.

Bodies are read under a total deadline (leases.kube.bounded), but urllib3 and http.client
wait for a connection and for a response's status line and headers with a timeout per read
(per recv): a server that sends its headers one byte a second never lets one expire, and
keeps a list, the probe or the quiet check waiting as long as it likes. So each call runs
inside `call_deadline(api, deadline)`, and the connections of an API client made here arm
an alarm at that deadline around `connect()` and `getresponse()`: when it rings, the socket is
shut down (SHUT_RDWR, which a blocked recv in another thread sees at once), the blocked
read fails, and the failure is reported as DeadlinePassed (leases.kube.client words it as a
timeout). The alarm is disarmed as soon as the headers are in: reading a body, above all a
watch stream's, costs nothing per read.

The pool classes are derived from whatever the client's pool manager already uses (plain,
TLS, SOCKS), so TLS verification, SNI (leases.egress pins the address and keeps the name)
and every other connection setting stay theirs.
"""

from __future__ import annotations

import math
import socket
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any, TypeVar

import urllib3
from kubernetes import client as k8s

from dashboard.socket_alarm import shut

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Deadline:
    at: float  # a time.monotonic() moment
    seconds: float  # what the call was given when it began: for the message


class DeadlinePassed(Exception):
    """The call's deadline passed before the server's status line and headers were in."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"deadline of {seconds:.3g} s passed")
        self.seconds = seconds


# The deadline of the call running in this thread (or context); None outside call_deadline.
_current: ContextVar[Deadline | None] = ContextVar("kube_call_deadline", default=None)


class call_deadline:
    """Run a call whose connect, status line and headers must all be in by `deadline` (a
    time.monotonic() moment); `seconds` is the call's budget, for the message (by default
    what is left of the deadline now). Installs the alarmed connections on `api` if needed.

    A class, not a generator: contextlib's would set `__traceback__` on the exception going
    through, which a KubeError (a frozen dataclass) refuses."""

    def __init__(self, api: k8s.ApiClient, deadline: float, seconds: float | None = None) -> None:
        bound_connections(api)
        if seconds is None:
            seconds = math.ceil(max(0.0, deadline - time.monotonic()) * 10) / 10
        self.deadline = Deadline(deadline, seconds)
        self._token: Token[Deadline | None] | None = None

    def __enter__(self) -> Deadline:
        self._token = _current.set(self.deadline)
        return self.deadline

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _current.reset(self._token)
            self._token = None


class _Alarm:
    """Shuts a connection's socket down at the deadline, unless switched off first; the lock
    makes "it rang" and "it was switched off in time" exclusive."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self._lock = threading.Lock()
        self._off = False
        self.rang = False

    def ring(self) -> None:
        with self._lock:
            if self._off:
                return
            self.rang = True
        sock = getattr(self._connection, "sock", None)
        if isinstance(sock, socket.socket):
            shut(sock)

    def switch_off(self) -> bool:
        """Off for good; whether it rang before."""
        with self._lock:
            self._off = True
            return self.rang


def _alarmed(connection: Any, step: Callable[[], T]) -> T:
    """`step()` under the current call's deadline (none: as it is)."""
    current = _current.get()
    if current is None:
        return step()
    left = current.at - time.monotonic()
    if left <= 0:
        raise DeadlinePassed(current.seconds)
    alarm = _Alarm(connection)
    timer = threading.Timer(left, alarm.ring)
    timer.daemon = True
    timer.start()
    try:
        result = step()
    except Exception:
        # Rung, or the deadline passed anyway: the TCP connect's own timeout, cut to the
        # deadline, expires about when the alarm would ring (before there is a socket).
        if alarm.switch_off() or time.monotonic() >= current.at:
            raise DeadlinePassed(current.seconds) from None
        raise
    finally:
        timer.cancel()
    if alarm.switch_off():
        # It rang as the step ended: what the step read may be cut short (http.client
        # takes an end of file inside the headers for their end).
        raise DeadlinePassed(current.seconds)
    return result


class _DeadlineConnection:
    """Mixed in before urllib3's connection class (HTTPConnection, HTTPSConnection, SOCKS)."""

    def connect(self) -> None:
        current = _current.get()
        timeout = getattr(self, "timeout", None)
        if current is not None and isinstance(timeout, int | float):
            # The TCP connect itself (no socket to shut down yet) waits no longer either.
            self.timeout = max(0.01, min(timeout, current.at - time.monotonic()))
        _alarmed(self, super().connect)  # type: ignore[misc]

    def getresponse(self) -> Any:
        return _alarmed(self, super().getresponse)  # type: ignore[misc]


_DERIVED: dict[type, type] = {}


def _alarmed_pool(pool_class: type) -> type:
    """`pool_class` with its ConnectionCls under the deadline (one class per base)."""
    if issubclass(pool_class.ConnectionCls, _DeadlineConnection):
        return pool_class
    derived = _DERIVED.get(pool_class)
    if derived is None:
        base = pool_class.ConnectionCls
        connection = type(f"Deadline{base.__name__}", (_DeadlineConnection, base), {})
        fields = {"ConnectionCls": connection}
        derived = type(f"Deadline{pool_class.__name__}", (pool_class,), fields)
        derived = _DERIVED.setdefault(pool_class, derived)
    return derived


def bound_connections(api: k8s.ApiClient) -> None:
    """Make `api`'s connections keep the current call's deadline (idempotent, cheap)."""
    manager: urllib3.PoolManager = api.rest_client.pool_manager
    if getattr(manager, "_kube_deadlines", False):
        return
    # A new dict: the manager's own is urllib3's module-wide default, shared by every manager.
    manager.pool_classes_by_scheme = {
        scheme: _alarmed_pool(pool_class)
        for scheme, pool_class in manager.pool_classes_by_scheme.items()
    }
    manager.clear()  # a pool made before has the plain connections
    manager._kube_deadlines = True  # type: ignore[attr-defined]
