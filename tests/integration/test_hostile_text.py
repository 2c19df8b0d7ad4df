"""Text from strangers (model, judge and app text, endpoint error bodies, benchmark.yaml's text fields,
`.sessions.json`) reaches the terminal, CI logs, the Markdown summary and the report inert; error
groups only join equal errors. End to end against the fake server."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from helpers import JUDGE, USER, scenario, script, write_benchmark

from pytest_evalbench.testing import FakeLLMServer, Reply

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
    sections = out.split("short test summary info")[0]  # the summary's lines are cut at the terminal width
    assert sections.count("same error as benchmarks/demo/scenarios.json::m01_s001_v01[app-s0]") == 2
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


COMMANDS = ("\u3000::error::wide space\n\u00a0::warning::nbsp\n\u2003\u202f::add-mask::em\n\u200b::error::zwsp\n"
            "ok ##[error]mid-line ##vso[task.setvariable variable=x]1 ##VSO[task.complete]")
"""Workflow commands in every shape the runners act on (Unicode whitespace or a zero-width space before
`::`, `##[` and `##vso[` mid-line)."""


def _runnable(output: str) -> list[str]:
    """Lines GitHub's runner or Azure Pipelines would act on."""
    lead = re.compile(r"^[\s\u200b-\u200f\u2060-\u2064\ufeff]*::")
    return [line for line in output.splitlines() if lead.match(line) or re.search(r"(?i)##(vso)?\[", line)]


def test_workflow_commands_in_every_shape_are_inert(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    """Target replies, judge justifications and an endpoint's error body carrying workflow commands
    after Unicode whitespace, or `##[`/`##vso[` mid-line: the terminal (and so the CI log) shows
    each with its `::` prefixed or its `[` escaped, never one a runner would act on."""
    write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01"), scenario("m01_s002_v01", "m01")])

    def respond(request: dict[str, Any]) -> Any:
        if request["model"] == USER:
            return "Message: hello from " + re.search(r"(m0\d_s\d{3}_v01)", json.dumps(request)).group(1)
        if request["model"] == JUDGE:
            return {"justification": "judge says\n" + COMMANDS, "present": False}
        if "m01_s002_v01" in json.dumps(request):
            return Reply(status=400, content=COMMANDS)
        return COMMANDS

    bench_env.set_responder(respond)
    result = pytester.runpytest("--benchmark=demo", "-v", "-rA", "--evalbench-cache=off", "-p", "no:randomly")
    output = result.stdout.str() + result.stderr.str()
    assert "> ::error::wide space" in output and "##\\[error]mid-line" in output  # shown, made inert
    assert _runnable(output) == []


def test_the_benchmark_name_is_inert_everywhere(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A printable `name:` with backticks, HTML and a mid-line `##[error]` stays one code span in the
    Markdown title, renders nothing in the report and runs no command in the terminal."""
    step = pytester.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    name = "Demo `` ` <img src=x onerror=alert(1)> ##[error]named"
    bench = write_benchmark(pytester.path, spec={"name": name})
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the negative metric's rows fail: the run completed
    assert "benchmark Demo `` ` <img src=x onerror=alert(1)> ##\\[error]named: 4 items" in result.stdout.str()
    assert _runnable(result.stdout.str() + result.stderr.str()) == []
    title = step.read_text().splitlines()[0]
    # one code span, fenced by more backticks than the name's longest run: nothing in it renders
    assert title == "## ❌ evalbench ```Demo `` ` <img src=x onerror=alert(1)> ##[error]named```: failed (exit 1)"
    page = (bench / "report.html").read_text()
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


@pytest.mark.parametrize(("field", "value", "said"), [
    ("name", "demo\n::error::x", "field 'name': holds a line break or tab at position 5"),
    ("description", "\x1b]0;owned\x07", "field 'description': holds the control character '\\x1b' at position 1"),
])
def test_a_bad_text_field_is_one_clear_error(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                             field: str, value: str, said: str) -> None:
    write_benchmark(pytester.path, spec={field: value})
    result = pytester.runpytest("--benchmark=demo")
    output = result.stdout.str() + result.stderr.str()
    assert result.ret not in (0, 1) and "Traceback" not in output and bench_env.requests == []
    result.stdout.fnmatch_lines([f"*benchmarks/demo/benchmark.yaml:*, {said}*"])
    assert _runnable(output) == []
