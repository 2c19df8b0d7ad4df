"""Dataset-case benchmarks end to end: Explain evals, scoring policy, tool check, result files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from helpers import JUDGE, read_json

from pytest_evalbench.cli import schemas
from pytest_evalbench.gate.decision import EXIT_INCOMPLETE
from pytest_evalbench.testing import FakeLLMServer, Reply

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "benchmarks" / "agents"


def eval_of(request: dict[str, Any]) -> str:
    return request["response_format"]["json_schema"]["name"].removeprefix("explain_")


def scores(table: dict[str, Any], default: Any = 5) -> Any:
    """Responder: the score for each eval from `table` (a value, a Reply, or a callable of the request)."""
    def respond(request: dict[str, Any]) -> Any:
        value = table.get(eval_of(request), default)
        value = value(request) if callable(value) else value
        if isinstance(value, Reply):
            return value
        return {"explanation": f"{eval_of(request)} explanation", "score": value}
    return respond


def write_dataset(root: Path, cases: list[dict[str, Any]] | None = None, **spec: Any) -> Path:
    bench = root / "benchmarks" / "agents"
    bench.mkdir(parents=True, exist_ok=True)
    data = yaml.safe_load((EXAMPLE / "benchmark.yaml").read_text())
    data["evaluator_model"] = {"model": JUDGE}
    data.pop("gate", None)
    data.update(spec)
    (bench / "benchmark.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    rows = cases if cases is not None else example_rows()
    (bench / "cases.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return bench


def example_rows() -> list[dict[str, Any]]:
    """The example benchmark's cases, freshly parsed (callers may change them)."""
    return [json.loads(line) for line in (EXAMPLE / "cases.jsonl").read_text().splitlines()]


def example_case(index: int = 0, **changes: Any) -> dict[str, Any]:
    return {**example_rows()[index], **changes}


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--benchmark=agents", *args)


def test_items_and_node_ids(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_dataset(pytester.path)
    result = run(pytester, "--collect-only", "-q")
    result.stdout.fnmatch_lines(["benchmarks/agents/cases.jsonl::learning-path-curator-001",
                                 "benchmarks/agents/cases.jsonl::learning-path-curator-002",
                                 "benchmarks/agents/cases.jsonl::readiness-assessment-agent-003",
                                 "benchmarks/agents/cases.jsonl::readiness-assessment-agent-004"])
    assert bench_env.requests == []


def test_all_high_scores_pass_and_only_required_evals_run(pytester: pytest.Pytester,
                                                          bench_env: FakeLLMServer) -> None:
    bench = write_dataset(pytester.path)
    bench_env.set_responder(scores({}))
    run(pytester).assert_outcomes(passed=4)
    asked = sorted(eval_of(r) for r in bench_env.requests)
    assert asked == sorted(["TaskAdherenceExplain", "RelevanceExplain", "ToolCallAccuracyExplain"] * 2
                           + ["TaskAdherenceExplain", "CoherenceExplain"] * 2)
    rows = read_json(bench / "case_results.json")
    jsonschema.validate(rows, schemas.load("case_results"))
    summary = read_json(bench / "agent_summary.json")
    jsonschema.validate(summary, schemas.load("agent_summary"))
    assert [r["case_id"] for r in rows] == ["learning-path-curator-001", "learning-path-curator-002",
                                           "readiness-assessment-agent-003", "readiness-assessment-agent-004"]
    assert summary[0] == {"agent_name": "learning-path-curator", "n_cases": 2, "n_scored": 2, "n_passed": 2,
                          "n_unscored": 0, "pass_rate": 1.0, "composite_mean": 5.0,
                          "metric_means": {"RelevanceExplain": 5.0, "TaskAdherenceExplain": 5.0,
                                           "ToolCallAccuracyExplain": 5.0}, "version": 1}
    assert rows[0]["tool_check"]["ok"] is True and rows[1]["tool_check"]["ok"] is False
    assert "evaluate" in read_json(bench / "cost.json")


@pytest.mark.parametrize("hard", ["TaskAdherenceExplain", "ToolCallAccuracyExplain"])
def test_hard_fail_fails_whatever_the_composite(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                 hard: str) -> None:
    write_dataset(pytester.path, cases=[example_case(0)])
    bench_env.set_responder(scores({hard: 2}))
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*{hard.removesuffix('Explain')}*2*", "*hard*"])
    result.stdout.no_fnmatch_line("*Traceback*")


def test_intent_resolution_hard_fail(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    case = example_case(0, required_evals=["IntentResolutionExplain", "RelevanceExplain"])
    write_dataset(pytester.path, cases=[case])
    bench_env.set_responder(scores({"IntentResolutionExplain": 1}))
    run(pytester).assert_outcomes(failed=1)


def test_below_threshold_fails_and_lists_every_metric(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_dataset(pytester.path, cases=[example_case(2)])  # assessment_strict, TaskAdherence + Coherence
    bench_env.set_responder(scores({"CoherenceExplain": 3}))  # 3 >= hard-fail 3.0 but < 3.6
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*TaskAdherence*score  5*threshold 3.70*ok*", "*Coherence*score  3*threshold 3.60*LOW*"])


def test_composite_below_profile_mark(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    # every metric at its threshold is not enough when the weighted composite misses the mark
    case = example_case(2, required_evals=["TaskAdherenceExplain", "CoherenceExplain"])
    write_dataset(pytester.path, cases=[case],
                  dataset={"files": ["cases.jsonl"], "policy": {
                      "default_profile": "assessment_strict",
                      "thresholds": {"TaskAdherenceExplain": 3.0, "CoherenceExplain": 3.0},
                      "profiles": {"assessment_strict": {"pass_mark": 4.5, "weights": {
                          "TaskAdherenceExplain": 0.5, "CoherenceExplain": 0.5}}},
                      "hard_fail": {"metrics": ["TaskAdherenceExplain"], "below": 3.0}}})
    bench_env.set_responder(scores({"TaskAdherenceExplain": 4, "CoherenceExplain": 4}))
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*4.00*4.5*"])


@pytest.mark.parametrize("bad", [0, 6, 7.5, -1, "five", None])
def test_out_of_range_or_unparseable_scores_are_unscored(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                         bad: Any) -> None:
    bench = write_dataset(pytester.path, cases=[example_case(2)])
    bench_env.set_responder(scores({"CoherenceExplain": Reply(content="no json") if bad is None else bad}))
    result = run(pytester)
    result.assert_outcomes(errors=1)
    assert result.ret == EXIT_INCOMPLETE
    assert len([r for r in bench_env.requests if eval_of(r) == "CoherenceExplain"]) == 3
    [row] = read_json(bench / "case_results.json")
    assert row["status"] == "unscored" and row["passed"] is None
    coherence = next(m for m in row["metrics"] if m["eval"] == "CoherenceExplain")
    assert coherence["score"] is None and "unscored" in coherence["explanation"]
    [summary] = read_json(bench / "agent_summary.json")
    assert summary["n_unscored"] == 1 and summary["pass_rate"] is None


def test_bad_rows_name_file_line_and_field(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    case = example_case(1)
    del case["required_evals"]
    write_dataset(pytester.path, cases=[example_case(0), case])
    result = run(pytester)
    result.stdout.fnmatch_lines(["*cases.jsonl*2*required_evals*"])
    result.stdout.no_fnmatch_line("*Traceback*")
    write_dataset(pytester.path, cases=[example_case(0, threshold_profile="nope")])
    result = run(pytester)
    result.stdout.fnmatch_lines(["*cases.jsonl*1*threshold_profile*nope*prep_default*"])


def test_app_answers_and_tool_calls_feed_the_evals(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    pytester.makeconftest("""
def pytest_evalbench_make_target(config, target):
    def curator(messages):
        return {"content": "APP ANSWER for " + messages[-1]["content"][:20],
                "tool_calls": [{"tool": "SearchLearningPaths", "arguments": {"query": "AZ-900"}, "outcome": "ok"}]}
    return curator if target.id == "learning-path-curator" else None
""")
    bench = write_dataset(pytester.path, cases=[example_case(0), example_case(1)],
                          targets=[{"id": "learning-path-curator"}])
    bench_env.set_responder(scores({}))
    run(pytester).assert_outcomes(passed=2)
    judged = json.dumps([r["messages"] for r in bench_env.requests])
    assert "APP ANSWER for Student topics" in judged
    rows = read_json(bench / "case_results.json")
    assert [r["answer_source"] for r in rows] == ["target", "target"]
    # case 2 expected SearchLearningPaths(AZ-104); the app called it with AZ-900
    assert rows[0]["tool_check"]["ok"] is True and rows[1]["tool_check"]["ok"] is False


def test_dataset_results_merge_under_xdist(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_dataset(pytester.path)
    bench_env.set_responder(scores({"CoherenceExplain": 2}))
    run(pytester, "-n", "2").assert_outcomes(passed=2, failed=2)
    parallel = (bench / "case_results.json").read_bytes()
    run(pytester, "-n", "0", "--evalbench-cache=replay").assert_outcomes(passed=2, failed=2)
    assert (bench / "case_results.json").read_bytes() == parallel
    run(pytester, "benchmarks/agents/cases.jsonl::learning-path-curator-001").assert_outcomes(passed=1)
    assert len(read_json(bench / "case_results.json")) == 4


def test_example_benchmark_replays_offline(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shipped example runs from its committed cache with no network and no key."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    import shutil

    shutil.copytree(EXAMPLE, pytester.path / "benchmarks" / "agents")
    result = run(pytester, "--evalbench-cache=replay")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 4 and "errors" not in outcomes
    assert result.ret == 0


def test_every_eval_kind_runs_through_the_evaluator(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    from pytest_evalbench.kinds.explain import EVAL_NAMES

    case = example_case(0, required_evals=list(EVAL_NAMES), explain_inputs={})
    bench = write_dataset(pytester.path, cases=[case])
    given = {name: 3 + i % 3 for i, name in enumerate(EVAL_NAMES)}  # 3, 4, 5, 3, ...
    bench_env.set_responder(scores(given))
    run(pytester)
    assert sorted(eval_of(r) for r in bench_env.requests) == sorted(EVAL_NAMES)
    for request in bench_env.requests:
        text = json.dumps(request["messages"])
        assert "1-5 scale" in text and case["question"][:30] in text
    [row] = read_json(bench / "case_results.json")
    assert {m["eval"]: m["score"] for m in row["metrics"]} == given
    weights = yaml.safe_load((EXAMPLE / "benchmark.yaml").read_text())["dataset"]["policy"]["profiles"][
        "prep_default"]["weights"]
    expected = sum(given[k] * w for k, w in weights.items()) / sum(weights.values())
    assert row["composite"] == pytest.approx(expected, abs=1e-4)


def test_tool_accuracy_not_applicable_without_expected_or_invoked_tools(pytester: pytest.Pytester,
                                                                         bench_env: FakeLLMServer) -> None:
    case = example_case(2, required_evals=["TaskAdherenceExplain", "CoherenceExplain", "ToolCallAccuracyExplain"])
    assert case["expected_tool_calls"] == [] and case["invoked_tool_calls"] == []
    bench = write_dataset(pytester.path, cases=[case])
    bench_env.set_responder(scores({"ToolCallAccuracyExplain": 1}))  # a hard fail, were it asked
    result = run(pytester)
    result.assert_outcomes(passed=1)
    assert "ToolCallAccuracyExplain" not in {eval_of(r) for r in bench_env.requests}
    [row] = read_json(bench / "case_results.json")
    tool_line = row["metrics"][-1]
    assert tool_line["eval"] == "ToolCallAccuracyExplain" and tool_line["not_applicable"] is True
    assert tool_line["score"] is None and row["composite"] == 5.0
    assert any("not applicable" in reason for reason in row["reasons"])
    jsonschema.validate(read_json(bench / "case_results.json"), schemas.load("case_results"))


def test_judge_panel_takes_the_lower_median_of_explain_scores(pytester: pytest.Pytester,
                                                               bench_env: FakeLLMServer) -> None:
    from pytest_evalbench.testing import by_model

    bench = write_dataset(pytester.path, cases=[example_case(2)], evaluator_models=[{"model": "judge-b"}])
    bench_env.set_responder(by_model({JUDGE: scores({}, default=5), "judge-b": scores({}, default=4)}))
    run(pytester).assert_outcomes(passed=1)
    [row] = read_json(bench / "case_results.json")
    assert [(m["score"], m["votes"], m["agreement"]) for m in row["metrics"]] == [(4, [5, 4], 0.5), (4, [5, 4], 0.5)]
    assert row["metrics"][0]["explanation"].startswith("panel median of [5, 4]")
    jsonschema.validate(read_json(bench / "case_results.json"), schemas.load("case_results"))
