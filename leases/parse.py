"""Lease and LeaseCandidate objects (as raw JSON dicts) into typed observations.

Whatever a cluster sends is tolerated: missing `spec`, null or garbage times, wrong types,
huge strings. A field that cannot be read becomes None (or empty), never an exception, and
an object without a namespace or name is skipped by the caller.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from dashboard.natural import natural_key
from leases.classify import classify_lease
from leases.leader_k8s import Leadership, bounded_annotations, leadership
from leases.models import LeaseClass, LeaseLibrary

# Holder identities are free text; cap what is stored so one odd client cannot bloat rows.
MAX_HOLDER_LENGTH = 16_384
MAX_DURATION_SECONDS = 10 * 365 * 24 * 3600
# A lease has a handful of labels; more is a mistake or an attack, and labels are stored.
MAX_LABELS = 64
# A renewal shape is kept as a digest this long: the ingestor keeps one per stored lease.
SHAPE_DIGEST_BYTES = 16


@dataclass(slots=True)
class LeaseObservation:
    namespace: str
    name: str
    uid: str
    resource_version: str
    lease_class: LeaseClass
    holder: str
    acquire_time: datetime | None
    renew_time: datetime | None
    lease_duration_seconds: int | None
    lease_transitions: int | None
    strategy: str
    preferred_holder: str
    labels: dict[str, str]
    created_at: datetime | None
    # NUL characters were removed from it (PostgreSQL stores no NUL in text or jsonb).
    cleaned: bool = False
    # metadata.annotations bounded (leases/leader_k8s.py), and how many entries were cut.
    annotations: dict[str, str] = field(default_factory=dict)
    annotations_cut: int = 0
    # Who really leads (leases/leader_k8s.py leadership()).
    library: LeaseLibrary = LeaseLibrary.PLAIN
    identity: str = ""
    token: str = ""
    foreign_writer: bool = False
    group_name: str = ""
    group_slot: int | None = None
    # The name as it sorts naturally (dashboard/natural.py).
    name_key: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    @property
    def expires_at(self) -> datetime | None:
        if self.renew_time is None or self.lease_duration_seconds is None:
            return None
        try:
            return self.renew_time + timedelta(seconds=self.lease_duration_seconds)
        except OverflowError:
            return None  # renewed near the year 9999: no expiry we can represent


@dataclass(slots=True)
class CandidateObservation:
    namespace: str
    name: str
    lease_name: str
    binary_version: str
    emulation_version: str
    strategy: str
    ping_time: datetime | None
    renew_time: datetime | None
    cleaned: bool = False


# Not frozen: built for every event, and a frozen dataclass's __init__ costs several times
# more (object.__setattr__ per field). Nothing keeps or changes one.
@dataclass(slots=True)
class LeaseIdentity:
    """What the hot path needs of an event: which lease, who holds it, how many changes."""

    key: tuple[str, str]
    holder: str
    lease_transitions: int | None
    spec: dict[str, Any]


def lease_identity(obj: object) -> LeaseIdentity | None:
    """The few fields read for every event; the full parse waits for the (coalesced) flush."""
    state = lease_state(obj)
    return None if state is None else LeaseIdentity(*state)


# lease_identity's fields as a plain tuple (key, holder, lease_transitions, spec): what
# LeaseIngestor.observe reads for every event, where building a LeaseIdentity costs more
# than reading the fields.
LeaseState = tuple[tuple[str, str], str, int | None, dict[str, Any]]


def lease_state(obj: object) -> LeaseState | None:
    """lease_identity's values, or None when the object is no usable Lease."""
    if not isinstance(obj, dict):
        return None
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return None
    namespace, name = metadata.get("namespace"), metadata.get("name")
    if not (isinstance(namespace, str) and namespace and isinstance(name, str) and name):
        return None
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        spec = {}
    return (
        (_text(namespace), _text(name)),
        _text(spec.get("holderIdentity"), MAX_HOLDER_LENGTH),
        _whole_number(spec.get("leaseTransitions"), 2**31 - 1),
        spec,
    )


def lease_class_of(namespace: str, name: str, metadata: dict[str, Any]) -> LeaseClass:
    """The class parse_lease gives the object, for the ingestor's first sight of a lease."""
    return classify_lease(namespace, name, _labels(metadata.get("labels")))


def parse_time(value: object) -> datetime | None:
    """A Kubernetes Time or MicroTime (`2026-11-29T07:00:00.123456Z`) in UTC, or None."""
    if not isinstance(value, str) or not value or len(value) > 64:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    tzinfo = parsed.tzinfo
    if tzinfo is UTC:  # the usual `Z`: already what astimezone would return
        return parsed
    if tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    return parsed.astimezone(UTC)


def _text(value: object, limit: int = 253) -> str:
    # NUL is the one character PostgreSQL cannot store in text.
    if not isinstance(value, str):
        return ""
    return value[:limit].replace("\x00", "") if "\x00" in value else value[:limit]


def _whole_number(value: object, maximum: int) -> int | None:
    # bool is an int in Python; a `true` duration is garbage, not 1 second.
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value <= maximum else None


def _labels(value: object) -> dict[str, str]:
    """Labels as stored: keys and values cut to Kubernetes' own limits, at most MAX_LABELS
    (sorted by key, so the same object always keeps the same ones)."""
    if not isinstance(value, dict):
        return {}
    keys = sorted(key for key in value if isinstance(key, str))[:MAX_LABELS]
    return {key[:317]: str(value[key])[:63] for key in keys}


def _metadata(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def _without_managed_fields(obj: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any]:
    """The object as read: managedFields are bulky and say nothing to on-call."""
    read = {key: value for key, value in obj.items() if key != "metadata"}
    read["metadata"] = {key: value for key, value in metadata.items() if key != "managedFields"}
    return read


def resource_version_of(obj: object) -> str:
    if not isinstance(obj, dict):
        return ""
    return _text(_metadata(obj).get("resourceVersion"), 64)


@dataclass(frozen=True, slots=True)
class _Envelope:
    namespace: str
    name: str
    metadata: dict[str, Any]
    spec: dict[str, Any]
    cleaned: bool


def _envelope(obj: object) -> _Envelope | None:
    """The parts every namespaced object has; None when it has no namespace or name.

    Everything is read from the object with its NULs removed, so no field (labels,
    annotations, holder) can carry one into the database.
    """
    if not isinstance(obj, dict):
        return None
    read, cleaned = without_nul(_without_managed_fields(obj, _metadata(obj)))
    metadata = read["metadata"]
    namespace, name = _text(metadata.get("namespace")), _text(metadata.get("name"))
    if not namespace or not name:
        return None
    return _Envelope(namespace, name, metadata, _spec(read), cleaned)


def without_nul(value: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The object minus NUL characters in every string and key, and whether any was there.

    PostgreSQL refuses NUL in text and jsonb, and one refused row fails its whole batch.
    The check is one orjson dump (cheap, in C); the walk happens only for the rare object
    that has a NUL.
    """
    try:
        if b"\\u0000" not in orjson.dumps(value):
            return value, False
    except orjson.JSONEncodeError:
        pass  # not plain JSON data (a test's dict, say): walk it
    stripped = _strip_nul(value)
    return stripped, stripped != value


def _strip_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "") if "\x00" in value else value
    if isinstance(value, dict):
        return {_strip_nul(key): _strip_nul(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_strip_nul(item) for item in value]
    return value


def parse_lease(obj: object) -> LeaseObservation | None:
    envelope = _envelope(obj)
    if envelope is None:
        return None
    namespace, name, metadata, spec = (
        envelope.namespace,
        envelope.name,
        envelope.metadata,
        envelope.spec,
    )
    labels = _labels(metadata.get("labels"))
    annotations, annotations_cut, leads = _leadership(envelope)
    holder, strategy, preferred_holder = _leader_fields(spec)
    return LeaseObservation(
        namespace=namespace,
        name=name,
        uid=_text(metadata.get("uid"), 64),
        resource_version=_text(metadata.get("resourceVersion"), 64),
        lease_class=classify_lease(namespace, name, labels),
        holder=holder,
        acquire_time=parse_time(spec.get("acquireTime")),
        renew_time=parse_time(spec.get("renewTime")),
        lease_duration_seconds=_whole_number(
            spec.get("leaseDurationSeconds"), MAX_DURATION_SECONDS
        ),
        lease_transitions=_whole_number(spec.get("leaseTransitions"), 2**31 - 1),
        strategy=strategy,
        preferred_holder=preferred_holder,
        labels=labels,
        created_at=parse_time(metadata.get("creationTimestamp")),
        cleaned=envelope.cleaned,
        annotations=annotations,
        annotations_cut=annotations_cut,
        library=leads.library,
        identity=leads.identity,
        token=leads.token,
        foreign_writer=leads.foreign_writer,
        group_name=leads.group_name,
        group_slot=leads.group_slot,
        name_key=natural_key(name),
    )


def _leader_fields(spec: dict[str, Any]) -> tuple[str, str, str]:
    """holderIdentity, strategy and preferredHolder as stored."""
    return (
        _text(spec.get("holderIdentity"), MAX_HOLDER_LENGTH),
        _text(spec.get("strategy"), 100),
        _text(spec.get("preferredHolder"), MAX_HOLDER_LENGTH),
    )


def _leadership(envelope: _Envelope) -> tuple[dict[str, str], int, Leadership]:
    annotations, cut = bounded_annotations(envelope.metadata.get("annotations"))
    holder, strategy, preferred_holder = _leader_fields(envelope.spec)
    return (
        annotations,
        cut,
        leadership(envelope.name, holder, annotations, strategy, preferred_holder),
    )


def lease_leadership(obj: object) -> Leadership | None:
    """Who leads, read exactly as parse_lease reads it (NULs removed, annotations bounded).

    For the ingestor's rare moments that need it before the flush parses the object: a
    holder change (the transition's identities) and the first sight of a lease whose
    identity is not its holderIdentity.
    """
    envelope = _envelope(obj)
    return None if envelope is None else _leadership(envelope)[2]


def parse_candidate(obj: object) -> CandidateObservation | None:
    envelope = _envelope(obj)
    if envelope is None:
        return None
    spec = envelope.spec
    return CandidateObservation(
        namespace=envelope.namespace,
        name=envelope.name,
        lease_name=_text(spec.get("leaseName")),
        binary_version=_text(spec.get("binaryVersion"), 64),
        emulation_version=_text(spec.get("emulationVersion"), 64),
        strategy=_text(spec.get("strategy"), 100),
        ping_time=parse_time(spec.get("pingTime")),
        renew_time=parse_time(spec.get("renewTime")),
        cleaned=envelope.cleaned,
    )


# A Lease split into what a renewal moves and what it keeps: (stable, renew_text,
# resource_version), where `stable` is the digest of the object's JSON with renewTime,
# resourceVersion and managedFields blanked. A plain tuple: one is built per event written,
# and a dataclass's __init__ costs more than the rest of the split.
RenewalShape = tuple[bytes, str, str]


def renewal_shape(obj: object) -> RenewalShape | None:
    """The object's renewal shape, or None when only the full parse can store it.

    Two objects with the same `stable` bytes give rows that differ only in renew_time,
    expires_at and resource_version (every other column is read from the stable part: its
    metadata and spec; nothing else of the object is read). So an object
    is refused here whenever those two values would not be stored as sent: not text, longer
    than the column, or holding a NUL (which the full parse removes); and any NUL elsewhere
    is refused too. managedFields are left out, as the parse leaves them out: a real
    apiserver moves their time at every renewal. `stable` is a 16-byte BLAKE2b digest of
    that JSON, not the JSON itself: the ingestor keeps one per stored lease, and the bytes
    were most of its memory per lease (a node lease's are about 500); a 128-bit digest
    costs about a microsecond and collides less often than memory fails.
    """
    if type(obj) is not dict:
        return None
    metadata, spec = obj.get("metadata"), obj.get("spec")
    if type(metadata) is not dict or type(spec) is not dict:
        return None
    renew, version = spec.get("renewTime"), metadata.get("resourceVersion")
    if type(renew) is not str or type(version) is not str:
        return None
    if len(renew) > 64 or len(version) > 64 or "\x00" in renew or "\x00" in version:
        return None
    # Copies with the moving values blanked (C-level copies, not a loop per key); keys keep
    # their places, so a lease whose managedFields come and go is simply not a renewal.
    stable_metadata = {**metadata, "resourceVersion": None}
    if "managedFields" in stable_metadata:
        stable_metadata["managedFields"] = None
    try:
        # Only what a row is read from: a list's items come without kind and apiVersion
        # and a watch's objects with them, and the first event of every lease after a
        # list would otherwise never be a renewal (at full speed, 15,000 full upserts).
        stable = {"metadata": stable_metadata, "spec": {**spec, "renewTime": None}}
        data = orjson.dumps(stable)
    except orjson.JSONEncodeError:
        return None  # not plain JSON data: the full parse copes
    if b"\\u0000" in data:
        return None
    return hashlib.blake2b(data, digest_size=SHAPE_DIGEST_BYTES).digest(), renew, version


# leaseDurationSeconds as timedeltas: a cluster uses a few durations, one per kind of lease.
_DURATIONS: dict[int, timedelta] = {}


def renewal_times(spec: dict[str, Any], renew_text: str) -> tuple[datetime | None, datetime | None]:
    """renew_time and expires_at as parse_lease computes them (LeaseObservation.expires_at)."""
    renew_time = parse_time(renew_text)
    duration = spec.get("leaseDurationSeconds")
    if renew_time is None:
        return None, None
    delta = _DURATIONS.get(duration) if type(duration) is int else None
    if delta is None:
        whole = _whole_number(duration, MAX_DURATION_SECONDS)
        if whole is None:
            return renew_time, None
        delta = timedelta(seconds=whole)
        if len(_DURATIONS) < 64:
            _DURATIONS[whole] = delta
    try:
        return renew_time, renew_time + delta
    except OverflowError:
        return renew_time, None
