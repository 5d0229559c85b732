"""The hashed lock files: the same pins as requirements*.txt, every one with its hashes.

`make lock` re-pins requirements*.txt; a lock left behind (or edited by hand) fails here,
so the image and `make install` never install something other than what was reviewed.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(path: Path) -> dict[str, str]:
    """name -> version of a requirements file, following -r includes."""
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.startswith("-r "):
            pins |= _pins(path.parent / line.split(maxsplit=1)[1])
        elif match := PIN.match(line):
            pins[_name(match[1])] = match[2]
    return pins


def _locked(path: Path) -> dict[str, tuple[str, frozenset[str]]]:
    """name -> (version, hashes) of a pip-compile --generate-hashes file."""
    entries: dict[str, tuple[str, frozenset[str]]] = {}
    # A requirement and its hashes are one logical line, continued with backslashes.
    for logical in re.sub(r"\\\n", " ", path.read_text()).splitlines():
        if match := PIN.match(logical):
            entries[_name(match[1])] = (match[2], frozenset(HASH.findall(logical)))
    return entries


@pytest.mark.parametrize(
    ("requirements", "lock"),
    [("requirements.txt", "requirements.lock"), ("requirements-dev.txt", "requirements-dev.lock")],
)
def test_each_lock_pins_what_its_requirements_file_pins_with_hashes(
    requirements: str, lock: str
) -> None:
    locked = _locked(REPO_ROOT / lock)
    assert {name: version for name, (version, _) in locked.items()} == _pins(
        REPO_ROOT / requirements
    )
    assert not [name for name, (_, hashes) in locked.items() if not hashes]


def test_the_locks_agree_on_the_runtime_packages() -> None:
    runtime = _locked(REPO_ROOT / "requirements.lock")
    development = _locked(REPO_ROOT / "requirements-dev.lock")
    assert {name: development[name] for name in runtime} == runtime


@pytest.mark.parametrize("lock", ["requirements.lock", "requirements-dev.lock"])
def test_a_lock_names_no_index_and_no_local_path(lock: str) -> None:
    text = (REPO_ROOT / lock).read_text()
    # --index-url, --extra-index-url, --find-links, --trusted-host, -e: only hashes are options.
    assert not re.search(r"^\s*-(?!-hash=)", text, flags=re.MULTILINE)
    assert "://" not in text and "file:" not in text and "/opt/" not in text


def _run_lines(dockerfile: str) -> list[str]:
    joined = re.sub(r"\\\n", " ", dockerfile)
    return [line for line in joined.splitlines() if line.startswith("RUN ")]


def test_the_image_installs_the_runtime_lock_by_hash_from_a_named_base() -> None:
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    installs = [line for line in _run_lines(dockerfile) if "pip install" in line]
    assert len(installs) == 1
    words = shlex.split(installs[0])
    assert {"--require-hashes", "--no-deps"} <= set(words)
    assert words[words.index("-r") + 1] == "requirements.lock"
    (base,) = [line.split()[1] for line in dockerfile.splitlines() if line.startswith("FROM ")]
    # A specific release tag; the digest is the deployer's to read from their registry.
    assert base == "python:3.12-slim-bookworm"


def test_make_install_installs_the_development_lock_by_hash() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    stamp = makefile[makefile.index("$(STAMP):") : makefile.index("install: $(STAMP)")]
    assert "requirements-dev.lock" in stamp.splitlines()[0]
    assert "--require-hashes --no-deps -r requirements-dev.lock" in stamp
