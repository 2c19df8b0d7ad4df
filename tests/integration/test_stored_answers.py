"""Answers of a live target to answer-less dataset cases are kept in answers/<agent>.jsonl, merged
per case, readable as a dataset file, and scored again by a later run without the target."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from helpers import JUDGE, read_json

from pytest_evalbench.cli import schemas
from pytest_evalbench.kinds.dataset.models import load_cases
from pytest_evalbench.testing import FakeLLMServer, by_model

DATA = Path(__file__).parents[1] / "data" / "agentsleague"
FILE = "preparation-workflow.comparative.explain.jsonl"
MULTI, SINGLE = "preparation-workflow-multi-agent", "preparation-workflow-single-agent"
APP = f"""
def pytest_evalbench_make_target(config, target):
    if target.id == {SINGLE!r}:
        return lambda messages: {{"content": "SINGLE plan for " + messages[-1]["content"][:30],
                                  "tool_calls": [{{"tool": "SearchLearningPaths", "arguments": {{"q": "AZ"}}}}]}}
    return None
"""
LIVE = (f"--evalbench-target={MULTI}=model-multi", f"--evalbench-target={SINGLE}")


def write_bench(root: Path) -> Path:
    bench = root / "benchmarks" / "agentsleague"
    bench.mkdir(parents=True)
    shutil.copy(DATA / FILE, bench / FILE)
    (bench / "benchmark.yaml").write_text(yaml.safe_dump({
        "name": "agentsleague", "kind": "dataset", "dataset": {"files": [FILE]},
        "evaluator_model": {"model": JUDGE}, "targets": [{"id": SINGLE}]}))
    return bench


def judge(request: dict[str, Any]) -> dict[str, Any]:
    text = json.dumps(request["messages"])
    return {"explanation": "ok", "score": 5 if "MULTI plan" in text else 3}


def multi(request: dict[str, Any]) -> str:
    return "MULTI plan for " + request["messages"][-1]["content"][:30]


def answers(bench: Path, agent: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (bench / "answers" / f"{agent}.jsonl").read_text().splitlines()]


def without_targets(pytester: pytest.Pytester, bench: Path) -> None:
    """No target for either agent: no app hook, none in benchmark.yaml, no endpoint reachable."""
    pytester.makeconftest("")
    spec = yaml.safe_load((bench / "benchmark.yaml").read_text())
    spec.pop("targets")
    (bench / "benchmark.yaml").write_text(yaml.safe_dump(spec))


@pytest.mark.parametrize("workers", ["0", "2"])
def test_live_answers_are_kept_and_scored_again_without_the_target(
        pytester: pytest.Pytester, bench_env: FakeLLMServer, workers: str) -> None:
    pytester.makeconftest(APP)
    bench = write_bench(pytester.path)
    bench_env.set_responder(by_model({"model-multi": multi, JUDGE: judge}))
    pytester.runpytest("--benchmark=agentsleague", "-n", workers, *LIVE).assert_outcomes(passed=3, failed=3)
    live = read_json(bench / "case_results.json")
    assert {r["answer_source"] for r in live} == {"target"}

    dataset = [json.loads(line) for line in (bench / FILE).read_text().splitlines()]
    for agent, text in ((MULTI, "MULTI plan for Student topics"), (SINGLE, "SINGLE plan for Student topics")):
        stored = answers(bench, agent)
        # in dataset order, one line per case of the agent, each the case's own line with its answer
        assert [s["case_id"] for s in stored] == [d["case_id"] for d in dataset if d["agent_name"] == agent]
        for line in stored:
            jsonschema.validate(line, schemas.load("answers"))
            assert line["model_answer"].startswith(text) and line["workflow_mode"]
        # the file is itself a valid dataset file
        assert all(case.model_answer for _, case in load_cases(bench / "answers" / f"{agent}.jsonl"))
    assert answers(bench, SINGLE)[0]["invoked_tool_calls"] == [{"tool": "SearchLearningPaths",
                                                                 "arguments": {"q": "AZ"}}]
    assert answers(bench, MULTI)[0]["explain_inputs"]["RelevanceExplain"]["context"] == (
        f"Scenario FW-001 for agent {MULTI}.")

    # a later run without either target, replaying (no network), scores the stored answers exactly
    # as they were judged live: every judge call is a replay of the live run's (in-process: what the
    # xdist parameter adds is the answers files written from the workers' records)
    without_targets(pytester, bench)
    bench_env.reset()
    bench_env.set_responder(lambda request: pytest.fail("no call may reach the endpoint"))
    result = pytester.runpytest("--benchmark=agentsleague", "--evalbench-cache=replay")
    result.assert_outcomes(passed=3, failed=3)
    assert bench_env.requests == []
    again = read_json(bench / "case_results.json")
    assert {r["answer_source"] for r in again} == {"stored"}
    assert [dict(r, answer_source="target") for r in again] == live
    jsonschema.validate(again, schemas.load("case_results"))


def test_subset_runs_merge_answers_per_case(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    pytester.makeconftest(APP)
    bench = write_bench(pytester.path)
    bench_env.set_responder(by_model({"model-multi": multi, JUDGE: judge}))
    pytester.runpytest("--benchmark=agentsleague", *LIVE).assert_outcomes(passed=3, failed=3)
    before = answers(bench, MULTI)
    bench_env.set_responder(by_model({"model-multi": lambda r: "MULTI plan, second try", JUDGE: judge}))
    pytester.runpytest("--benchmark=agentsleague", f"benchmarks/agentsleague/{FILE}::prep-workflow-multi-002",
                       "--evalbench-cache=off", *LIVE).assert_outcomes(passed=1)
    after = answers(bench, MULTI)
    assert [a["case_id"] for a in after] == [b["case_id"] for b in before]
    assert after[1]["model_answer"] == "MULTI plan, second try"
    assert after[0] == before[0] and after[2] == before[2]


def test_bad_or_stale_stored_answers_are_errors_naming_the_line(pytester: pytest.Pytester,
                                                                 bench_env: FakeLLMServer) -> None:
    pytester.makeconftest(APP)
    bench = write_bench(pytester.path)
    bench_env.set_responder(by_model({"model-multi": multi, JUDGE: judge}))
    pytester.runpytest("--benchmark=agentsleague", *LIVE).assert_outcomes(passed=3, failed=3)
    without_targets(pytester, bench)
    path = bench / "answers" / f"{MULTI}.jsonl"
    lines = path.read_text().splitlines()

    path.write_text("\n".join([lines[0], json.dumps(dict(json.loads(lines[1]), case_id="../escape")), lines[2]]))
    result = pytester.runpytest("--benchmark=agentsleague")
    result.stdout.fnmatch_lines([f"*answers/{MULTI}.jsonl:2*case_id*"])
    result.stdout.no_fnmatch_line("*Traceback*")
    assert result.ret == pytest.ExitCode.INTERRUPTED

    dataset = (bench / FILE).read_text().replace("AZ-104 identity", "AZ-104 identities")
    (bench / FILE).write_text(dataset)
    path.write_text("\n".join(lines) + "\n")
    result = pytester.runpytest("--benchmark=agentsleague")
    result.stdout.fnmatch_lines([f"*answers/{MULTI}.jsonl:1*question*answers another question*"])
    assert result.ret == pytest.ExitCode.INTERRUPTED


def test_sharded_live_answers_merge_into_the_same_answers_files(pytester: pytest.Pytester,
                                                                 bench_env: FakeLLMServer) -> None:
    """Shards keep their live answers in their records; `evalbench merge` writes the answers files
    one unsharded run writes, byte for byte."""
    from pytest_evalbench.__main__ import main

    pytester.makeconftest(APP)
    bench = write_bench(pytester.path)
    bench_env.set_responder(by_model({"model-multi": multi, JUDGE: judge}))
    pytester.runpytest("--benchmark=agentsleague", *LIVE).assert_outcomes(passed=3, failed=3)
    whole = {agent: (bench / "answers" / f"{agent}.jsonl").read_bytes() for agent in (MULTI, SINGLE)}
    shutil.rmtree(bench / "answers")
    shards = []
    for k in (1, 2):
        pytester.runpytest("--benchmark=agentsleague", f"--evalbench-shard={k}/2", *LIVE)
        shards.append(bench / "shards" / f"{k}-of-2")
    assert not (bench / "answers").exists()  # a shard keeps its answers in its own directory
    assert main(["merge", "agentsleague", *map(str, shards), "--root", str(pytester.path)]) == 0
    assert {agent: (bench / "answers" / f"{agent}.jsonl").read_bytes() for agent in (MULTI, SINGLE)} == whole
