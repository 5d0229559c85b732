"""Natural order for names: `worker-2` before `worker-10`, in Python and in SQL.

`natural_key` turns a name into text whose plain (byte) order is the natural order, so the
database can sort and page on a stored column with an ordinary index, and Python code sorts
by the same key.
"""

from __future__ import annotations

import re

_DIGITS = re.compile(r"\d+")
# Digit runs longer than this keep their tail order only; no Kubernetes name has such runs
# that matter (names are at most 253 characters).
_MAX_RUN = 99


def _padded(match: re.Match[str]) -> str:
    # Leading zeros dropped, then the run's length as two digits in front: a longer number
    # is a bigger number, and numbers of one length compare digit by digit.
    digits = match.group().lstrip("0") or "0"
    return f"{min(len(digits), _MAX_RUN):02d}{digits}"


def natural_key(name: str) -> str:
    """Text that sorts like `name` read by a person (worker-2 < worker-10 < worker-010a)."""
    return _DIGITS.sub(_padded, name)
