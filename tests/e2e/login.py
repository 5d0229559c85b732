"""Logging in through the form, as a person does (the login page is where the test is)."""

from __future__ import annotations

from typing import Any

# The top conftest's engineer fixture (erin) and operator fixture (olivia) have these.
ENGINEER = ("erin", "engineer-pass-123")
OPERATOR = ("olivia", "operator-pass-123")


def log_in(page: Any, user: tuple[str, str] = ENGINEER) -> None:
    """Fill in the login form the page shows with `user`'s name and password, and send it."""
    username, password = user
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("#password-login button[type=submit]")
