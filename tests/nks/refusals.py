"""A refused resize comes back as the nodegroup page (post/redirect/get): the POST answers 303
to the page's own URL with the refusal's token, and the page shows the form bound again."""

from __future__ import annotations

from typing import Any


def assert_refused_back_on_the_page(response: Any) -> None:
    """``response`` is a form POST made with ``follow=True`` that was refused."""
    assert response.redirect_chain, f"no redirect: {response.status_code}"
    location, status = response.redirect_chain[-1]
    assert status == 303, status
    path, _, query = location.partition("?")
    assert path.endswith("/") and "/nodegroups/" in path and not path.endswith("/resize/"), path
    assert query.startswith("refused=") and "#" not in query, query
    assert response.status_code == 200
