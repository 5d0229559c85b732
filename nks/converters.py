"""A URL path segment that carries any NKS name or uuid, exactly.

Cluster uuids and nodegroup names come from the NKS API: data, not identifiers chosen by us.
Three kinds of value cannot be put in one path segment as they are, even percent-encoded:
"/" (servers decode %2F before routing, so the segment splits), and "." or ".." (browsers
resolve dot segments, %2E%2E included, and would open another page). Those, and the escape
character "~" itself, are written as "~XX" (hex): "a/b" is "a~2Fb", ".." is "~2E~2E" and
the empty name is "~". Everything else is left as is, so ordinary names ("default-worker")
keep their readable URLs, and reverse() percent-encodes the rest as for any segment.
"""

from __future__ import annotations

import re

from django.urls import register_converter

ESCAPE = "~"
_ESCAPED = re.compile(r"~([0-9A-Fa-f]{2})")
_NEEDS_ESCAPE = re.compile(r"[~/]")
DOT_SEGMENTS = frozenset({".", ".."})


def escape_segment(value: str) -> str:
    if value == "":
        return ESCAPE
    if value in DOT_SEGMENTS:
        return "~2E" * len(value)
    return _NEEDS_ESCAPE.sub(lambda match: f"~{ord(match.group()):02X}", value)


def unescape_segment(segment: str) -> str:
    """The value escape_segment wrote; ValueError (a 404) for a "~" it never writes."""
    if segment == ESCAPE:
        return ""
    value = _ESCAPED.sub(lambda match: chr(int(match.group(1), 16)), segment)
    if ESCAPE in _ESCAPED.sub("", segment):
        raise ValueError(f"{segment!r} has a '~' that is not an escape")
    return value


class NksSegmentConverter:
    regex = "[^/]+"

    def to_python(self, value: str) -> str:
        return unescape_segment(value)

    def to_url(self, value: str) -> str:
        return escape_segment(value)


# Registered here, once: both nks/urls.py and nks/api_urls.py import this module, and
# registering a converter name twice is deprecated.
register_converter(NksSegmentConverter, "nks")
