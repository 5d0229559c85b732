"""Guards for the Korean translation (issue 12).

a. Every message `makemessages -l ko` extracts from the product has a Korean translation in
   locale/ko: not empty, not fuzzy, with the same placeholders as its msgid.
b. No template shows English that is not marked for translation: the text between tags,
   and the attributes a person reads (title, aria-label, placeholder, alt), of every Django
   and Jinja2 template, API terms, units and symbols excepted.
c. Each committed .mo file says what its .po file says (a .po edited without compiling would
   otherwise be silently ignored at run time).
"""

from __future__ import annotations

import ast
import gettext
import os
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path

import pytest
from django.template import engines
from django.template.base import Lexer, TokenType

from tests.conftest import REPO_ROOT, skip_or_fail

LOCALE = REPO_ROOT / "locale"
TEMPLATES = REPO_ROOT / "templates"
JINJA2_TEMPLATES = TEMPLATES / "jinja2"
# What makemessages must not read: not the product (common.md, "Extract your msgids").
NOT_PRODUCT = ("fakes/*", "tests/*", "bench/*", ".venv/*", "deploy/*")


# --- A small .po reader (no new dependency) -------------------------------------------------


@dataclass
class Entry:
    msgid: str
    msgctxt: str | None = None
    msgid_plural: str | None = None
    msgstr: dict[int, str] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)
    locations: list[str] = field(default_factory=list)

    @property
    def key(self) -> tuple[str | None, str]:
        return (self.msgctxt, self.msgid)

    @property
    def translated(self) -> bool:
        return bool(self.msgstr) and all(self.msgstr.values()) and "fuzzy" not in self.flags


_KEYWORD = re.compile(r'^(msgctxt|msgid_plural|msgid|msgstr)(?:\[(\d+)\])?\s+(".*")\s*$')


def read_po(path: Path) -> list[Entry]:
    """The entries of a .po file, header included (msgid ""); obsolete (#~) ones skipped."""
    entries: list[Entry] = []
    current: Entry | None = None
    last: tuple[str, int] | None = None
    pending_flags: set[str] = set()
    pending_locations: list[str] = []

    def finish() -> None:
        nonlocal current, last
        if current is not None:
            entries.append(current)
        current, last = None, None

    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#~"):
            continue
        if line.startswith("#"):
            finish()
            if line.startswith("#,"):
                pending_flags.update(flag.strip() for flag in line[2:].split(","))
            elif line.startswith("#:"):
                pending_locations.extend(line[2:].split())
            continue
        match = _KEYWORD.match(line)
        if match:
            keyword, index, literal = match.group(1), int(match.group(2) or 0), match.group(3)
            value = ast.literal_eval(literal)
            # A new msgctxt, or a msgid not preceded by its own msgctxt, starts an entry.
            if keyword == "msgctxt" or (
                keyword == "msgid" and (current is None or last is None or last[0] != "msgctxt")
            ):
                finish()
                current = Entry(msgid="", flags=pending_flags, locations=pending_locations)
                pending_flags, pending_locations = set(), []
            assert current is not None, f"{path}: {keyword} outside an entry"
            if keyword == "msgstr":
                current.msgstr[index] = value
            else:
                setattr(current, keyword, value)
            last = (keyword, index)
            continue
        if line.startswith('"') and current is not None and last is not None:
            value = ast.literal_eval(line)
            keyword, index = last
            if keyword == "msgstr":
                current.msgstr[index] += value
            else:
                setattr(current, keyword, (getattr(current, keyword) or "") + value)
            continue
        raise AssertionError(f"{path}: cannot read the line {line!r}")
    finish()
    return entries


def korean_catalogs() -> list[Path]:
    return sorted(LOCALE.glob("ko/LC_MESSAGES/django.po"))


def all_catalogs() -> list[Path]:
    return sorted(LOCALE.rglob("django.po"))


# --- a. Every extracted message is translated -----------------------------------------------

# Which messages belong to which part of the product, by where they are used: a failure then
# names the part that is behind.
AREAS = {
    "dashboard": (
        "dashboard/*",
        "templates/base.html",
        "templates/[0-9_]*.html",
        "templates/registration/*",
        "templates/dashboard/*",
        "templates/errors/*",
    ),
    "leases": ("leases/*", "templates/leases/*", "templates/jinja2/leases/*"),
    "nks": ("nks/*", "templates/nks/*"),
    "alerts": ("alerts/*", "templates/alerts/*"),
}

# %(name)s, %s, %d, %r and {name}: what a msgstr must keep (%% is a literal percent sign).
_PLACEHOLDER = re.compile(r"%(?:\([^)]+\))?[-#0 +]*\d*(?:\.\d+)?[sdifrx]|\{[\w.]*\}")


def placeholders(text: str) -> list[str]:
    return sorted(_PLACEHOLDER.findall(text.replace("%%", "")))


def _copy_ignoring(directory: str, names: list[str]) -> set[str]:
    skip = {".git", ".venv", "var", "node_modules", "staticfiles", "__pycache__", ".pytest_cache"}
    if Path(directory) == REPO_ROOT:
        # The catalogs themselves: makemessages would merge into them.
        skip.add("locale")
    return {name for name in names if name in skip}


@pytest.fixture(scope="module")
def extracted(tmp_path_factory: pytest.TempPathFactory) -> list[Entry]:
    """What makemessages extracts for Korean, from a copy (it writes into locale/)."""
    if shutil.which("xgettext") is None or shutil.which("msgmerge") is None:
        skip_or_fail(
            "needs GNU gettext (xgettext, msgmerge) to extract messages:"
            " apt-get install -y gettext",
            required_by="REQUIRE_SERVICES",
        )
    copy = tmp_path_factory.mktemp("i18n") / "repo"
    shutil.copytree(REPO_ROOT, copy, ignore=_copy_ignoring)
    (copy / "locale").mkdir()
    command = [sys.executable, "manage.py", "makemessages", "-l", "ko", "--no-obsolete"]
    for pattern in NOT_PRODUCT:
        command.append(f"--ignore={pattern}")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "dashboard.settings"}
    result = subprocess.run(
        command, cwd=copy, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, f"makemessages failed:\n{result.stdout}\n{result.stderr}"
    return [entry for entry in read_po(copy / "locale/ko/LC_MESSAGES/django.po") if entry.msgid]


@pytest.fixture(scope="module")
def korean() -> dict[tuple[str | None, str], Entry]:
    """The union of the Korean catalogs: a message translated in any of them counts."""
    union: dict[tuple[str | None, str], Entry] = {}
    for path in korean_catalogs():
        for entry in read_po(path):
            if entry.msgid and (entry.key not in union or entry.translated):
                union[entry.key] = entry
    return union


def _in_area(entry: Entry, area: str) -> bool:
    files = [location.rsplit(":", 1)[0] for location in entry.locations]
    return any(fnmatch(name, pattern) for name in files for pattern in AREAS[area])


def _describe(entry: Entry) -> str:
    context = f"[{entry.msgctxt}] " if entry.msgctxt else ""
    where = entry.locations[0] if entry.locations else "?"
    return f"{where}: {context}{entry.msgid!r}"


@pytest.mark.parametrize("area", sorted(AREAS))
def test_every_extracted_message_has_a_korean_translation(
    area: str, extracted: list[Entry], korean: dict[tuple[str | None, str], Entry]
) -> None:
    missing = [
        _describe(entry)
        for entry in extracted
        if _in_area(entry, area) and not (entry.key in korean and korean[entry.key].translated)
    ]
    assert not missing, (
        f"{len(missing)} message(s) of {area} have no Korean translation (or a fuzzy one) "
        f"under locale/:\n" + "\n".join(missing)
    )


def test_every_extracted_message_belongs_to_an_area(extracted: list[Entry]) -> None:
    # A message used only outside the areas would never be checked by the test above.
    stray = [
        _describe(entry) for entry in extracted if not any(_in_area(entry, area) for area in AREAS)
    ]
    assert not stray, "messages outside every area:\n" + "\n".join(stray)


@pytest.mark.parametrize(
    "catalog", korean_catalogs(), ids=lambda path: str(path.relative_to(LOCALE))
)
def test_korean_translations_keep_the_placeholders(catalog: Path) -> None:
    wrong = []
    for entry in read_po(catalog):
        if not entry.msgid or not entry.translated:
            continue
        for index, text in entry.msgstr.items():
            source = entry.msgid_plural if entry.msgid_plural and index > 0 else entry.msgid
            # Korean has one plural form: it answers for the plural msgid too, whose
            # placeholders are the ones that must survive.
            expected = placeholders(entry.msgid_plural or source)
            if placeholders(text) != expected:
                wrong.append(f"{_describe(entry)} -> {text!r}")
    assert not wrong, "placeholders changed in translation:\n" + "\n".join(wrong)


@pytest.mark.parametrize(
    "catalog", korean_catalogs(), ids=lambda path: str(path.relative_to(LOCALE))
)
def test_korean_catalog_header_says_korean_with_one_plural_form(catalog: Path) -> None:
    header = next(entry for entry in read_po(catalog) if entry.msgid == "")
    text = header.msgstr[0]
    assert "Language: ko\n" in text
    assert "charset=UTF-8" in text
    assert "Plural-Forms: nplurals=1; plural=0;" in text


# --- b. No template text left unmarked ------------------------------------------------------

# Words that stay as written in every language: API terms, Kubernetes kinds and product names
# (common.md), units and abbreviations. Upper-case identifiers (FRESH, CREATE_COMPLETE,
# ALERT_EMAIL_TO), camelCase fields (holderIdentity) and snake_case names (health_status)
# are API or configuration terms too and pass by their shape.
ALLOWED_WORDS = frozenset(
    {
        "Lease",
        "Leases",
        "nodegroup",
        "nodegroups",
        "Node",
        "Nodes",
        "Pod",
        "Pods",
        "Namespace",
        "Kubernetes",
        "NKS",
        "Dooray",
        "Slack",
        "Celery",
        "Redis",
        "PostgreSQL",
        "OIDC",
        "UTC",
        "ISO",
        "JSON",
        "API",
        "URL",
        "HTTP",
        "ID",
        "k8s",
        "kube",
        # A Node condition's own values, as Kubernetes writes them.
        "Ready",
        "NotReady",
        "Unknown",
        "True",
        "False",
        # Units and symbols a number carries in every language.
        "s",
        "ms",
        "min",
        "h",
        "d",
        "x",
    }
)
_IDENTIFIER_SHAPES = (
    re.compile(r"^[A-Z][A-Z0-9_]+$"),  # FRESH, CREATE_COMPLETE, ALERT_EMAIL_TO
    re.compile(r"^[a-z]+[A-Z][A-Za-z0-9]*$"),  # holderIdentity, leaseDurationSeconds
    re.compile(r"^\w+_\w+$"),  # health_status, node_count
)
_WORD = re.compile(r"[^\W\d_][\w]*")
HUMAN_ATTRIBUTES = ("title", "aria-label", "placeholder", "alt", "aria-description")
_ATTRIBUTE = re.compile(
    r"\s(?:" + "|".join(HUMAN_ATTRIBUTES) + r""")\s*=\s*(?:"([^"]*)"|'([^']*)')""",
    re.IGNORECASE,
)
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_TAG = re.compile(r"<[^>]*>", re.DOTALL)
_CODE = re.compile(r"<(pre|code|kbd|samp)\b[^>]*>.*?</\1\s*>", re.DOTALL | re.IGNORECASE)
_ENTITY = re.compile(r"&#?\w+;")
# What stands for a {{ value }} or {% tag %} in the text left to check: never a letter.
HOLE = "\x00"


def is_allowed(word: str) -> bool:
    return word in ALLOWED_WORDS or any(shape.match(word) for shape in _IDENTIFIER_SHAPES)


def unmarked_words(text: str) -> list[tuple[int, str]]:
    """(line, word) of every word a person would read that no translation covers.

    `text` is a template with its tags and values replaced by HOLE and its translated and
    commented parts removed, line breaks kept.
    """
    text = _HTML_COMMENT.sub(lambda match: "\n" * match.group(0).count("\n"), text)
    found: list[tuple[int, str]] = []
    for match in _ATTRIBUTE.finditer(text):
        value = match.group(1) if match.group(1) is not None else match.group(2)
        line = text.count("\n", 0, match.start()) + 1
        found.extend((line, word) for word in _WORD.findall(_ENTITY.sub(" ", value)))
    # Code samples (<pre>, <code>) are commands and names, the same in every language.
    text = _CODE.sub(lambda match: HOLE + "\n" * match.group(0).count("\n"), text)
    # Tags (with their other attributes) are markup, not words: only a break between the
    # words on either side, and the line breaks, stay.
    prose = _TAG.sub(lambda match: " " + "\n" * match.group(0).count("\n"), text)
    for number, line in enumerate(prose.split("\n"), start=1):
        found.extend((number, word) for word in _WORD.findall(_ENTITY.sub(" ", line)))
    # By line, each line's words in their order (attributes first).
    return sorted(
        ((line, word) for line, word in found if not is_allowed(word)), key=lambda x: x[0]
    )


def django_template_text(source: str) -> str:
    """The template's text with translated parts, comments, values and tags taken out."""
    out: list[str] = []
    skipping: str | None = None  # the end tag of the block being skipped
    for token in Lexer(source).tokenize():
        contents = token.contents.strip()
        name = contents.split(None, 1)[0] if contents else ""
        breaks = "\n" * token.contents.count("\n")
        if skipping:
            if token.token_type == TokenType.BLOCK and name == skipping:
                skipping = None
            out.append(breaks)  # keeps the line numbers of what follows right
            continue
        if token.token_type == TokenType.TEXT:
            out.append(token.contents)
        elif token.token_type == TokenType.BLOCK and name in ("blocktranslate", "blocktrans"):
            skipping = "endblocktranslate" if name == "blocktranslate" else "endblocktrans"
            out.append(HOLE + breaks)
        elif token.token_type == TokenType.BLOCK and name == "comment":
            skipping = "endcomment"
            out.append(breaks)
        elif token.token_type == TokenType.COMMENT:
            out.append(breaks)
        else:
            out.append(HOLE + breaks)
    return "".join(out)


def jinja2_template_text(source: str) -> str:
    """The same for a Jinja2 template: its `data` tokens, {% trans %} blocks taken out."""
    out: list[str] = []
    in_trans = False
    previous = ""
    for _line, kind, value in engines["jinja2"].env.lex(source):
        if kind == "name" and previous == "block_begin" and value in ("trans", "pluralize"):
            in_trans = True
        elif kind == "name" and previous == "block_begin" and value == "endtrans":
            in_trans = False
        if kind == "data" and not in_trans:
            out.append(value)
        elif kind in ("variable_begin", "block_begin"):
            out.append(HOLE)
        elif kind == "data" or kind in ("whitespace", "string"):
            out.append("\n" * value.count("\n"))
        if kind != "whitespace":
            previous = kind
    return "".join(out)


def _templates() -> Iterator[Path]:
    for path in sorted(TEMPLATES.rglob("*")):
        if path.is_file() and path.suffix in (".html", ".txt"):
            yield path


@pytest.mark.parametrize(
    "template", list(_templates()), ids=lambda path: str(path.relative_to(TEMPLATES))
)
def test_template_has_no_text_unmarked_for_translation(template: Path) -> None:
    source = template.read_text(encoding="utf-8")
    if template.is_relative_to(JINJA2_TEMPLATES):
        text = jinja2_template_text(source)
    else:
        text = django_template_text(source)
    words = unmarked_words(text)
    by_line: dict[int, list[str]] = defaultdict(list)
    for line, word in words:
        by_line[line].append(word)
    report = "\n".join(f"  line {line}: {' '.join(found)}" for line, found in by_line.items())
    assert not words, (
        f"{template.relative_to(REPO_ROOT)} has text not marked for translation:\n{report}"
    )


def test_the_template_scan_finds_unmarked_text_and_passes_marked_text() -> None:
    source = (
        '{% load i18n %}<p title="Hover text">Plain words {{ name }}</p>\n'
        '{% translate "Marked" %} {% blocktranslate %}Also {{ x }} marked{% endblocktranslate %}\n'
        "{% comment %}A comment{% endcomment %}{# another #}<!-- and HTML's -->\n"
        '<span aria-label="{% translate "ok" %}">FRESH holderIdentity health_status 5 s</span>'
    )
    assert unmarked_words(django_template_text(source)) == [
        (1, "Hover"),
        (1, "text"),
        (1, "Plain"),
        (1, "words"),
    ]
    jinja = '<td title="Exact">{{ _("Marked") }} Loose {% trans %}In trans{% endtrans %}</td>'
    assert unmarked_words(jinja2_template_text(jinja)) == [(1, "Exact"), (1, "Loose")]


# --- c. Compiled catalogs match their sources -----------------------------------------------


@pytest.mark.parametrize("catalog", all_catalogs(), ids=lambda path: str(path.parent))
def test_committed_mo_matches_its_po(catalog: Path) -> None:
    compiled = catalog.with_suffix(".mo")
    assert compiled.exists(), f"{compiled.relative_to(REPO_ROOT)} is missing: make compilemessages"
    with compiled.open("rb") as handle:
        mo = gettext.GNUTranslations(handle)
    # msgfmt leaves out untranslated and fuzzy entries; the header is compared apart.
    expected: dict[object, str] = {}
    for entry in read_po(catalog):
        if not entry.msgid or not entry.translated:
            continue
        key = f"{entry.msgctxt}\x04{entry.msgid}" if entry.msgctxt is not None else entry.msgid
        if entry.msgid_plural is not None:
            for index, text in entry.msgstr.items():
                expected[(key, index)] = text
        else:
            expected[key] = entry.msgstr[0]
    actual = {key: text for key, text in mo._catalog.items() if key not in ("", ("", 0))}
    stale = sorted(
        str(key) for key in expected.keys() | actual.keys() if expected.get(key) != actual.get(key)
    )
    assert not stale, (
        f"{compiled.relative_to(REPO_ROOT)} differs from its .po (run make compilemessages):\n"
        + "\n".join(stale[:20])
    )
