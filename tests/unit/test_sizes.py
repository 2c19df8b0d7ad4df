"""Rooms of a readable size: no module of the package over 600 lines, no class over 20 methods (properties
count: each is a method someone reads). A module is one cohesive job; past these sizes it is usually two."""

from __future__ import annotations

import ast
from pathlib import Path

from syntax_trees import parse

import pytest_evalbench

PACKAGE = Path(pytest_evalbench.__file__).parent
MAX_LINES = 600
MAX_METHODS = 20



def modules() -> dict[str, Path]:
    return {p.relative_to(PACKAGE).as_posix(): p for p in sorted(PACKAGE.rglob("*.py"))}


def line_count(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def methods_per_class(source: str) -> dict[str, int]:
    """Class name (dotted when nested) -> functions defined directly in its body, properties included."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                name = f"{prefix}{child.name}"
                out[name] = sum(isinstance(c, ast.FunctionDef | ast.AsyncFunctionDef) for c in child.body)
                visit(child, name + ".")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, f"{prefix}{child.name}.")

    visit(parse(source), "")
    return out


def test_counting_methods_counts_properties_and_nested_classes() -> None:
    source = ("class A:\n    @property\n    def p(self): ...\n    def m(self): ...\n    async def a(self): ...\n"
              "    class B:\n        def n(self): ...\n    x = 1\n")
    assert methods_per_class(source) == {"A": 3, "A.B": 1}


def test_no_module_over_the_line_limit() -> None:
    long = {name for name, path in modules().items() if line_count(path) > MAX_LINES}
    assert sorted(long) == [], f"modules over {MAX_LINES} lines"


def test_no_class_over_the_method_limit() -> None:
    big = {f"{name}:{cls}" for name, path in modules().items()
           for cls, count in methods_per_class(path.read_text(encoding="utf-8")).items() if count > MAX_METHODS}
    assert sorted(big) == [], f"classes over {MAX_METHODS} methods"
