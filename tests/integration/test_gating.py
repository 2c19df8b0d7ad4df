"""CI gating: thresholds, baselines with statistics, exit codes, JUnit properties."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

import pytest
import yaml
from helpers import JUDGE, METRICS, read_json, scenario, script, write_benchmark

from pytest_evalbench.gate.decision import EXIT_INCOMPLETE, EXIT_REGRESSION
from pytest_evalbench.testing import FakeLLMServer, Reply

EXAMPLES = __import__("pathlib").Path(__file__).parents[2] / "benchmarks" / "agents"


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
                    thresholds={"min_positive_pass_rate": 0.8, "decision": "point"})
    bench_env.set_responder(script(judge_passes_except({"m01_s001_v01", "m01_s002_v01"}), user=user_says_id))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(passed=2, failed=2)
    assert result.ret == EXIT_REGRESSION
    result.stdout.fnmatch_lines(["*THRESHOLD BREACH: min_positive_pass_rate 0.80 tgt: 0.50 breached*"])


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
    result.stdout.fnmatch_lines(["*REGRESSION vs baseline: tgt: m01 1.00 -> 0.40 (-0.60; 6 pass->fail / 0 fail->pass "
                                 "of 10), exact McNemar p=0.0156, adjusted p=0.0156*",
                                 "*flipped pass->fail since the baseline (6); rerun them with:",
                                 "  pytest --benchmark=demo --evalbench-cache=off "
                                 "'benchmarks/demo/scenarios.json::m01_s001_v01[[]tgt-s0[]]' *",
                                 "evalbench: REGRESSION (exit 6): 1 significant drop against the baseline"])
    result.stdout.fnmatch_lines(["  REGRESSION vs baseline: tgt: m01 1.00 -> 0.40*"])


def test_a_baseline_with_another_judge_model_is_not_comparable(pytester: pytest.Pytester,
                                                                bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=positives(10), spec=THRESHOLD_GATE)
    assert run_against_baseline(pytester, bench_env, set(), "--evalbench-save-baseline").ret == 0
    identities = read_json(bench / "baseline.json")["identities"]
    assert identities["tgt"]["judge_model"] == "sim-judge" and identities["tgt"]["judge_prompt"] == "examples"
    from helpers import TARGET, USER, judge_says

    from pytest_evalbench.testing import by_model

    decide = judge_says(judge_passes_except({f"m01_s{i:03d}_v01" for i in range(1, 7)}))
    bench_env.set_responder(by_model({USER: user_says_id, TARGET: lambda r: "Sure, where are you going?",
                                      JUDGE: decide, "other-judge": decide}))
    args = ["--benchmark=demo", "--evalbench-cache=off", "--evalbench-compare", "--evalbench-compare-fail=significant",
            "--evalbench-judge-model=other-judge"]
    other = pytester.runpytest(*args)
    assert other.ret == EXIT_INCOMPLETE  # gated against a baseline it cannot be compared with: not a pass
    other.stdout.fnmatch_lines(["*compare significant tgt m01: not evaluated (not comparable: changed since the "
                                "baseline: judge_model sim-judge -> other-judge; --evalbench-compare-anyway compares it)*"])
    other.stdout.no_fnmatch_line("*REGRESSION*")
    anyway = pytester.runpytest(*args, "--evalbench-compare-anyway")
    assert anyway.ret == EXIT_REGRESSION
    anyway.stdout.fnmatch_lines(["*compared anyway (--evalbench-compare-anyway) although changed since the baseline: "
                                 "judge_model sim-judge -> other-judge*"])


@pytest.mark.parametrize("gate", [["--evalbench-compare-fail=significant"], ["--evalbench-compare"]])
def test_a_baseline_made_incomparable_by_the_judge_prompt_cannot_pass_the_gate(
        pytester: pytest.Pytester, bench_env: FakeLLMServer, gate: list[str]) -> None:
    """A regressed target whose judge prompt changed since the baseline: the compare gate (or a max_drop
    rule) cannot read it, so the run is incomplete (exit 7) naming what changed and how to save a new
    baseline; `--evalbench-accept-incomparable` passes on purpose, and the summary says so."""
    rules = {"max_drop": 0.1} if gate == ["--evalbench-compare"] else {}
    bench = write_benchmark(pytester.path, scenarios=positives(10), spec=THRESHOLD_GATE, thresholds=rules)
    assert run_against_baseline(pytester, bench_env, set(), "--evalbench-save-baseline").ret == 0
    write_benchmark(pytester.path, scenarios=positives(10), spec=THRESHOLD_GATE, thresholds=rules,
                    judge={"prompt": "plain"})
    failing = {f"m01_s{i:03d}_v01" for i in range(1, 7)}
    result = run_against_baseline(pytester, bench_env, failing, "--evalbench-compare", *gate)
    assert result.ret == EXIT_INCOMPLETE
    result.stdout.fnmatch_lines(["*evalbench: INCOMPLETE (exit 7)*"])
    result.stdout.fnmatch_lines(["*baseline*not comparable*tgt*judge_prompt examples -> plain*"
                                 "pytest --benchmark=demo --evalbench-save-baseline*"])
    reasons = " ".join(read_json(bench / "last_run.json")["incomplete"])
    assert "judge_prompt examples -> plain" in reasons and "--evalbench-save-baseline" in reasons
    accepted = run_against_baseline(pytester, bench_env, failing, "--evalbench-compare", *gate,
                                    "--evalbench-accept-incomparable")
    assert accepted.ret == 0
    accepted.stdout.fnmatch_lines(["*tgt*not compared*--evalbench-accept-incomparable*judge_prompt examples -> plain*"])


def test_noise_level_change_does_not_fail(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=positives(40), spec=THRESHOLD_GATE)
    run_against_baseline(pytester, bench_env, set(), "--evalbench-save-baseline")
    result = run_against_baseline(pytester, bench_env, {"m01_s007_v01"}, "--evalbench-compare",
                                  "--evalbench-compare-fail=significant", "--evalbench-correction=bh")
    result.assert_outcomes(passed=39, failed=1)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*after Benjamini-Hochberg correction over 1 test"])
    result.stdout.no_fnmatch_line("*REGRESSION*")
    result.stdout.fnmatch_lines(["*flipped pass->fail since the baseline (1); rerun them with:",
                                 "  pytest --benchmark=demo --evalbench-cache=off "
                                 "'benchmarks/demo/scenarios.json::m01_s007_v01[[]tgt-s0[]]'",
                                 "evalbench: PASSED (exit 0): 1 case failed, the build gates on thresholds only"])


def test_bad_compare_rule_and_missing_baseline(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=positives(1))
    result = pytester.runpytest("--benchmark=demo", "--evalbench-compare-fail=sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*invalid compare rule 'sometimes'; accepted forms:*significant*drop:*any*"])
    result = pytester.runpytest("--benchmark=demo", "--evalbench-correction=bonferroni")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--evalbench-correction*invalid choice*'bonferroni'*holm*bh*"])
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo", "--evalbench-compare")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*baseline.json: baseline file not found; create it with --evalbench-save-baseline*"])
    assert bench_env.requests == []  # checked before any LLM call


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
    assert result.ret == 0  # gate: thresholds


def test_junit_xml_carries_verdict_properties(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=positives(1))
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo", "--junitxml=out.xml").assert_outcomes(passed=1)
    case = ET.parse(pytester.path / "out.xml").getroot().find(".//testcase")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props == {"evalbench_present": "True", "evalbench_passed": "True", "evalbench_score": "1",
                     "evalbench_justification": "because", "evalbench_status": "passed"}


# --------------------------------------------------------------------------- the table of issue 14
# Verdicts are set per row by the judged-row hook from verdicts.json ({"<id>" or "<id>#<sample>": present}).

VERDICT_HOOK = """
import json, pathlib

def pytest_evalbench_judged_row(config, row, record):
    verdicts = json.loads(pathlib.Path("verdicts.json").read_text()) if pathlib.Path("verdicts.json").exists() else {}
    for key in (f"{row['id']}#{row['sample']}", row["id"]):
        if key in verdicts:
            row["present"] = verdicts[key]
            return
    row["present"] = True
"""


def set_verdicts(pytester: pytest.Pytester, verdicts: dict[str, bool]) -> None:
    (pytester.path / "verdicts.json").write_text(json.dumps(verdicts))


def baseline_then(pytester: pytest.Pytester, failing: dict[str, bool], *args: str) -> pytest.RunResult:
    """Save a baseline where every row passes, then rerun with `failing` verdicts and `args`."""
    pytester.makeconftest(VERDICT_HOOK)
    set_verdicts(pytester, {})
    assert pytester.runpytest("--benchmark=demo", "--evalbench-save-baseline").ret == 0
    set_verdicts(pytester, failing)
    return pytester.runpytest("--benchmark=demo", "--evalbench-compare", *args)


def test_issue_row_1_three_flips_are_not_significant(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=positives(3), spec=THRESHOLD_GATE, generation={"turns": 1})
    bench_env.set_responder(script(True))
    result = baseline_then(pytester, {f"m01_s00{i}_v01": False for i in (1, 2, 3)},
                           "--evalbench-compare-fail=significant")
    result.assert_outcomes(failed=3)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*tgt*m01*exact McNemar*3*1.000*0.000*-1.000*3/0*0.125*0.125*"])
    result.stdout.no_fnmatch_line("*REGRESSION*")


def test_issue_row_2_ten_metrics_noise_is_not_a_regression(pytester: pytest.Pytester,
                                                          bench_env: FakeLLMServer) -> None:
    metrics = [dict(METRICS[0], id=f"m{m:02d}", name=f"metric {m}") for m in range(1, 11)]
    rows = [scenario(f"m{m:02d}_s{i:03d}_v01", f"m{m:02d}") for m in range(1, 11) for i in range(1, 21)]
    write_benchmark(pytester.path, scenarios=rows, spec=THRESHOLD_GATE, metrics=metrics, generation={"turns": 1})
    bench_env.set_responder(script(True))
    pytester.makeconftest(VERDICT_HOOK)
    improve = {f"m{m:02d}_s001_v01": False for m in range(2, 7)}  # fail in the baseline, pass now
    set_verdicts(pytester, improve)
    assert pytester.runpytest("--benchmark=demo", "--evalbench-save-baseline").ret == 0
    set_verdicts(pytester, {f"m01_s{i:03d}_v01": False for i in range(1, 6)})
    result = pytester.runpytest("--benchmark=demo", "--evalbench-compare", "--evalbench-compare-fail=significant")
    result.assert_outcomes(passed=195, failed=5)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*tgt*m01*exact McNemar*20*5/0*0.0312*0.344*",
                                 "*tgt*(pooled)*exact McNemar*200*5/5*",
                                 "*after Holm correction over 11 tests*"])


def test_issue_row_3_one_flip_of_three_is_not_a_max_drop(pytester: pytest.Pytester,
                                                          bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=positives(3), spec=THRESHOLD_GATE, generation={"turns": 1},
                    thresholds={"max_drop": 0.10})
    bench_env.set_responder(script(True))
    result = baseline_then(pytester, {"m01_s002_v01": False})
    result.assert_outcomes(passed=2, failed=1)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["  rule: max_drop 0.10 tgt m01: -0.33, p_adj 0.5 held (detects no drop)",
                                 "evalbench: PASSED (exit 0): 1 case failed, the build gates on thresholds only"])


def test_issue_row_4_nine_of_ten_samples_pass_the_build(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=positives(2), generation={"turns": 1, "num_samples": 10})
    bench_env.set_responder(script(True))
    pytester.makeconftest(VERDICT_HOOK)
    set_verdicts(pytester, {"m01_s001_v01#3": False})
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(passed=19, failed=1)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*per-case: m01_s001_v01[[]tgt[]] 9/10 passed -> pass*",
                                 "evalbench: PASSED (exit 0): per-case verdicts over the samples: "
                                 "2 pass, 0 inconclusive, 0 fail"])
    set_verdicts(pytester, {f"m01_s001_v01#{s}": False for s in range(9)})  # 1/10: the case fails
    result = pytester.runpytest("--benchmark=demo")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*per-case: m01_s001_v01[[]tgt[]] 1/10 passed -> fail*",
                                 "evalbench: FAILED (exit 1): per-case verdicts over the samples: "
                                 "1 pass, 0 inconclusive, 1 fail"])


def test_inconclusive_cases_are_listed_and_fail_only_when_configured(pytester: pytest.Pytester,
                                                                     bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=positives(1), generation={"turns": 1, "num_samples": 4})
    bench_env.set_responder(script(True))
    pytester.makeconftest(VERDICT_HOOK)
    set_verdicts(pytester, {"m01_s001_v01#0": False, "m01_s001_v01#1": False})
    result = pytester.runpytest("--benchmark=demo")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*per-case: m01_s001_v01[[]tgt[]] 2/4 passed -> inconclusive*"])
    write_benchmark(pytester.path, scenarios=positives(1), generation={"turns": 1, "num_samples": 4},
                    gate={"fail_inconclusive": True})
    assert pytester.runpytest("--benchmark=demo").ret == pytest.ExitCode.TESTS_FAILED


def write_cases(pytester: pytest.Pytester, n: int, **spec: Any) -> None:
    """A dataset benchmark of n copies of the example's readiness case (TaskAdherence + Coherence)."""
    bench = pytester.path / "benchmarks" / "agents"
    bench.mkdir(parents=True, exist_ok=True)
    data = yaml.safe_load((EXAMPLES / "benchmark.yaml").read_text())
    data.update(evaluator_model={"model": JUDGE}, gate={"mode": "cases"}, **spec)
    (bench / "benchmark.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    template = json.loads((EXAMPLES / "cases.jsonl").read_text().splitlines()[2])
    rows = [dict(template, case_id=f"readiness-{i:03d}") for i in range(1, n + 1)]
    (bench / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def evaluator(table: dict[str, Any]) -> Any:
    def respond(request: dict[str, Any]) -> Any:
        name = request["response_format"]["json_schema"]["name"].removeprefix("explain_")
        value = table.get(name, 5)
        return value if isinstance(value, Reply) else {"explanation": f"{name} explanation", "score": value}
    return respond


def test_issue_row_5_dataset_baseline_catches_all_cases_failing(pytester: pytest.Pytester,
                                                                bench_env: FakeLLMServer) -> None:
    write_cases(pytester, 30)
    bench_env.set_responder(evaluator({}))
    assert pytester.runpytest("--benchmark=agents", "--evalbench-save-baseline").ret == 0
    baseline = read_json(pytester.path / "benchmarks" / "agents" / "baseline.json")
    assert len(baseline["cases"]) == 30 and len(baseline["scores"]) == 60
    assert baseline["cases"]["readiness-assessment-agent|readiness-001|pass_rate|0"] is True
    bench_env.set_responder(evaluator({"TaskAdherenceExplain": 2, "CoherenceExplain": 2}))
    result = pytester.runpytest("--benchmark=agents", "--evalbench-compare", "--evalbench-compare-fail=significant",
                                "--evalbench-cache=off", "--evalbench-html=report.html")
    result.assert_outcomes(failed=30)
    assert result.ret == EXIT_REGRESSION
    result.stdout.fnmatch_lines([
        "*REGRESSION vs baseline: readiness-assessment-agent: pass_rate 1.00 -> 0.00 (-1.00; 30 pass->fail / "
        "0 fail->pass of 30), exact McNemar p=9.31e-10*",
        "*REGRESSION vs baseline: readiness-assessment-agent: TaskAdherenceExplain mean score 5.00 -> 2.00 (-3.00, "
        "bootstrap 95% CI [[]-3.00, -3.00[]]), Wilcoxon (exact) p=9.31e-10, adjusted p=2.79e-09*",
        "evalbench: REGRESSION (exit 6*"])
    result.stdout.no_fnmatch_line("*rule held*")
    assert "readiness-assessment-agent" in (pytester.path / "report.html").read_text()


def test_issue_row_6_scored_metric_below_threshold_fails_an_unscored_case(pytester: pytest.Pytester,
                                                                           bench_env: FakeLLMServer) -> None:
    write_cases(pytester, 1)
    bench_env.set_responder(evaluator({"CoherenceExplain": 3, "TaskAdherenceExplain": Reply(content="no json")}))
    result = pytester.runpytest("--benchmark=agents")
    result.assert_outcomes(failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    [row] = read_json(pytester.path / "benchmarks" / "agents" / "case_results.json")
    assert row["status"] == "failed" and row["passed"] is False
    assert "below threshold: CoherenceExplain=3 (< 3.60)" in row["reasons"]


def test_typo_in_thresholds_fails_before_any_llm_call(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=positives(1), thresholds={"min_positve_pass_rate": 0.5})
    result = pytester.runpytest("--benchmark=demo")
    assert result.ret != 0 and bench_env.requests == []
    result.stdout.fnmatch_lines(["*benchmark.yaml*thresholds*min_positve_pass_rate*"])


def test_old_or_foreign_baseline_files_are_named(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=positives(1))
    bench_env.set_responder(script(True))
    (bench / "baseline.json").write_text(json.dumps({"schema_version": 0, "meta": {}, "targets": {}, "cases": {}}))
    result = pytester.runpytest("--benchmark=demo", "--evalbench-compare")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and bench_env.requests == []
    result.stderr.fnmatch_lines(["*baseline.json: baseline schema_version 0 is not supported*"])
    (bench / "baseline.json").write_text(json.dumps({"schema_version": 1, "meta": {}, "targets": {},
                                                     "cases": {"tgt|m01_s001_v01|m01|0": True}}))
    assert pytester.runpytest("--benchmark=demo", "--evalbench-compare", "--evalbench-compare-fail=significant"
                              ).ret == 0


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]])
def test_plan_makes_no_call_and_reads_the_baselines_rates(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                          xdist: list[str]) -> None:
    bench = write_benchmark(pytester.path, scenarios=positives(4))
    bench_env.set_responder(script(judge_passes_except({"m01_s001_v01"}), user=user_says_id))
    assert pytester.runpytest("--benchmark=demo", "--evalbench-save-baseline").ret == 1
    requests = len(bench_env.requests)
    files = sorted(p.name for p in bench.iterdir())
    result = pytester.runpytest("--benchmark=demo", "--evalbench-plan=0.1", "--evalbench-compare", *xdist)
    assert result.ret == 0
    assert len(bench_env.requests) == requests  # not one call
    assert sorted(p.name for p in bench.iterdir()) == files  # nothing written
    result.stdout.fnmatch_lines([
        "*evalbench plan*",
        "tgt m01: rate 0.75 (baseline.json): a drop of 0.10 needs * paired rows for 80% power at alpha 0.05: "
        "4 cases x * samples, or * cases x 1 sample; this selection: 4 cases x 1 sample, detects *",
        "*no call was made"])
    without = pytester.runpytest("--benchmark=demo", "--evalbench-plan=0.2")
    without.stdout.fnmatch_lines(["tgt m01: rate 0.50 (assumed): a drop of 0.20 needs 83 paired rows*"])
    # a baseline path with no file yet: the plan is made at 0.5 and says how to save one (not a usage error)
    unsaved = pytester.runpytest("--benchmark=demo", "--evalbench-plan=0.2", "--evalbench-compare=none-yet.json")
    assert unsaved.ret == 0
    unsaved.stdout.fnmatch_lines(["tgt m01: rate 0.50 (assumed): a drop of 0.20 needs 83 paired rows*",
                                  "no baseline at *none-yet.json yet: planned at an assumed pass rate of 0.5; save one "
                                  "with `pytest --benchmark=demo --evalbench-save-baseline`"])
    assert len(bench_env.requests) == requests
    bad = pytester.runpytest("--benchmark=demo", "--evalbench-plan=1.5")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--evalbench-plan*not a drop of the pass rate between 0 and 1*"])
