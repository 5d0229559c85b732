"""Render a page, or just the region an htmx request asked for."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template import TemplateDoesNotExist
from django.template.loader import get_template


def render_page(request: HttpRequest, template: str, context: dict[str, Any]) -> HttpResponse:
    """The whole page, or the partial named after the DOM id that htmx targets.

    Partials are named after the id of the element they replace, so the target id is all
    the view needs to know; an id without a partial gets the whole page.
    """
    target = request.htmx.target if getattr(request, "htmx", None) else None
    if target:
        try:
            get_template(f"{template}#{target}")
        except TemplateDoesNotExist:
            pass
        else:
            response = render(request, f"{template}#{target}", context)
            response["Vary"] = "HX-Request, HX-Target"
            return response
    response = render(request, template, context)
    response["Vary"] = "HX-Request, HX-Target"
    return response
