"""Django's second template engine, Jinja2, for the hottest regions, and how to render with it.

The Leases table is re-rendered every few seconds for every open browser. Jinja2 compiles a
template to Python once, so its hundred rows cost a fraction of what Django's engine needs,
without building HTML in Python. Every other page stays with Django templates.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.template import engines
from django.templatetags.static import static
from django.urls import reverse
from django.utils.module_loading import import_string
from django.utils.safestring import SafeString, mark_safe
from jinja2 import Environment, StrictUndefined


def environment(**options: Any) -> Environment:
    """Named by the TEMPLATES entry in settings; Django passes the loader and its defaults."""
    # Whatever the settings say: these templates show what clusters wrote.
    options.pop("autoescape", None)
    # A misspelt name fails the test that renders it, instead of printing nothing.
    options["undefined"] = StrictUndefined
    options.setdefault("trim_blocks", True)
    options.setdefault("lstrip_blocks", True)
    # Dotted paths, so that this neutral module imports no feature app's template tags.
    filters = {name: import_string(path) for name, path in options.pop("filters", {}).items()}
    env = Environment(autoescape=True, **options)
    env.globals.update(url=reverse, static=static)
    env.filters.update(filters)
    return env


def render_jinja2(template_name: str, context: dict[str, Any], request: HttpRequest) -> SafeString:
    """A Jinja2 template's HTML, safe to place in a Django template.

    MarkupSafe writes an escaped quote as &#34; and an apostrophe as &#39;, Django as &quot;
    and &#x27;: the same characters. Respelt here, a value a cluster wrote reads the same on
    every page, whichever engine drew it. No other &#34; or &#39; can be in the output: text
    that contained one had its "&" escaped to &amp;.
    """
    html = engines["jinja2"].get_template(template_name).render(context, request)
    html = html.replace("&#34;", "&quot;").replace("&#39;", "&#x27;")
    return mark_safe(html)  # noqa: S308 (autoescaped template output)
