"""The Jinja2 engine escapes every printed value once, the way Django does."""

from __future__ import annotations

from django.template import engines
from markupsafe import Markup

HOSTILE = '<a href="x">\'&'
ESCAPED = "&lt;a href=&quot;x&quot;&gt;&#x27;&amp;"


def render(source: str, **context: object) -> str:
    return engines["jinja2"].env.from_string(source).render(**context)


def test_text_is_escaped_as_django_escapes_it() -> None:
    assert render("<p title='{{ v }}'>{{ v }}</p>", v=HOSTILE) == (
        f"<p title='{ESCAPED}'>{ESCAPED}</p>"
    )


def test_macro_set_block_and_safe_markup_are_escaped_once() -> None:
    source = (
        "{% macro cell(x) %}<td>{{ x }}</td>{% endmacro %}"
        "{% set block %}<i>{{ v }}</i>{% endset %}"
        "{{ cell(v) }}|{{ block }}|{{ safe }}|{{ number }}|{{ v ~ '<' }}|{{ v|upper }}"
    )

    out = render(source, v=HOSTILE, safe=Markup("<b>kept</b>"), number=7)

    assert out == (
        f"<td>{ESCAPED}</td>|<i>{ESCAPED}</i>|<b>kept</b>|7|{ESCAPED}&lt;|"
        "&lt;A HREF=&quot;X&quot;&gt;&#x27;&amp;"
    )


def test_explicit_autoescape_false_block_prints_raw() -> None:
    assert render("{% autoescape false %}{{ v }}{% endautoescape %}", v="<b>") == "<b>"
