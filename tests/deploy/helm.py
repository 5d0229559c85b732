"""The Helm chart, rendered offline with Helm v4's own library (helm-python-sdk, no binary).

`render` is what `helm template` prints, parsed: every object of the release, hooks and the
`helm test` pod included, in template order. The same render is what the README's steps
install, so a test that reads it reads what a cluster would be sent.
"""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

import helm_python
import yaml

from tests.conftest import REPO_ROOT

CHART = REPO_ROOT / "deploy" / "helm" / "lease-dashboard"
PRODUCTION_VALUES = REPO_ROOT / "deploy" / "helm" / "values.production.example.yaml"
RELEASE = "lease-dashboard"
NAMESPACE = "lease-dashboard"
# The oldest Kubernetes the chart claims (Chart.yaml kubeVersion) is 1.24, checked by hand
# against a real v1.24 API server; the schema check uses a current release's schema.
KUBERNETES_VERSION = "1.30.0"

Manifest = dict[str, Any]


def production_values() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load(PRODUCTION_VALUES.read_text())
    return values


@functools.cache
def _render(values_json: str, name: str, namespace: str) -> tuple[Manifest, ...]:
    with helm_python.Chart.load(CHART) as chart:
        rendered = chart.render(
            json.loads(values_json), name=name, namespace=namespace, is_install=True
        )
    return tuple(
        document
        for path, text in sorted(rendered.items())
        if path.endswith((".yaml", ".yml"))
        for document in yaml.safe_load_all(text)
        if document
    )


def render(
    values: dict[str, Any] | None = None, *, name: str = RELEASE, namespace: str = NAMESPACE
) -> list[Manifest]:
    """The release's objects; each call gets its own copies, free to change."""
    key = json.dumps(values or {}, sort_keys=True)
    return copy.deepcopy(list(_render(key, name, namespace)))


def of_kind(manifests: list[Manifest], kind: str) -> list[Manifest]:
    return [manifest for manifest in manifests if manifest["kind"] == kind]


def component(manifest: Manifest) -> str:
    return str(manifest["metadata"]["labels"]["app.kubernetes.io/component"])


def deployment(manifests: list[Manifest], name: str) -> Manifest:
    (found,) = [m for m in of_kind(manifests, "Deployment") if component(m) == name]
    return found


def pod_specs(manifests: list[Manifest]) -> list[tuple[str, Manifest]]:
    """(object name, pod spec) of every pod the release makes: Deployments, the Job, tests."""
    specs = [
        (m["metadata"]["name"], m["spec"]["template"]["spec"])
        for m in manifests
        if m["kind"] in ("Deployment", "Job")
    ]
    specs += [(m["metadata"]["name"], m["spec"]) for m in of_kind(manifests, "Pod")]
    return specs
