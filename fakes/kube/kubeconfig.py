"""Kubeconfigs that point at a fake API server, written the way a bearer token deserves."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any


def kubeconfig_document(
    url: str, *, token: str | None, context_name: str, namespace: str = "default"
) -> dict[str, Any]:
    """A kubeconfig for `url` that kubectl and `kubernetes.config.load_kube_config` accept."""
    user: dict[str, Any] = {"token": token} if token else {}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context_name, "cluster": {"server": url}}],
        "users": [{"name": context_name, "user": user}],
        "contexts": [
            {
                "name": context_name,
                "context": {"cluster": context_name, "user": context_name, "namespace": namespace},
            }
        ],
        "current-context": context_name,
        "preferences": {},
    }


def write_private_file(path: Path, text: str) -> None:
    """Write atomically with mode 0600: a kubeconfig may hold a bearer token."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
