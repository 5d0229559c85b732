"""The import rules of docs/design.md, read from the source with ``ast``.

Nothing is imported: a rule holds for every line of the product, including modules that a
test run never loads (management commands, migrations' helpers). Each test lists every
violation, one per line, so a failure says which file and line to change.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

PRODUCT_APPS = ("dashboard", "leases", "nks", "alerts")
# Sources observe the outside world; alerts reads them. The arrow never points back.
SOURCE_APPS = ("leases", "nks")
FEATURE_APPS = ("leases", "nks", "alerts")
# One module (or package) per outside API: it speaks HTTP and returns dataclasses.
CLIENTS = ("leases.kube", "nks.client")
# The demo set-up starts the fake servers; nothing else in the product knows them.
MAY_IMPORT_FAKES = frozenset({"dashboard.management.commands.setup_demo"})
# The neutral home of what every app uses: time formatting, the expiring lock, HTMX helpers,
# links built without reverse().
SHARED_HOMES = ("dashboard.timefmt", "dashboard.locks", "dashboard.htmx", "dashboard.links")
# Modules of a feature app that are never another app's way in: pages, their template tags,
# and helpers that belong in dashboard/ (a REFRESH_SECONDS read from leases.views, say).
NOT_A_WAY_IN = frozenset({"views", "templatetags", "locks", "timefmt", "htmx"})


@dataclass(frozen=True)
class Import:
    """One imported module, as written on one line of one product module."""

    importer: str
    path: Path
    line: int
    target: str
    names: tuple[str, ...]

    def where(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT)}:{self.line}"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    """Every Python module of the product and of fakes/, by dotted name."""
    found: dict[str, Path] = {}
    for app in (*PRODUCT_APPS, "fakes"):
        for path in sorted((REPO_ROOT / app).rglob("*.py")):
            found[module_name(path)] = path
    return found


def resolve(importer: str, path: Path, node: ast.ImportFrom) -> str:
    """The absolute module of ``from ... import``, relative levels included."""
    if not node.level:
        return node.module or ""
    package = importer.split(".") if path.name == "__init__.py" else importer.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


@cache
def imports_of(name: str) -> tuple[Import, ...]:
    path = modules()[name]
    found: list[Import] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [Import(name, path, node.lineno, alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = resolve(name, path, node)
            names = tuple(alias.name for alias in node.names)
            found.append(Import(name, path, node.lineno, target, names))
            # `from nks import models` imports the module nks.models.
            found += [
                Import(name, path, node.lineno, f"{target}.{alias}", ())
                for alias in names
                if f"{target}.{alias}" in modules() or alias == "models"
            ]
    return tuple(found)


def all_imports(apps: tuple[str, ...]) -> Iterator[Import]:
    for name in modules():
        if name.split(".")[0] in apps:
            yield from imports_of(name)


def app_of(module: str) -> str:
    return module.split(".")[0]


def within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def report(violations: list[str]) -> str:
    for violation in violations:
        print(violation)
    return f"{len(violations)} import rule violation(s):\n" + "\n".join(violations)


def test_the_rules_look_at_real_modules() -> None:
    """A rule over a renamed or missing module would hold vacuously."""
    missing = [
        name for name in (*CLIENTS, *SHARED_HOMES, *MAY_IMPORT_FAKES) if name not in modules()
    ]
    assert not missing, f"modules named by the import rules are missing: {missing}"


def test_sources_never_import_alerts() -> None:
    violations = [
        f"{found.where()}: {found.importer} imports {found.target} "
        "(leases and nks never import alerts)"
        for found in all_imports(SOURCE_APPS)
        if app_of(found.target) == "alerts"
    ]
    assert not violations, report(violations)


def knows_models(found: Import) -> bool:
    """Imports Django's ORM or any app's models module."""
    parts = found.target.split(".")
    return within(found.target, "django.db") or "models" in parts[1:]


def loaded_with(name: str) -> list[str]:
    """Importing a.b.c runs a/__init__.py and a/b/__init__.py first."""
    parts = name.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts) + 1)]


def test_clients_know_no_django_models() -> None:
    """Followed through project modules: a helper that imports models brings them to the client."""
    violations: list[str] = []
    client_modules = [name for name in modules() if any(within(name, client) for client in CLIENTS)]
    # Breadth first from each client, remembering how each module was reached.
    chains: dict[str, list[str]] = {name: [name] for name in client_modules}
    queue = deque(client_modules)
    while queue:
        name = queue.popleft()
        for found in imports_of(name):
            # `from django.db import models` is one line, reported once.
            if knows_models(found) and not any(v.startswith(found.where()) for v in violations):
                chain = " -> ".join(chains[name])
                violations.append(
                    f"{found.where()}: {chain} imports {found.target} "
                    "(API clients know no Django models)"
                )
            for reached in loaded_with(found.target):
                if reached in modules() and reached not in chains:
                    chains[reached] = [*chains[name], reached]
                    queue.append(reached)
    assert client_modules, f"no client module found among {CLIENTS}"
    assert not violations, report(sorted(set(violations)))


def test_the_product_never_imports_fakes() -> None:
    violations = [
        f"{found.where()}: {found.importer} imports {found.target} "
        "(only setup_demo may import fakes)"
        for found in all_imports(PRODUCT_APPS)
        if app_of(found.target) == "fakes" and found.importer not in MAY_IMPORT_FAKES
    ]
    # The fake servers are kept apart from the product, not inside an app.
    violations += [
        f"{path.relative_to(REPO_ROOT)}: a fake inside the product (fakes/ is their home)"
        for name, path in modules().items()
        if app_of(name) in PRODUCT_APPS and any(part.startswith("fake") for part in name.split("."))
    ]
    assert not violations, report(violations)


@cache
def shared_helper_names() -> frozenset[str]:
    """The public names defined by dashboard's shared homes."""
    names: set[str] = set()
    for home in SHARED_HOMES:
        tree = ast.parse(modules()[home].read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(target.id for target in targets if isinstance(target, ast.Name))
    return frozenset(name for name in names if not name.startswith("_"))


def test_shared_helpers_come_from_dashboard_not_from_a_feature_app() -> None:
    """nks and alerts once took time formatting from leases.selectors and locks from leases."""
    violations: list[str] = []
    for found in all_imports(PRODUCT_APPS):
        target_app = app_of(found.target)
        if target_app not in FEATURE_APPS or target_app == app_of(found.importer):
            continue
        helpers = sorted(set(found.names) & shared_helper_names())
        if helpers:
            violations.append(
                f"{found.where()}: {found.importer} imports {', '.join(helpers)} "
                f"from {found.target} "
                f"(shared helpers come from {', '.join(SHARED_HOMES)})"
            )
        submodules = set(found.target.split(".")[1:2])
        if app_of(found.importer) in FEATURE_APPS and submodules & NOT_A_WAY_IN:
            violations.append(
                f"{found.where()}: {found.importer} imports {found.target} "
                f"(another app's {', '.join(sorted(submodules & NOT_A_WAY_IN))} is not its way in)"
            )
    assert not violations, report(violations)
