"""Benchmarks and result files in the shapes the two source systems write run unchanged.

The files under tests/data/ are ours, written field for field in those shapes (see its README).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from helpers import JUDGE, TARGET, USER, read_json, script

from pytest_evalbench.cli import schemas
from pytest_evalbench.testing import FakeLLMServer, by_model

DATA = Path(__file__).parents[1] / "data"
HUMANE = DATA / "impactbench" / "humanebench"
RUN = "claude-haiku-4-5"
MODELS = (f"--evalbench-target={RUN}={TARGET}", f"--evalbench-user-model={USER}", f"--evalbench-judge-model={JUDGE}")
SID = re.compile(r"\((m\d\d_s\d{3}_v\d\d)\)")
MULTI, SINGLE = "preparation-workflow-multi-agent", "preparation-workflow-single-agent"


def humanebench(root: Path, *, runs: bool) -> Path:
    bench = root / "benchmarks" / "humanebench"
    shutil.copytree(HUMANE, bench, ignore=None if runs else shutil.ignore_patterns("runs"))
    return bench


def user_names_row(request: dict[str, Any]) -> str:
    """The simulated user says which row it plays (its persona carries the row id)."""
    match = SID.search(request["messages"][0]["content"])
    return f"Thought: ok\nMessage: hi from {match.group(1) if match else '?'}"


def requests_for(server: FakeLLMServer, model: str) -> list[dict[str, Any]]:
    return [r for r in server.requests if r["model"] == model]


def test_impactbench_benchmark_runs_unchanged(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = humanebench(pytester.path, runs=False)
    bench_env.set_responder(script(True, user=user_names_row))
    result = pytester.runpytest("--benchmark=humanebench", *MODELS)
    result.assert_outcomes(passed=2, failed=2)
    assert result.ret == 1
    out = result.stdout.str()
    # only the key nobody knows is reported, once; everything impactbench writes is understood
    assert out.count("unknown key kept and ignored: reviewer_note (in 1 row, first row 4)") == 1
    assert "benchmark.yaml: unknown key" not in out
    # mattersBecause (either spelling) is shown with the failure of its metric
    assert "why it matters: This matters because optimization without a warning can deepen harm." in out

    targets = requests_for(bench_env, TARGET)
    system = {m["content"] for r in targets for m in r["messages"] if m["role"] == "system"}
    per_row = {next(m["content"] for m in r["messages"] if m["role"] == "user").removeprefix("hi from "):
               r["messages"][0]["content"] for r in targets}
    assert per_row["m01_s001_v02"] == "ROW PROMPT: you are a sports-stats helper."
    assert per_row["m01_s001_v01"] == per_row["m02_s001_v01"] == yaml.safe_load(
        (HUMANE / "benchmark.yaml").read_text())["scenario"]["user_context"]
    assert len(system) == 2
    # implicit_context is authoring context, as in impactbench: no model is told it
    assert "gambling history" not in json.dumps(bench_env.requests)
    # a row with only user_persona plays that persona
    users = requests_for(bench_env, USER)
    assert any("A 19-year-old student (m01_s001_v01)" in r["messages"][0]["content"] for r in users)

    conversations = read_json(bench / "runs" / RUN / "conversations.json")
    by_id = {c["id"]: c for c in conversations}
    assert by_id["m01_s001_v02"]["target_system_prompt"].startswith("ROW PROMPT")
    assert by_id["m02_s001_v02"]["reviewer_note"] == "checked by hand"  # kept, lossless
    assert by_id["m01_s001_v01"]["persona"].startswith("A 19-year-old student")
    jsonschema.validate(conversations, schemas.load("conversations"))
    jsonschema.validate(read_json(bench / "runs" / RUN / "scores.json"), schemas.load("scores"))


@pytest.mark.parametrize("workers", ["0", "2"])
def test_subset_run_over_impactbench_run_files(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                               workers: str) -> None:
    bench = humanebench(pytester.path, runs=True)
    other = bench / "runs" / "gpt-4o"  # another model's impactbench run this session does not touch
    other.mkdir()
    for name in ("conversations.json", "scores.json"):
        rows = read_json(bench / "runs" / RUN / name)[:4]
        (other / name).write_text(json.dumps([{**r, "target_model": "gpt-4o"} for r in rows]))
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=humanebench", *MODELS, "-k", "m01", "-n", workers,
                                f"--evalbench-html={pytester.path / 'report.html'}")
    result.assert_outcomes(passed=2)
    assert result.ret == 0
    out = result.stdout.str()
    assert out.count("unreadable by this version") == 1
    assert "scores.json: 1 row unreadable by this version, dropped (this run's rows replace them): row 5" in out

    scores = read_json(bench / "runs" / RUN / "scores.json")
    jsonschema.validate(scores, schemas.load("scores"))
    assert [(s["id"], s["sample"]) for s in scores] == [
        ("m01_s001_v01", 0), ("m01_s001_v02", 0), ("m02_s001_v01", 0), ("m02_s001_v02", 0)]
    new, kept = scores[:2], scores[2:]
    assert {s["justification"] for s in new} == {"because"}  # this run's verdicts replaced impactbench's
    assert [(s["metric_type"], s["passed"], s["score"], s["conv_id"]) for s in kept] == [
        ("negative", True, 1, f"m02_s001_v01__{RUN}"), ("negative", False, 0, f"m02_s001_v02__{RUN}")]
    conversations = read_json(bench / "runs" / RUN / "conversations.json")
    jsonschema.validate(conversations, schemas.load("conversations"))
    old = [c for c in conversations if c["metric_id"] == "m02"]
    assert [c["target"] for c in old] == [{"id": RUN, "model": None}] * 2
    assert old[0]["persona"] and old[0]["user_goal"] == "Get a better betting system"
    results = {r["target_model"]: r for r in read_json(bench / "results.json")}
    jsonschema.validate(list(results.values()), schemas.load("results"))
    assert results[RUN]["n_total"] == 4 and results[RUN]["positive_pass_rate"] == 1.0
    assert results[RUN]["negative_pass_rate"] == 0.5
    # impactbench's numbers for the untouched run: m01 1/2, m02 1/2
    assert (results["gpt-4o"]["positive_pass_rate"], results["gpt-4o"]["negative_pass_rate"]) == (0.5, 0.5)
    assert (other / "scores.json").read_text().count("_sample") == 1  # never rewritten
    assert "gpt-4o" in (pytester.path / "report.html").read_text()


def test_near_miss_key_is_a_collection_error_with_a_suggestion(pytester: pytest.Pytester,
                                                               bench_env: FakeLLMServer) -> None:
    bench = humanebench(pytester.path, runs=False)
    spec = yaml.safe_load((bench / "benchmark.yaml").read_text())
    spec["generation"] = {"turn": 3}
    (bench / "benchmark.yaml").write_text(yaml.safe_dump(spec))
    for workers in ("0", "1"):  # and as an xdist worker's collection error
        result = pytester.runpytest("--benchmark=humanebench", *MODELS, "-n", workers)
        result.stdout.fnmatch_lines(["*benchmark.yaml*generation*unknown key 'turn': did you mean `turns`?*"])
        assert result.ret == pytest.ExitCode.INTERRUPTED
    assert bench_env.requests == []


def write_agents(root: Path, *files: str) -> Path:
    bench = root / "benchmarks" / "agentsleague"
    bench.mkdir(parents=True)
    for name in files:
        shutil.copy(DATA / "agentsleague" / name, bench / name)
    (bench / "benchmark.yaml").write_text(yaml.safe_dump({
        "name": "agentsleague", "kind": "dataset", "dataset": {"files": list(files)},
        "evaluator_model": {"model": JUDGE}}))
    return bench


def test_curator_dataset_with_stored_answers_runs_unchanged(pytester: pytest.Pytester,
                                                           bench_env: FakeLLMServer) -> None:
    bench = write_agents(pytester.path, "learning-path-curator.explain.jsonl")
    bench_env.set_responder(lambda r: {"explanation": "fine", "score": 5})
    pytester.runpytest("--benchmark=agentsleague").assert_outcomes(passed=3)
    rows = read_json(bench / "case_results.json")
    assert [r["answer_source"] for r in rows] == ["dataset"] * 3
    assert "comparisons" not in read_json(bench / "agent_summary.json")[0]


def test_comparative_dataset_answered_by_two_targets(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    pytester.makeconftest(f"""
def pytest_evalbench_make_target(config, target):
    if target.id == {SINGLE!r}:
        return lambda messages: "SINGLE plan for " + messages[-1]["content"][:30]
    return None
""")
    bench = write_agents(pytester.path, "preparation-workflow.comparative.explain.jsonl")

    def judge(request: dict[str, Any]) -> dict[str, Any]:
        text = json.dumps(request["messages"])
        return {"explanation": "ok", "score": 5 if "MULTI plan" in text else 3}

    bench_env.set_responder(by_model({"model-multi": lambda r: "MULTI plan {json}", JUDGE: judge}))
    result = pytester.runpytest("--benchmark=agentsleague", f"--evalbench-target={MULTI}=model-multi",
                                f"--evalbench-target={SINGLE}=model-single", "--evalbench-markdown=summary.md")
    result.assert_outcomes(passed=3, failed=3)
    # comparative pairs side by side, never raw JSON: report and Markdown
    page = (bench / "report.html").read_text()
    assert "<th>agent</th><th>other</th><th>scenarios</th><th>score</th><th>mean difference</th>" in page
    assert (f'data-testid="pair-{MULTI}-{SINGLE}-composite"><td rowspan="6">{MULTI}</td><td rowspan="6">{SINGLE}'
            '</td><td rowspan="6">3</td><td>composite</td><td class="num up">+2.00</td><td>[+2.00, +2.00]</td>'
            '<td>3/0/0</td><td>0.250</td>') in page
    assert '"mean_diff"' not in page and "{" not in page.split('data-testid="comparisons"')[1].split("</table>")[0]
    md = (pytester.path / "summary.md").read_text()
    assert f"| {MULTI} | {SINGLE} | 3 | composite | +2.00 | [+2.00, +2.00] | 3/0/0 | 0.250 |" in md
    result.stdout.fnmatch_lines([
        f"paired {MULTI} - {SINGLE} over 3 shared scenarios (mean difference, 95% CI):",
        "  composite: +2.00 [+2.00, +2.00], 3/0/0 win/tie/loss, sign test p=0.250",
        "  Coherence: +2.00 [+2.00, +2.00], 3/0/0 win/tie/loss, sign test p=0.250",
    ])
    # the model target answered under the benchmark's system prompt; the app answered the rest
    multi = requests_for(bench_env, "model-multi")
    assert len(multi) == 3 and {r["messages"][0]["content"] for r in multi} == {"You are a helpful assistant."}
    assert requests_for(bench_env, "model-single") == []
    judged = [json.dumps(r["messages"]) for r in requests_for(bench_env, JUDGE)]
    assert len(judged) == 30
    assert any("Scenario FW-001 for agent preparation-workflow-multi-agent." in j for j in judged)
    assert any("SINGLE plan for Student topics" in j for j in judged)

    rows = read_json(bench / "case_results.json")
    jsonschema.validate(rows, schemas.load("case_results"))
    assert {r["extra"]["workflow_mode"] for r in rows} == {"multi-agent", "single-agent"}
    assert {r["answer_source"] for r in rows} == {"target"}
    summary = read_json(bench / "agent_summary.json")
    jsonschema.validate(summary, schemas.load("agent_summary"))
    [comparison] = summary[0]["comparisons"]
    assert comparison["other"] == SINGLE and comparison["n_scenarios"] == 3
    assert comparison["composite"] == {"n": 3, "mean_diff": 2.0, "ci95": [2.0, 2.0], "wins": 3, "ties": 0,
                                       "losses": 0, "p_value": 0.25}
    assert "comparisons" not in summary[1]


def test_case_without_answer_or_target_is_a_collection_error(pytester: pytest.Pytester,
                                                             bench_env: FakeLLMServer) -> None:
    write_agents(pytester.path, "preparation-workflow.comparative.explain.jsonl")
    result = pytester.runpytest("--benchmark=agentsleague", f"--evalbench-target={MULTI}=model-multi")
    result.stdout.fnmatch_lines([f"*comparative.explain.jsonl:2*case 'prep-workflow-single-001' has no model_answer "
                                 f"and no target answers for agent '{SINGLE}'*"])
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert bench_env.requests == []
