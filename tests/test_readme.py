from __future__ import annotations

import re

from tests.conftest import REPO_ROOT


def test_readme_quick_start_leads_with_the_two_commands() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    quick_start = readme.split("## Quick start", 1)[1]
    commands = re.findall(r"^make \w+", quick_start, flags=re.MULTILINE)
    assert commands[:2] == ["make run", "make test"]


def test_every_environment_variable_read_by_settings_is_documented() -> None:
    settings_source = (REPO_ROOT / "dashboard" / "settings.py").read_text()
    read = set(re.findall(r'env_\w+\(\s*"([A-Z_]+)"', settings_source))
    readme = (REPO_ROOT / "README.md").read_text()
    documented = set(re.findall(r"^\| `([A-Z_]+)` \|", readme, flags=re.MULTILINE))
    assert read, "the pattern found no variables"
    assert read - documented == set()
