"""The one error type of the Kubernetes API client (re-exported by leases.kube.client)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KubeError(Exception):
    """A failed call, in words; `kind` lets the watcher choose how long to back off."""

    message: str
    kind: str  # auth, forbidden, not_found, gone, tls, timeout, connection, config, server, …
    status: int | None = None

    def __str__(self) -> str:
        return self.message

    @property
    def retryable(self) -> bool:
        return self.kind not in {"config"}
