"""Private or undocumented pytest/xdist access lives in plugin/_compat.py only (issue 26): the package's
AST is searched for the names that reach into pytest or xdist internals; any use outside `_compat`
fails with file and line."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from syntax_trees import parse

import pytest_evalbench

PACKAGE = Path(pytest_evalbench.__file__).parent
COMPAT = PACKAGE / "plugin" / "_compat.py"

PRIVATE_MODULES = ("_pytest", "xdist.dsession", "xdist.workermanage", "xdist.remote", "execnet")
ATTRIBUTES = {
    "_id": "structured node id", "wasxfail": "xfail marker on reports", "workerinput": "xdist worker input",
    "workeroutput": "xdist worker output", "testsfailed": "session counter", "args_source": "config.args origin",
    "isatty": "terminal reporter", "gateway": "execnet gateway", "send_runtest_some": "xdist WorkerController",
    "shutting_down": "xdist WorkerController", "sharesched": "py.log producer", "collectonly": "pytest option dest",
    "continue_on_collection_errors": "pytest option dest", "extra_keyword_matches": "-k matching",
    "evalbench": "attribute attached to reports", "evalbench_error": "attribute attached to reports",
    "evalbench_status": "attribute attached to reports", "add_global_property": "pytest's LogXML",
    "_repr_failure_py": "Node's failure formatting",
}
"""Attribute names read or written (also as a constant given to getattr/hasattr/setattr/delattr)."""
ASSIGNED = {"location": "Item.location is a cached property", "exitstatus": "Session.exitstatus",
            "args": "Config.args"}
"""Attributes that may be read anywhere but assigned only in `_compat`."""
STRINGS = {"dsession", "terminalreporter", "workercount", "workerid", "stats", "xmlpath"}
"""String constants naming internal plugins or keys (docstrings never equal them exactly)."""


def violations(source: str, filename: str = "<source>") -> list[str]:
    """Every private access in `source`, as `file:line: what`."""
    out: list[str] = []
    for node in ast.walk(parse(source)):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            out += [f"{where}: imports {name}" for name in names if name.startswith(PRIVATE_MODULES)]
        elif isinstance(node, ast.Attribute):
            if node.attr in ATTRIBUTES:
                out.append(f"{where}: .{node.attr} ({ATTRIBUTES[node.attr]})")
            elif node.attr in ASSIGNED and isinstance(node.ctx, ast.Store | ast.Del):
                out.append(f"{where}: assigns .{node.attr} ({ASSIGNED[node.attr]})")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                "getattr", "hasattr", "setattr", "delattr") and len(node.args) >= 2:
            name = node.args[1]
            if isinstance(name, ast.Constant) and (name.value in ATTRIBUTES or name.value in ASSIGNED):
                out.append(f"{where}: {node.func.id}(..., {name.value!r})")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in STRINGS:
            out.append(f"{where}: {node.value!r}")
    return out


def test_the_guard_finds_each_kind_of_private_access() -> None:
    source = "\n".join([
        "from _pytest.junitxml import xml_key",
        "import _pytest.terminal",
        "config.pluginmanager.hasplugin('dsession')",
        "reporter = config.pluginmanager.get_plugin('terminalreporter')",
        "x = report.wasxfail",
        "hasattr(config, 'workerinput')",
        "item._id = 1",
        "item.location = ('a', None, 'b')",
        "session.exitstatus = 3",
        "config.args = []",
        "n = session.testsfailed",
        "node.gateway.id",
        "report.evalbench_error = 'x'",
    ])
    assert len(violations(source)) == 13
    assert violations("x = item.location\ny = session.exitstatus\n'''workerinput docstring'''\n") == []


def test_private_pytest_and_xdist_access_only_in_compat() -> None:
    found: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path != COMPAT:
            found += violations(path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE.parent)))
    assert found == [], "private pytest/xdist access outside plugin/_compat.py:\n" + "\n".join(found)


def test_compat_names_versions_for_every_function() -> None:
    """Each accessor says which pytest/xdist versions it was checked on."""
    tree = ast.parse(COMPAT.read_text(encoding="utf-8"))
    missing = [node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)
               and not node.name.startswith("_") and node.name not in ("is_worker",)
               and not any(word in (ast.get_docstring(node) or "") for word in ("pytest 8.0", "xdist 3.5"))]
    assert missing == []


def test_a_cases_evalbench_error_is_reported_from_its_raising_frame_without_parsing_source(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Its report is the one-line message (`Bookkeeping.make_report`): pytest formats the error as its
    message from the raising frame, parsing no source file for it (a run whose endpoint is down errs
    in every case)."""
    from types import SimpleNamespace

    import _pytest._code.code

    from pytest_evalbench.base.errors import EvalbenchError
    from pytest_evalbench.plugin._compat import ShortErrorTraceback
    from pytest_evalbench.plugin.nodes import CaseItem

    def deep(depth: int) -> None:
        if depth == 0:
            raise EvalbenchError("budget exhausted")
        deep(depth - 1)

    with pytest.raises(EvalbenchError) as excinfo:
        deep(5)
    assert len(excinfo.traceback) > 5
    parsed: list[int] = []
    find = _pytest._code.code.getstatementrange_ast
    monkeypatch.setattr(_pytest._code.code, "getstatementrange_ast", lambda *a, **k: parsed.append(1) or find(*a, **k))
    item = SimpleNamespace(config=SimpleNamespace(getoption=lambda name, default=None: False))  # no --full-trace
    report = ShortErrorTraceback._repr_failure_py(item, excinfo, "long")  # type: ignore[arg-type]  # reads .config
    assert "budget exhausted" in str(report) and "deep(depth - 1)" not in str(report) and not parsed
    assert len(report.reprtraceback.reprentries) == 1  # type: ignore[union-attr]  # the raising frame's
    assert "deep(depth - 1)" in str(excinfo.getrepr(style="long")) and parsed  # what it would have parsed
    assert issubclass(CaseItem, ShortErrorTraceback)


def test_structured_node_ids_share_the_files_path_and_one_params_string_per_value() -> None:
    """pytest >= 9.2 keeps a structured id per item: ours keep the data file's path string and one params
    string per value (`tgt-s0`), as pytest's own ids share them, not a copy of each per item."""
    nodeid = pytest.importorskip("_pytest.nodeid", reason="pytest < 9.2 keeps string node ids")
    from types import SimpleNamespace

    from pytest_evalbench.plugin._compat import fix_structured_nodeid

    file_id = nodeid.NodeId(path="benchmarks/demo/scenarios.json")
    items = [SimpleNamespace(_id=file_id.child(f"m01_s00{i}_v01[tgt-s0]")) for i in range(2)]
    for item in items:
        fix_structured_nodeid(item)  # type: ignore[arg-type]  # reads and sets ._id
    first, second = (item._id for item in items)
    assert (first.path, first.names, first.params) == ("benchmarks/demo/scenarios.json", ("m01_s000_v01",), "tgt-s0")
    assert str(first) == "benchmarks/demo/scenarios.json::m01_s000_v01[tgt-s0]"
    assert first.path is file_id.path and second.path is file_id.path and first.params is second.params
