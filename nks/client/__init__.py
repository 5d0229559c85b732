"""Client for the NKS (NHN Kubernetes Service) API v2 and the identity service behind its tokens.

This is the only package in the project that talks to NKS or to the identity service. It turns
the API's loosely typed JSON (see ``docs/nks-api.md``: the guide contradicts itself about types,
field shapes and enum values) into frozen dataclasses, and every failure into one error type,
:class:`NksError`, that says what went wrong in words and whether trying again can help.

Nothing here imports Django: the poller, the resize task, the demo and the benchmark build a
client from plain values. Callers use this package's names (``from nks import client as nks``);
the modules behind them:

* ``http``: :class:`NksClient`, the calls, retries and transport;
* ``identity``: the token, fixed or issued by the identity service, and its renewal;
* ``parsing``: lenient readers of NKS's JSON, and its quirks;
* ``types``: the results (frozen dataclasses);
* ``errors``: :class:`NksError`, :class:`ErrorKind` and the words of error messages;
* ``snapshot``: :func:`fetch_snapshot`, one account fetched concurrently.

The classified values (``Freshness``, ``EventState``, ``OperationPhase``) live in
``nks.enums``, shared with the models; they are re-exported here because results carry them.
"""

from nks.client.errors import ErrorKind, NksError
from nks.client.http import NksClient
from nks.client.parsing import parse_health
from nks.client.snapshot import AccountSnapshot, ClusterSnapshot, fetch_snapshot
from nks.client.types import (
    AutoscaleSettings,
    Cluster,
    ClusterEvent,
    HealthReport,
    Nodegroup,
    NodegroupHealth,
    ResizeAccepted,
    Timeouts,
)
from nks.enums import EventState, Freshness, OperationPhase

__all__ = [
    "AccountSnapshot",
    "AutoscaleSettings",
    "Cluster",
    "ClusterEvent",
    "ClusterSnapshot",
    "ErrorKind",
    "EventState",
    "Freshness",
    "HealthReport",
    "NksClient",
    "NksError",
    "Nodegroup",
    "NodegroupHealth",
    "OperationPhase",
    "ResizeAccepted",
    "Timeouts",
    "fetch_snapshot",
    "parse_health",
]
