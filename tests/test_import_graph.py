"""The package's import graph has no cycles, counting imports inside functions too (a deferred
import that only dodges a cycle is still one), and type-only imports excepted."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.embedded

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("project", "responses_api", "tool_registry")


def _modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    return modules


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = []  # for annotations only: never executed
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found |= {t for t in (target, *(f"{target}.{a.name}" for a in node.names)) if t in modules}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
    return found - {name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in graph[node]:
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert "responses_api.orchestration.handoff" in graph["responses_api.orchestration.gateway"]  # real edges
    assert _cycles(graph) == []


def test_the_check_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# The API layer of pyproject.toml's "no-orm-in-api" contract, which forbids the models there.
API_LAYER = (
    "responses_api.api",
    "responses_api.history.views",
    "responses_api.history.urls",
    "responses_api.conversations.views",
    "responses_api.conversations.urls",
)


def test_the_api_layer_imports_no_django_db() -> None:
    """Views, authentication and query parsing make no query of their own: the ORM calls are in
    the store's and the slices' selectors and services (import-linter cannot forbid a
    subpackage of Django, so this does)."""
    offenders = []
    for name, path in _modules().items():
        if not any(name == layer or name.startswith(layer + ".") for layer in API_LAYER):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                node.body = []
        for node in ast.walk(tree):
            targets = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            offenders += [f"{name}: {t}" for t in targets if t == "django.db" or t.startswith("django.db.")]
    assert offenders == []
