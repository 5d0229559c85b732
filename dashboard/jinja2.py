"""Django's second template engine, Jinja2, for the hottest regions, and how to render with it.

The Leases table is re-rendered every few seconds for every open browser. Jinja2 compiles a
template to Python once, so its hundred rows cost a fraction of what Django's engine needs,
without building HTML in Python. Every other page stays with Django templates.
"""

from __future__ import annotations

import html
from typing import Any

import markupsafe
from django.http import HttpRequest
from django.template import engines
from django.templatetags.static import static
from django.urls import reverse
from django.utils import translation
from django.utils.module_loading import import_string
from django.utils.safestring import SafeString, mark_safe
from jinja2 import Environment, StrictUndefined
from jinja2.compiler import CodeGenerator, Frame
from jinja2.nodes import Expr

try:
    # MarkupSafe's text escaping without the Markup wrapper: its C speedups when built.
    from markupsafe._speedups import _escape_inner as _escape_text
except ImportError:  # pragma: no cover (pure-Python MarkupSafe)
    from markupsafe._native import _escape_inner as _escape_text


def escape_output(value: Any) -> str:
    """What autoescape prints for `{{ value }}`: text escaped as Django escapes it (&quot;,
    &#x27;), anything else (Markup, numbers) as Jinja2 does."""
    if type(value) is str:
        # Most printed text (names, times, states) has nothing to escape: MarkupSafe's C
        # scan says so in a fifth of html.escape's five passes, and hands back the very
        # same object then. Text that needs escaping gets Django's spelling.
        return value if _escape_text(value) is value else html.escape(value)
    return markupsafe.escape(value)


class EscapingCodeGenerator(CodeGenerator):
    """Compiles each autoescaped `{{ value }}` to `environment.escape_output(value)`.

    Jinja2's own `escape` (MarkupSafe) builds a Markup object for every value: for the ~1,900
    values of one Leases table that is two thirds of the render (measured: 1.3 ms of 1.9).
    Only the top of an output needs no Markup: macro and block results are still wrapped in
    Markup by Jinja2, so nothing is escaped twice.
    """

    def _output_child_pre(self, node: Expr, frame: Frame, finalize: Any) -> None:
        if frame.eval_ctx.volatile or not frame.eval_ctx.autoescape:
            super()._output_child_pre(node, frame, finalize)
            return
        self.write("environment.escape_output(")
        if finalize.src is not None:
            self.write(finalize.src)


class DashboardEnvironment(Environment):
    code_generator_class = EscapingCodeGenerator
    escape_output = staticmethod(escape_output)


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
    # Jinja2's i18n extension with Django's catalogs, so `{{ _("...") }}` speaks the
    # request's language. Old-style calls (`{{ _("Held by %(who)s")|format(who=...) }}`):
    # Django's makemessages reads `_("...")` at the start of a `{{ }}` only without
    # arguments, and the whole formatted text is escaped on output like any value.
    extensions = [*options.pop("extensions", ()), "jinja2.ext.i18n"]
    env = DashboardEnvironment(autoescape=True, extensions=extensions, **options)
    env.install_gettext_callables(  # type: ignore[attr-defined]
        gettext=translation.gettext,
        ngettext=translation.ngettext,
        pgettext=translation.pgettext,
        npgettext=translation.npgettext,
        newstyle=False,
    )
    env.globals.update(url=reverse, static=static)
    env.filters.update(filters)
    return env


def render_jinja2(template_name: str, context: dict[str, Any], request: HttpRequest) -> SafeString:
    """A Jinja2 template's HTML, safe to place in a Django template.

    MarkupSafe, which still escapes what is not plain text, writes a quote as &#34; and an
    apostrophe as &#39;, Django as &quot; and &#x27;: the same characters. Respelt here, a
    value reads the same on every page, whichever engine drew it. No other &#34; or &#39; can
    be in the output: text that contained one had its "&" escaped to &amp;.
    """
    text = engines["jinja2"].get_template(template_name).render(context, request)
    text = text.replace("&#34;", "&quot;").replace("&#39;", "&#x27;")
    return mark_safe(text)  # noqa: S308 (autoescaped template output)
