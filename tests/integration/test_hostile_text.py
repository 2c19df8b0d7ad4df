"""Text from strangers (model, judge and app text, endpoint error bodies, benchmark.yaml's text fields,
`.sessions.json`) reaches the terminal, CI logs, the Markdown summary and the report inert; error
groups only join equal errors. End to end against the fake server."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from helpers import scenario, script, write_benchmark

from pytest_evalbench.testing import FakeLLMServer

TWO_APP_ERRORS = """
def pytest_evalbench_make_target(config, target):
    def app(messages):
        if "v02" in messages[0]["content"]:
            raise PermissionError("the ledger refused the write")
        raise LookupError("no such order")
    return app
"""


def user_names_row(request: dict[str, Any]) -> str:
    return "Thought: x\nMessage: I am " + ("v02" if "m01_s001_v02" in json.dumps(request) else "v01")


def test_different_errors_are_never_one_group(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    """Two app errors whose first lines are equal ("target 'app' raised:") are two groups: each is
    shown in full on its item and named in the summary; neither points at the other."""
    pytester.makeconftest(TWO_APP_ERRORS)
    write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01"), scenario("m01_s001_v02", "m01")],
                    targets=[{"id": "app"}])
    bench_env.set_responder(script(True, user=user_names_row))
    result = pytester.runpytest("--benchmark=demo", "-p", "no:randomly")
    result.assert_outcomes(errors=2)
    out = result.stdout.str()
    assert "same error as" not in out
    assert "PermissionError: the ledger refused the write" in out and "LookupError: no such order" in out
    summary = out.split("evalbench ====")[-1]
    assert re.search(r"ERROR 1 item: .*PermissionError: the ledger refused the write", summary), summary
    assert re.search(r"ERROR 1 item: .*LookupError: no such order", summary), summary


def test_equal_errors_still_point_at_the_first(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    """The same app error on every item is shown in full once; the others point at it."""
    pytester.makeconftest(TWO_APP_ERRORS.replace('"v02"', '"never"'))
    write_benchmark(pytester.path, scenarios=[scenario(f"m01_s00{i}_v01", "m01") for i in range(1, 4)],
                    targets=[{"id": "app"}])
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(errors=3)
    out = result.stdout.str()
    assert out.count("same error as benchmarks/demo/scenarios.json::m01_s001_v01[app-s0]") == 2
    assert re.search(r"ERROR 3 items: .*LookupError: no such order", out)


def test_a_duplicate_id_key_names_the_row_by_its_id(pytester: pytest.Pytester) -> None:
    """`{"id": "a", "id": "b"}`: the error names the row by its (first) id, never by a Python repr."""
    bench = write_benchmark(pytester.path)
    rows = json.loads((bench / "scenarios.json").read_text())
    text = json.dumps(rows).replace('"id": "m02_s001_v01"', '"id": "m02_s001_v01", "id": "m02_s009_v01"', 1)
    (bench / "scenarios.json").write_text(text)
    result = pytester.runpytest("--benchmark=demo", "--collect-only")
    out = result.stdout.str()
    assert "object at 0x" not in out and "_DuplicateKey" not in out
    result.stdout.fnmatch_lines(["*scenarios.json, row 3 (id m02_s001_v01), field 'id': duplicate key 'id'*"])
