"""Text with nothing to escape is printed as is; one special character anywhere still gets
Django's spelling (the fast path of `dashboard.jinja2.escape_output`)."""

from __future__ import annotations

import pytest

from dashboard.jinja2 import escape_output

DJANGO = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;"}


def test_plain_text_is_printed_as_is() -> None:
    text = "node-00017 2026-11-30T22:00:00.000Z in 5 s — ok"
    assert escape_output(text) is text


@pytest.mark.parametrize("character", list(DJANGO))
def test_each_special_character_gets_djangos_spelling_wherever_it_is(character: str) -> None:
    for text in (character, f"a{character}", f"{character}b", f"a{character}b{character}"):
        assert escape_output(text) == text.replace(character, DJANGO[character])


def test_what_is_not_text_is_escaped_as_jinja2_does() -> None:
    assert escape_output(7) == "7"
    assert escape_output(None) == "None"
