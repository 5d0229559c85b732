"""Each NKS account's client (``client_for``), kept per process so tokens and connections last.

The poller, the resize service and the ``add_nks_account`` command all call NKS through here:
the account row holds the URL and credentials, and settings hold the HTTP limits.
"""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings
from django.utils.translation import gettext

from dashboard.encryption import secret_problem
from nks import client as nks
from nks.models import NksAccount, nks_url_problem

_clients: dict[int, tuple[tuple[Any, ...], nks.NksClient]] = {}
_clients_lock = threading.Lock()


def client_for(account: NksAccount) -> nks.NksClient:
    """The account's client, kept per process so its token and connections are reused.

    Rebuilt when the account's URL or credentials (or the HTTP settings) change. A secret
    that cannot be decrypted is an account error, never an attempt with an empty password.
    """
    problem = secret_problem(account.password) or secret_problem(account.token)
    if problem is not None:
        raise nks.NksError(
            gettext("The account's stored credentials cannot be read: %(problem)s")
            % {"problem": problem},
            retryable=False,
            status=None,
            kind=nks.ErrorKind.CLIENT,
        )
    for url in (account.api_url, account.identity_url):
        # A row stored before these checks, or written around the forms: refused here too.
        url_problem = nks_url_problem(url) if url else None
        if url_problem is not None:
            raise nks.NksError(url_problem, retryable=False, status=None, kind=nks.ErrorKind.CLIENT)
    fingerprint = (
        *account.credentials_fingerprint(),
        settings.NKS_HTTP_TIMEOUT,
        settings.NKS_HTTP_DEADLINE_SECONDS,
        settings.NKS_HTTP_MAX_BODY_BYTES,
        settings.PRODUCTION,
        settings.NKS_HTTP_RETRIES,
        settings.NKS_HTTP_BACKOFF,
        settings.NKS_POLL_WORKERS,
    )
    with _clients_lock:
        cached = _clients.get(account.pk)
        if cached is not None and cached[0] == fingerprint:
            return cached[1]
        if account.token:
            credentials: dict[str, Any] = {"token": account.token}
        else:
            credentials = {
                "identity_url": account.identity_url,
                "tenant_id": account.tenant_id,
                "username": account.username,
                "password": account.password,
            }
        timeout = float(settings.NKS_HTTP_TIMEOUT)
        client = nks.NksClient(
            account.api_url,
            **credentials,
            timeout=nks.Timeouts(connect=min(5.0, timeout), read=timeout, write=timeout),
            retries=settings.NKS_HTTP_RETRIES,
            backoff=settings.NKS_HTTP_BACKOFF,
            max_backoff=max(settings.NKS_HTTP_BACKOFF, 8.0 if settings.NKS_HTTP_BACKOFF else 0),
            max_connections=settings.NKS_POLL_WORKERS,
            deadline=float(settings.NKS_HTTP_DEADLINE_SECONDS),
            max_body=settings.NKS_HTTP_MAX_BODY_BYTES,
            require_https=settings.PRODUCTION,
        )
        if cached is not None:
            cached[1].close()
        _clients[account.pk] = (fingerprint, client)
        return client


def discard_client(account_id: int) -> None:
    """Close and forget one account's client: a stopped poll's queued calls then fail at once
    instead of being made, and the next poll starts with fresh connections."""
    with _clients_lock:
        cached = _clients.pop(account_id, None)
    if cached is not None:
        cached[1].close()


def forget_clients() -> None:
    """Close every cached client (tests; a worker that shuts down)."""
    with _clients_lock:
        for _, client in _clients.values():
            client.close()
        _clients.clear()
