"""`{% lease_table_region %}`: the Leases table region (id "lease-table"), drawn by Jinja2.

The region is polled every few seconds by every open browser. Its template,
templates/jinja2/leases/lease_table.html, renders with Jinja2 (autoescaped; see
dashboard/jinja2.py), which spends a fraction of the time Django's engine needs on its hundred
rows. The full page and the htmx refresh both render it through this tag, from the same
context, so the two cannot drift apart.
"""

from __future__ import annotations

from django import template
from django.template.context import Context
from django.utils.safestring import SafeString

from dashboard.jinja2 import render_jinja2

register = template.Library()

# What the region reads from the page's context; nothing else of the page reaches it.
CONTEXT_NAMES = ("table", "filters", "refresh_seconds", "flap_rule")


@register.simple_tag(takes_context=True)
def lease_table_region(context: Context) -> SafeString:
    region = {name: context[name] for name in CONTEXT_NAMES}
    return render_jinja2("leases/lease_table.html", region, context["request"])
