"""The engine's roles stay apart: one module hands coroutines to the engine loop, and the layers under the
Engine facade import only the layers below them (pipelines <- limits <- retry; the cache alone), never the
facade at run time."""

from __future__ import annotations

import ast
from pathlib import Path

from syntax_trees import parse

import pytest_evalbench

PACKAGE = Path(pytest_evalbench.__file__).parent
ROLES = ["pipelines", "limits", "retry", "cache", "engine"]
BELOW = {"pipelines": set(), "limits": {"pipelines"}, "retry": {"limits", "pipelines"}, "cache": set(),
         "engine": {"pipelines", "limits", "retry", "cache"}}


def _calls_to(tree: ast.AST, name: str) -> list[int]:
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr == name]


def test_only_pipelines_hands_coroutines_to_the_loop() -> None:
    found = {str(path.relative_to(PACKAGE)): lines for path in sorted(PACKAGE.rglob("*.py"))
             if (lines := _calls_to(parse(path.read_text(encoding="utf-8")), "run_coroutine_threadsafe"))}
    assert set(found) == {"llm/pipelines.py"}, found


def _runtime_role_imports(module: str) -> set[str]:
    """Roles a module of llm/ imports outside `if TYPE_CHECKING:` blocks (annotations only there)."""
    tree = ast.parse((PACKAGE / "llm" / f"{module}.py").read_text(encoding="utf-8"))
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
               for n in ast.walk(node)}
    return {node.module.removeprefix("pytest_evalbench.llm.")
            for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and id(node) not in skipped
            and (node.module or "").startswith("pytest_evalbench.llm.")} & set(ROLES)


def test_each_role_imports_only_the_roles_below_it() -> None:
    upward = {module: found - BELOW[module] for module in ROLES if (found := _runtime_role_imports(module)) - BELOW[module]}
    assert upward == {}
    assert _runtime_role_imports("engine") == BELOW["engine"]  # the facade builds all four
