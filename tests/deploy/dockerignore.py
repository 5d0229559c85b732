"""A .dockerignore matcher with docker's semantics, so a test can see the build context.

Docker (moby/patternmatcher) reads each line as a Go filepath.Match pattern, cleaned and
with any leading "/" dropped; "**" matches any number of directories, even none; "!" makes
an exception. A path is excluded when the last pattern matching it, or one of its parent
directories, is an exclusion. This is a transcription of that code, not an approximation by
fnmatch (whose "*" crosses "/").
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

# Characters that mean something to a regular expression but nothing to filepath.Match.
_ESCAPE = set(".+()|{}$")


@dataclass(frozen=True)
class Pattern:
    text: str
    exclusion: bool
    regex: re.Pattern[str]

    def match(self, path: str) -> bool:
        return self.regex.match(path) is not None


def _compile(pattern: str) -> re.Pattern[str]:
    regex = "^"
    index = 0
    while index < len(pattern):
        char = pattern[index]
        index += 1
        if char == "*":
            if index < len(pattern) and pattern[index] == "*":
                index += 1
                if index < len(pattern) and pattern[index] == "/":
                    index += 1  # "**/" is "**"
                # "**" at the end takes everything; elsewhere any number of directories.
                regex += ".*" if index == len(pattern) else "(.*/)?"
            else:
                regex += "[^/]*"
        elif char == "?":
            regex += "[^/]"
        elif char in _ESCAPE:
            regex += "\\" + char
        elif char == "\\":
            if index < len(pattern):
                regex += "\\" + pattern[index]
                index += 1
            else:
                regex += "\\\\"
        elif char in "[]":
            regex += char  # a character class, as in filepath.Match
        else:
            regex += char
    return re.compile(regex + "$", re.DOTALL)


def parse(text: str) -> list[Pattern]:
    """The patterns of a .dockerignore file, in order."""
    patterns = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        exclusion = line.startswith("!")
        if exclusion:
            line = line[1:].strip()
        cleaned = posixpath.normpath(line)
        cleaned = cleaned.lstrip("/") or "."
        patterns.append(Pattern(raw, exclusion, _compile(cleaned)))
    return patterns


def is_excluded(path: str, patterns: list[Pattern]) -> bool:
    """Whether docker leaves `path` (relative, "/"-separated) out of the build context."""
    excluded = False
    parent = posixpath.dirname(path)
    parents = parent.split("/") if parent else []
    for pattern in patterns:
        # A pattern that cannot change the answer is skipped, as docker does.
        if pattern.exclusion != excluded:
            continue
        matched = pattern.match(path) or any(
            pattern.match("/".join(parents[: depth + 1])) for depth in range(len(parents))
        )
        if matched:
            excluded = not pattern.exclusion
    return excluded


def build_context(source: Path, destination: Path) -> list[str]:
    """Copy what docker would send from `source` into `destination`; returns those paths."""
    patterns = parse((source / ".dockerignore").read_text(encoding="utf-8"))
    sent = []
    for directory, _, files in os.walk(source):
        for name in files:
            path = Path(directory, name).relative_to(source).as_posix()
            if is_excluded(path, patterns):
                continue
            sent.append(path)
            target = destination / path
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source / path, target)
    return sorted(sent)
