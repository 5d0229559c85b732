"""A Node's ``spec.providerID`` read as an OpenStack instance UUID, or why it cannot be.

On NHN Cloud (OpenStack's cloud provider) the kubelet writes ``openstack:///<instance-uuid>``;
some clusters carry the region, ``openstack://<region>/<instance-uuid>``. The UUID is what
NKS's ``nodes_to_remove`` takes, so anything else is refused rather than guessed at: the
providerID is whatever the node's kubelet (or anyone who may patch Nodes) wrote.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from django.utils.translation import gettext

PREFIX = "openstack://"
# A region is a DNS-ish word (kr1, KR2, RegionOne); nothing that could smuggle a path in.
_REGION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
# How much of a refused value a reason quotes: enough to recognise, never a page of text.
QUOTED = 80


@dataclass(frozen=True, slots=True)
class InstanceId:
    """The instance UUID (lower case, canonical form), or None and the reason in words."""

    uuid: str | None
    problem: str

    @property
    def ok(self) -> bool:
        return self.uuid is not None


def _quoted(value: str) -> str:
    return repr(value if len(value) <= QUOTED else value[:QUOTED] + "…")


def _not_a_uuid(provider_id: str) -> str:
    return gettext("providerID %(value)s does not end in a UUID") % {"value": _quoted(provider_id)}


def instance_uuid(provider_id: str) -> InstanceId:
    """``openstack:///<uuid>`` or ``openstack://<region>/<uuid>`` -> the UUID; else a reason."""
    if not provider_id:
        return InstanceId(None, gettext("the node has no providerID"))
    if not provider_id.startswith(PREFIX):
        return InstanceId(
            None,
            gettext("providerID %(value)s is not an openstack:// ID")
            % {"value": _quoted(provider_id)},
        )
    region, slash, tail = provider_id.removeprefix(PREFIX).partition("/")
    if not slash or (region and not _REGION.fullmatch(region)):
        return InstanceId(
            None,
            gettext("providerID %(value)s is not openstack://[region]/<uuid>")
            % {"value": _quoted(provider_id)},
        )
    try:
        parsed = uuid.UUID(tail)
    except ValueError:
        return InstanceId(None, _not_a_uuid(provider_id))
    # uuid.UUID also takes "{...}", "urn:uuid:..." and bare hex: only the usual form is
    # what OpenStack writes, and anything else is someone else's string.
    if str(parsed) != tail.lower():
        return InstanceId(None, _not_a_uuid(provider_id))
    return InstanceId(str(parsed), "")
