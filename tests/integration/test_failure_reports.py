"""A failed case reports the core's message through pytest's own report, without pytest walking the
traceback of its runner for each failure."""

from __future__ import annotations

import _pytest._code.code
import pytest
from helpers import scenario, script, write_benchmark

from pytest_evalbench.testing import FakeLLMServer


@pytest.fixture
def cuts(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every call of pytest's traceback cutting (its filter's first step) in the in-process run."""
    calls: list[object] = []
    original = _pytest._code.code.Traceback.cut

    def counted(self: _pytest._code.code.Traceback, *args: object, **kwargs: object) -> object:
        calls.append(self)
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_pytest._code.code.Traceback, "cut", counted)
    return calls


def test_failed_cases_report_their_message_without_walking_a_traceback(
        pytester: pytest.Pytester, bench_env: FakeLLMServer, cuts: list[object]) -> None:
    write_benchmark(pytester.path, scenarios=[scenario(f"m01_s00{i}_v01", "m01") for i in range(4)])
    bench_env.set_responder(script(False))  # a positive metric the judge finds absent: every case fails
    result = pytester.runpytest("--benchmark=demo", "-rf")
    result.assert_outcomes(failed=4)
    assert cuts == []
    result.stdout.fnmatch_lines(["*judge: because*", "*last exchange:*",
                                 "FAILED benchmarks/demo/scenarios.json::m01_s000_v01*tgt* - Failed: m01*"])
    result.stdout.no_fnmatch_line("*Traceback*")
    result.stdout.no_fnmatch_line("*nodes.py*")


def test_tb_line_and_full_trace_keep_pytest_s_forms(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")])
    bench_env.set_responder(script(False))
    line = pytester.runpytest("--benchmark=demo", "--tb=line")
    line.assert_outcomes(failed=1)
    line.stdout.fnmatch_lines(["*nodes.py:*: Failed: m01*"])  # the crash line names the raising frame
    full = pytester.runpytest("--benchmark=demo", "--full-trace")
    full.assert_outcomes(failed=1)
    full.stdout.fnmatch_lines(["*judge: because*"])


def test_on_a_ci_runner_the_short_summary_quotes_the_headline_alone(
        pytester: pytest.Pytester, bench_env: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where CI is set pytest does not cut the summary's message to the terminal: it shows the case's
    first line whole, not its justification and transcript a second time."""
    write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")])
    bench_env.set_responder(script(False))
    monkeypatch.setenv("CI", "true")
    result = pytester.runpytest("--benchmark=demo", "-rf")
    result.assert_outcomes(failed=1)
    lines = result.stdout.lines
    at = next(i for i, text in enumerate(lines) if text.startswith("FAILED benchmarks/demo/"))
    assert lines[at].endswith("behaviour absent, expected present")
    assert lines[at + 1].startswith("=")
