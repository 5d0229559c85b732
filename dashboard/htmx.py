"""Render a page, or just the region an htmx request asked for."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template import TemplateDoesNotExist
from django.template.loader import get_template
from django.utils import timezone, translation


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


def shared_partial(
    request: HttpRequest, target: str, seconds: int, render: Callable[[], HttpResponse]
) -> HttpResponse:
    """The `target` region, shared by everyone who asks for the same URL within `seconds`.

    For regions whose content depends only on the URL, the language and the time zone (no
    user, no CSRF token), which many engineers poll at once during an incident. Ages and
    countdowns tick in the browser from absolute times, so a copy up to a second old looks
    the same. Login is still checked for every request: only the rendering is shared.
    """
    htmx = getattr(request, "htmx", None)
    if not seconds or not htmx or htmx.target != target or request.method != "GET":
        return render()
    # Words and local times differ by reader: a Korean reader in Seoul and an English one in
    # UTC asking for the same URL each get their own copy.
    reader = f"{translation.get_language()}|{timezone.get_current_timezone_name()}|"
    digest = hashlib.sha256((reader + request.get_full_path()).encode()).hexdigest()
    key = f"partial:{target}:{digest}"
    body = cache.get(key)
    if body is None:
        response = render()
        if response.status_code == 200:
            cache.set(key, response.content, timeout=seconds)
        return response
    response = HttpResponse(body)
    response["Vary"] = "HX-Request, HX-Target"
    return response
