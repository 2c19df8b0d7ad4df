"""One place starts LLM work: outside the engine itself, only the `Scheduler` class (plugin/scheduler.py) calls
an engine's `prefetch` or `submit`, and the xdist prefetchers go through the session's scheduler."""

from __future__ import annotations

import ast
from pathlib import Path

from syntax_trees import parse

import pytest_evalbench

PACKAGE = Path(pytest_evalbench.__file__).parent
STARTS = {"prefetch", "submit"}


def starts_in(source: str, outside: str | None = None) -> list[int]:
    """Lines that call `.prefetch(...)` or `.submit(...)` on anything (outside the class `outside`, if named)."""
    tree = parse(source)
    skipped = {id(n) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and c.name == outside for n in ast.walk(c)}
    return [node.lineno for node in ast.walk(tree) if id(node) not in skipped
            and isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in STARTS]


def test_the_check_sees_a_start() -> None:
    assert starts_in("run.engine.prefetch(nodeid, pipeline, 0)\nx = engine.submit(a, b, 1).result()\n") == [1, 2]
    assert starts_in("class Scheduler:\n    def f(self):\n        e.submit(1)\ne.prefetch(2)\n", outside="Scheduler") == [4]


def test_only_the_scheduler_starts_llm_work() -> None:
    engine = set((PACKAGE / "llm").rglob("*.py"))
    found = {str(path.relative_to(PACKAGE)): lines for path in sorted(PACKAGE.rglob("*.py"))
             if path not in engine and (lines := starts_in(path.read_text(encoding="utf-8"), outside="Scheduler"))}
    assert found == {}
    assert starts_in((PACKAGE / "plugin" / "scheduler.py").read_text(encoding="utf-8"))
