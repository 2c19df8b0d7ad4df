"""Imports go one way: every module of the package sits in one declared layer (the table in
docs/architecture.md, checked against LAYERS below), a folder is a layer, and a module imports only its own
layer or lower ones, counting imports inside functions and under TYPE_CHECKING; and the package's import
graph has no cycle, not even inside a layer. A lazy import that dodges a cycle is still a cycle."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from fnmatch import fnmatchcase
from pathlib import Path

from syntax_trees import parse

import pytest_evalbench

PACKAGE = Path(pytest_evalbench.__file__).parent
ROOT = PACKAGE.name

LAYERS: list[tuple[str, list[str]]] = [
    # lowest first; a folder is a layer (modules are named relative to the package, "" is its own __init__)
    ("testing", ["testing", "testing.*"]),
    ("base", ["base", "base.*"]),
    ("formats", ["formats", "formats.*"]),
    ("llm", ["llm", "llm.*"]),
    ("kinds", ["kinds", "kinds.*"]),
    ("gate", ["gate", "gate.*"]),
    ("render", ["render", "render.*"]),
    ("store", ["store", "store.*"]),
    ("app", ["", "__main__", "plugin", "plugin.*", "cli", "cli.*"]),
]



def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> int:
    """Index of the layer whose most specific pattern names the module (an exact name beats a glob)."""
    best: tuple[tuple[int, int], int] | None = None
    for index, (_, patterns) in enumerate(LAYERS):
        for pattern in patterns:
            if fnmatchcase(module, pattern):
                rank = (int(pattern == module), len(pattern))
                if best is None or rank > best[0]:
                    best = (rank, index)
    if best is None:
        raise LookupError(module)
    return best[1]


def _local(name: str) -> str | None:
    if name == ROOT:
        return ""
    return name.removeprefix(ROOT + ".") if name.startswith(ROOT + ".") else None


def imports_in(source: str, module: str, is_package: bool) -> Iterator[tuple[str, int, str]]:
    """(imported module of the package, line, where) for every import statement anywhere in `source`;
    where: "top", "function" (inside a def or lambda) or "type-checking" (under `if TYPE_CHECKING:`)."""
    package = module if is_package else module.rpartition(".")[0]

    def internal(name: str, line: int, where: str) -> Iterator[tuple[str, int, str]]:
        local = _local(name)
        if local is not None and local in MODULES and local != module:
            yield local, line, where

    def statement(node: ast.AST, where: str) -> Iterator[tuple[str, int, str]]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield from internal(alias.name, node.lineno, where)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)]
                absolute = ".".join([ROOT, *base, *([node.module] if node.module else [])])
            else:
                absolute = node.module or ""
            names = [f"{absolute}.{alias.name}" for alias in node.names]
            submodules = [n for n in names if _local(n) in MODULES]
            for name in submodules or [absolute]:  # `from . import x` depends on x, not on the package
                yield from internal(name, node.lineno, where)
        yield from children(node, where)

    def children(node: ast.AST, where: str) -> Iterator[tuple[str, int, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for stmt in child.body:
                    yield from statement(stmt, "type-checking")
                for stmt in child.orelse:
                    yield from statement(stmt, where)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                yield from statement(child, "function")
            else:
                yield from statement(child, where)

    yield from children(parse(source), "top")


@functools.cache
def edges() -> dict[tuple[str, str], list[str]]:
    """(importer, imported) -> the places (file:line (where)) of every import between two package modules
    (read once per process: three tests ask; none changes it)."""
    found: dict[tuple[str, str], list[str]] = {}
    for module, path in MODULES.items():
        for target, line, where in imports_in(path.read_text(encoding="utf-8"), module, path.name == "__init__.py"):
            found.setdefault((module, target), []).append(f"{path.relative_to(PACKAGE.parent)}:{line} ({where})")
    return found


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def test_every_module_has_one_declared_layer() -> None:
    missing = []
    for module in MODULES:
        try:
            layer_of(module)
        except LookupError:
            missing.append(module or ROOT)
    assert missing == [], "add these modules to LAYERS and to the table in docs/architecture.md"


def test_imports_only_go_down() -> None:
    upward = {(a, b): places for (a, b), places in edges().items() if layer_of(b) > layer_of(a)}
    new = [f"{place}: {a or ROOT} [{LAYERS[layer_of(a)][0]}] imports {b or ROOT} [{LAYERS[layer_of(b)][0]}]"
           for (a, b), places in sorted(upward.items()) for place in places]
    assert new == []


def test_no_import_cycles() -> None:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for a, b in edges():
        graph[a].add(b)
    found = set(cycles(graph))
    closing = {component: sorted(f"{a} -> {b}: {', '.join(places)}" for (a, b), places in edges().items()
                                 if a in component and b in component) for component in found}
    assert closing == {}


def test_the_walker_sees_every_kind_of_import() -> None:
    """The counter-check: imports inside functions, under TYPE_CHECKING and `from pkg import module` are edges."""
    source = ("from typing import TYPE_CHECKING\nfrom pytest_evalbench.formats import spec\nif TYPE_CHECKING:\n"
              "    from pytest_evalbench.render import summary\ndef f():\n"
              "    from pytest_evalbench.plugin.session import EvalbenchPlugin\n    import pytest_evalbench.kinds.protocol\n"
              "class C:\n    def m(self):\n        from pytest_evalbench.gate import rules\n")
    found = {(target, where) for target, _, where in imports_in(source, "base.errors", is_package=False)}
    assert found == {("formats.spec", "top"), ("render.summary", "type-checking"), ("plugin.session", "function"),
                     ("kinds.protocol", "function"), ("gate.rules", "function")}
    nested = {(target, where) for target, _, where in imports_in("from ..protocol import ItemWork\n", "kinds.scenarios.models",
                                                                 False)}
    assert nested == {("kinds.protocol", "top")}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_a_folder_is_a_layer() -> None:
    """Every module of a folder sits in the folder's layer (the folder's own `__init__` decides it)."""
    mixed = {m: LAYERS[layer_of(m)][0] for m in MODULES if "." in m
             and layer_of(m) != layer_of(m.split(".")[0])}
    assert mixed == {}


def _documented_layers() -> list[tuple[str, set[str]]]:
    """The rows of the Layers table in docs/architecture.md: (layer, every backticked module pattern)."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].isdigit():
            rows.append((cells[1].strip("`"), set(re.findall(r"`([^`]*)`", cells[2]))))
    return rows


def test_the_layers_are_documented_in_order() -> None:
    documented = _documented_layers()
    assert [name for name, _ in documented] == [name for name, _ in LAYERS]
    for (name, modules), (_, patterns) in zip(documented, LAYERS):
        shown = {"" if m == ROOT else m for m in modules}
        assert shown == set(patterns), f"layer {name}: docs/architecture.md and LAYERS differ"


def test_the_glossary_names_what_the_code_has() -> None:
    """Every module and name the glossary in docs/architecture.md points to exists, so it stays true."""
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Glossary", 1)[1].split("\n## ", 1)[0]
    defined: set[str] = set()
    for path in MODULES.values():
        tree = parse(path.read_text(encoding="utf-8"))
        defined.update(n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef | ast.FunctionDef))
        defined.update(t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets
                       if isinstance(t, ast.Name))
        defined.update(n.target.id for n in ast.walk(tree) if isinstance(n, ast.AnnAssign)
                       and isinstance(n.target, ast.Name))  # fields of models and dataclasses
        defined.update(a.arg for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                       for a in [*n.args.args, *n.args.kwonlyargs])
    missing = []
    rows = [line.split("|")[1:-1] for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) > 20
    for cells in rows[1:]:
        for ref in re.findall(r"`([^`]+)`", cells[2]):
            for word in ref.split():
                if word.endswith(".py"):
                    if not (PACKAGE / word).is_file():
                        missing.append(word)
                elif word not in defined:
                    missing.append(word)
    assert missing == []


KIND_PACKAGES = frozenset(p.parent.name for p in (PACKAGE / "kinds").glob("*/__init__.py"))
"""The shipped kinds: the subpackages of kinds/ (`scenarios`, `dataset`, `calibration`)."""
REGISTRY = "kinds"
"""kinds/__init__.py names the shipped kinds to the registry (each inside its loader): the one module
that imports a kind without being it."""


def kind_package(module: str) -> str | None:
    """The shipped kind a module belongs to (`kinds.scenarios.runner` -> `scenarios`), None for the
    kinds' shared modules (`kinds.protocol`, `kinds.judges`, ...) and every other layer."""
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == "kinds" and parts[1] in KIND_PACKAGES else None


def sideways(found: dict[tuple[str, str], list[str]]) -> list[str]:
    """Imports of a kind from outside it, inside the kinds layer: a kind depends on the protocol and the
    shared modules, never on another kind, and the shared modules depend on no kind."""
    return [f"{place}: {a} imports {b}" for (a, b), places in sorted(found.items()) for place in places
            if a.startswith("kinds") and a != REGISTRY and kind_package(b) is not None
            and kind_package(a) != kind_package(b)]


def test_kinds_do_not_reach_sideways() -> None:
    assert {"scenarios", "dataset", "calibration"} <= KIND_PACKAGES
    assert sideways(edges()) == []


def test_the_sideways_check_sees_a_reach() -> None:
    """The counter-check: a kind importing another (even lazily), a shared module importing a kind."""
    found = {("kinds.scenarios.runner", "kinds.calibration.kind"): ["r.py:1 (function)"],
             ("kinds.protocol", "kinds.dataset.summary"): ["p.py:2 (type-checking)"],
             ("kinds.scenarios.kind", "kinds.scenarios.runner"): ["k.py:3 (top)"],
             ("kinds.scenarios.kind", "kinds.labels"): ["k.py:4 (top)"],
             ("kinds", "kinds.dataset.kind"): ["i.py:5 (function)"],
             ("plugin.session", "kinds.scenarios.kind"): ["s.py:6 (top)"]}
    assert sideways(found) == ["p.py:2 (type-checking): kinds.protocol imports kinds.dataset.summary",
                               "r.py:1 (function): kinds.scenarios.runner imports kinds.calibration.kind"]
