"""One place starts LLM work (issue 26): outside the engine itself, only plugin/scheduling.py calls an
engine's `prefetch` or `submit`, and the xdist prefetchers go through the session's scheduler."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest_evalbench

PACKAGE = Path(pytest_evalbench.__file__).parent
STARTS = {"prefetch", "submit"}


def starts_in(source: str) -> list[int]:
    """Lines that call `.prefetch(...)` or `.submit(...)` on anything."""
    return [node.lineno for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in STARTS]


def test_the_check_sees_a_start() -> None:
    assert starts_in("run.engine.prefetch(nodeid, pipeline, 0)\nx = engine.submit(a, b, 1).result()\n") == [1, 2]


def test_only_the_scheduler_starts_llm_work() -> None:
    allowed = {PACKAGE / "plugin" / "scheduling.py"} | set((PACKAGE / "llm").rglob("*.py"))
    found = {str(path.relative_to(PACKAGE)): lines for path in sorted(PACKAGE.rglob("*.py"))
             if path not in allowed and (lines := starts_in(path.read_text(encoding="utf-8")))}
    assert found == {}
    assert starts_in((PACKAGE / "plugin" / "scheduling.py").read_text(encoding="utf-8"))
