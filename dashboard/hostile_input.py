"""Hostile input: requests that carry a NUL, and untrusted text that would hide in a page.

Refuse requests that carry a NUL character where no legitimate client puts one.

PostgreSQL text cannot hold NUL, and psycopg refuses to send a parameter containing one
(DataError) before the query runs. Any path segment, query value or cookie that reaches a
lookup would then fail as a server error. Browsers never send NUL (not even in cookies,
which RFC 6265 forbids), so a request with one is hostile or broken: it is answered 400
here, once, instead of every view checking each value. Form fields refuse NUL on their own
(Django's ProhibitNullCharactersValidator), so request bodies are left to them.

Text a cluster wrote (a Lease's holderIdentity) may carry bidi controls (U+202E turns
"pod-1\u202egnp.exe" into what reads as another name) and other invisible characters.
HTML escaping leaves them in force, so pages pass such text through `visible_text` (the
`visible` filter of both template engines): each one is shown as its escape, as mail and
chat messages show it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.template import loader
from django.utils import translation
from django.utils.translation import gettext_lazy

from dashboard.api import json_error

NUL = "\x00"
# Control, format (all bidi overrides, embeddings, isolates and marks are format
# characters), line and paragraph separators, surrogates, private use and unassigned.
INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})
PROBLEM = gettext_lazy(
    "The request contains a NUL character (%00), which no page or API parameter accepts. "
    "Check the link or the script that sent it."
)


def visible_text(value: object) -> str:
    """`value` as text with each invisible character written as its escape (``\\u202e``,
    ``\\x1b``); text without any comes back unchanged. Still to be HTML-escaped."""
    text = "" if value is None else str(value)
    if text.isprintable():  # the common case, checked in C: no invisible character
        return text
    out = []
    for character in text:
        if unicodedata.category(character) in INVISIBLE_CATEGORIES:
            code = ord(character)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(character)
    return "".join(out)


def carries_nul(request: HttpRequest) -> bool:
    """A NUL in the path, in any query parameter's name or value, or in any cookie."""
    if NUL in request.path_info:
        return True
    if any(
        NUL in key or any(NUL in value for value in values) for key, values in request.GET.lists()
    ):
        return True
    return any(NUL in name or NUL in value for name, value in request.COOKIES.items())


def bad_request(request: HttpRequest) -> HttpResponse:
    if request.path_info.startswith("/api/"):
        with translation.override("en"):  # the API speaks English
            return json_error(str(PROBLEM), 400)
    # A page without base.html: its context processors would read the session and the
    # database, and nothing about this request is to be trusted. This runs before
    # LocaleMiddleware: the page's language is the browser's (the language cookie is only
    # compared with LANGUAGES, never used as it came).
    with translation.override(translation.get_language_from_request(request)):
        body = loader.get_template("errors/bad_request.html").render({"problem": PROBLEM})
    return HttpResponse(body, status=400)


class RejectNulMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if carries_nul(request):
            return bad_request(request)
        return self.get_response(request)
