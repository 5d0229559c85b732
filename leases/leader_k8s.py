"""Which library wrote a Lease, and who really leads it.

The bluetape4k leader-k8s library (docs in ../shared/seeds/leader-k8s-lease-backend.ko.txt)
writes a fresh random fencing token into holderIdentity at every acquisition,
`b4k-` + 22 Base58 characters, and puts the people-facing identity in annotations. Group
election keeps one Lease per slot, `<lock>-slot-<index>`. Coordinated leader election
(Kubernetes 1.31+) sets `strategy` (and `preferredHolder`). Anything else is read as a plain
client-go style lease whose holderIdentity is the identity.

Everything here is pure: it reads what a cluster wrote (untrusted, bounded) and decides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from leases.models import LeaseLibrary

ANNOTATION_PREFIX = "leader.bluetape4k.io/"
MANAGED_BY_ANNOTATION = "leader.bluetape4k.io/managed-by"
MANAGED_BY_VALUE = "bluetape4k-leader-k8s"
NODE_ID_ANNOTATION = "leader.bluetape4k.io/node-id"
AUDIT_ID_ANNOTATION = "leader.bluetape4k.io/audit-leader-id"

# KubernetesLeaseLock.newOwnerToken(): "b4k-" + Base58.randomString(22), Bitcoin alphabet.
TOKEN_PATTERN = re.compile(r"b4k-[1-9A-HJ-NP-Za-km-z]{22}")
# KubernetesLeaseNames.groupSlotLeaseName: "$lockName-slot-$slot", slot 0..maxLeaders-1.
_SLOT_SUFFIX = re.compile(r"-slot-(0|[1-9][0-9]{0,3})$")

# Annotations are free text from whoever can write the Lease: keep a bounded copy.
MAX_ANNOTATIONS = 64
MAX_ANNOTATION_KEY = 253
MAX_ANNOTATION_VALUE = 1024
# Identities shown in tables and mail: node ids are host or pod names in practice.
MAX_IDENTITY = 253


@dataclass(frozen=True, slots=True)
class Leadership:
    """What leases/parse.py stores about who leads (Lease.library, identity, token...)."""

    library: LeaseLibrary
    identity: str
    token: str
    foreign_writer: bool
    group_name: str
    group_slot: int | None


def bounded_annotations(value: object) -> tuple[dict[str, str], int]:
    """metadata.annotations as stored: string values only, keys and values cut, at most
    MAX_ANNOTATIONS kept (sorted by key, so the same object always keeps the same ones).
    Returns the dict and how many entries were cut or dropped."""
    if not isinstance(value, dict):
        return {}, 0
    kept: dict[str, str] = {}
    cut = 0
    for key in sorted(k for k in value if isinstance(k, str)):
        item = value[key]
        if not isinstance(item, str) or len(kept) >= MAX_ANNOTATIONS:
            cut += 1
            continue
        if len(key) > MAX_ANNOTATION_KEY or len(item) > MAX_ANNOTATION_VALUE:
            cut += 1
        kept[key[:MAX_ANNOTATION_KEY]] = item[:MAX_ANNOTATION_VALUE]
    cut += sum(1 for k in value if not isinstance(k, str))
    return kept, cut


def library_of(annotations: dict[str, Any], strategy: str, preferred_holder: str) -> LeaseLibrary:
    if annotations.get(MANAGED_BY_ANNOTATION) == MANAGED_BY_VALUE:
        return LeaseLibrary.LEADER_K8S
    if strategy or preferred_holder:
        return LeaseLibrary.COORDINATED
    return LeaseLibrary.PLAIN


def is_token(holder: str) -> bool:
    return TOKEN_PATTERN.fullmatch(holder) is not None


def slot_of(name: str) -> tuple[str, int] | None:
    """(`lock`, slot) for a `<lock>-slot-<n>` name, parsed from the right: the lock name
    may itself contain `-slot-` (`a-slot-1-slot-0` is slot 0 of `a-slot-1`)."""
    match = _SLOT_SUFFIX.search(name)
    if match is None or match.start() == 0:
        return None
    return name[: match.start()], int(match.group(1))


def leadership(
    name: str,
    holder: str,
    annotations: dict[str, Any],
    strategy: str = "",
    preferred_holder: str = "",
) -> Leadership:
    library = library_of(annotations, strategy, preferred_holder)
    if library is not LeaseLibrary.LEADER_K8S:
        return Leadership(library, holder[:MAX_IDENTITY] if holder else "", "", False, "", None)
    token = holder if is_token(holder) else ""
    identity = ""
    if holder and not token:
        # A foreign writer (client-go, say) keeps the annotations it found: they name the
        # previous leader-k8s holder, not this one.
        identity = holder[:MAX_IDENTITY]
    elif holder:
        node_id = str(annotations.get(NODE_ID_ANNOTATION) or "")[:MAX_IDENTITY]
        audit_id = str(annotations.get(AUDIT_ID_ANNOTATION) or "")[:MAX_IDENTITY]
        # The audit id defaults to the token itself (no leader id given): nothing to add then.
        parts = [part for part in (node_id, audit_id) if part and part != holder]
        if len(parts) == 2 and parts[0] == parts[1]:
            parts = parts[:1]
        identity = " / ".join(parts) if parts else holder[:MAX_IDENTITY]
    slot = slot_of(name)
    return Leadership(
        library,
        identity,
        token,
        bool(holder) and not token,
        slot[0] if slot else "",
        slot[1] if slot else None,
    )
