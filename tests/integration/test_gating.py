"""CI gating: thresholds, baselines with statistics, exit codes, JUnit properties."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from helpers import read_json, scenario, script, write_benchmark

from pytest_evalbench.gate.outcome import EXIT_INCOMPLETE, EXIT_REGRESSION
from pytest_evalbench.testing import FakeLLMServer, Reply


def positives(n: int) -> list[dict[str, Any]]:
    return [scenario(f"m01_s{i:03d}_v01", "m01") for i in range(1, n + 1)]


def user_says_id(request: dict[str, Any]) -> str:
    import re
    return "Message: I am " + re.search(r"persona of (\w+)", json.dumps(request)).group(1)


def judge_passes_except(failing: set[str]):
    def decide(request: dict[str, Any]) -> bool:
        text = json.dumps(request)
        return not any(f"I am {sid}" in text for sid in failing)
    return decide


THRESHOLD_GATE = {"gate": {"mode": "thresholds"}}


def test_threshold_breach_fails_with_exit_6(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=positives(4), spec=THRESHOLD_GATE,
                    thresholds={"min_positive_pass_rate": 0.8})
    bench_env.set_responder(script(judge_passes_except({"m01_s001_v01", "m01_s002_v01"}), user=user_says_id))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(passed=2, failed=2)
    assert result.ret == EXIT_REGRESSION
    result.stdout.fnmatch_lines(["*THRESHOLD BREACH: tgt: positive_pass_rate 0.50 < 0.80*"])


def test_threshold_met_with_failures_is_green_in_threshold_mode(pytester: pytest.Pytester,
                                                                 bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=positives(4), spec=THRESHOLD_GATE,
                    thresholds={"min_positive_pass_rate": 0.7})
    bench_env.set_responder(script(judge_passes_except({"m01_s001_v01"}), user=user_says_id))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(passed=3, failed=1)
    assert result.ret == 0


def test_case_mode_failures_exit_1(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=positives(2))
    bench_env.set_responder(script(judge_passes_except({"m01_s001_v01"}), user=user_says_id))
    assert pytester.runpytest("--benchmark=demo").ret == pytest.ExitCode.TESTS_FAILED


def run_against_baseline(pytester: pytest.Pytester, server: FakeLLMServer, failing: set[str],
                         *args: str) -> pytest.RunResult:
    server.set_responder(script(judge_passes_except(failing), user=user_says_id))
    return pytester.runpytest("--benchmark=demo", "--evalbench-cache=off", *args)


def test_real_regression_fails_build(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=positives(10), spec=THRESHOLD_GATE)
    assert run_against_baseline(pytester, bench_env, set(), "--evalbench-save-baseline").ret == 0
    baseline = read_json(bench / "baseline.json")
    assert baseline["meta"]["judge_model"] == "sim-judge" and len(baseline["cases"]) == 10
    failing = {f"m01_s{i:03d}_v01" for i in range(1, 7)}
    result = run_against_baseline(pytester, bench_env, failing, "--evalbench-compare",
                                  "--evalbench-compare-fail=significant")
    assert result.ret == EXIT_REGRESSION
    result.stdout.fnmatch_lines(["*REGRESSION vs baseline: tgt: m01 1.00 -> 0.40*McNemar p=0.0312*",
                                 "*flipped pass->fail since the baseline (6); rerun them with:",
                                 "  pytest 'benchmarks/demo/scenarios.json::m01_s001_v01[[]tgt-s0[]]' *",
                                 "gate: REGRESSION (exit 6): 1 regression vs baseline"])


def test_noise_level_change_does_not_fail(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=positives(40), spec=THRESHOLD_GATE)
    run_against_baseline(pytester, bench_env, set(), "--evalbench-save-baseline")
    result = run_against_baseline(pytester, bench_env, {"m01_s007_v01"}, "--evalbench-compare",
                                  "--evalbench-compare-fail=significant")
    result.assert_outcomes(passed=39, failed=1)
    assert result.ret == 0
    result.stdout.no_fnmatch_line("*REGRESSION*")
    result.stdout.fnmatch_lines(["*flipped pass->fail since the baseline (1); rerun them with:",
                                 "  pytest 'benchmarks/demo/scenarios.json::m01_s007_v01[[]tgt-s0[]]'",
                                 "gate: PASSED (exit 0): *1 case failed, which is reported but does not fail the build"])


def test_bad_compare_rule_and_missing_baseline(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=positives(1))
    result = pytester.runpytest("--benchmark=demo", "--evalbench-compare-fail=sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*invalid compare rule 'sometimes'; accepted forms:*significant*drop:*any*"])
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo", "--evalbench-compare")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(["*baseline.json: baseline file not found; create it with --evalbench-save-baseline*"])


def test_incomplete_beats_everything(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=positives(3), spec=THRESHOLD_GATE,
                            thresholds={"min_positive_pass_rate": 0.9})

    def judge(request: dict[str, Any]) -> Any:
        return Reply(content="not json") if "I am m01_s002_v01" in json.dumps(request) else True

    bench_env.set_responder(script(judge, user=user_says_id))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(passed=2, errors=1)
    assert result.ret == EXIT_INCOMPLETE
    result.stdout.fnmatch_lines(["*INCOMPLETE: 1 item unscored*"])
    status = read_json(bench / "last_run.json")
    assert status["status"] == "incomplete" and list(status["errors"]) == [
        "benchmarks/demo/scenarios.json::m01_s002_v01[tgt-s0]"]


def test_samples_give_per_case_verdicts(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=positives(2), generation={"turns": 1, "num_samples": 8},
                    spec=THRESHOLD_GATE)
    bench_env.set_responder(script(judge_passes_except({"m01_s002_v01"}), user=user_says_id))
    result = pytester.runpytest("--benchmark=demo")
    result.stdout.fnmatch_lines(["*per-case: m01_s001_v01[[]tgt[]] 8/8 passed -> pass*",
                                 "*per-case: m01_s002_v01[[]tgt[]] 0/8 passed -> fail*"])


def test_junit_xml_carries_verdict_properties(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=positives(1))
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo", "--junitxml=out.xml").assert_outcomes(passed=1)
    case = ET.parse(pytester.path / "out.xml").getroot().find(".//testcase")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props == {"evalbench_present": "True", "evalbench_passed": "True", "evalbench_score": "1",
                     "evalbench_justification": "because"}
