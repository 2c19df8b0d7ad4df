"""`--evalbench-max-cost` is kept: each call reserves its worst-case price before it is sent, at
-n 0 and under xdist (one shared ledger), and a budget stop is exit 7 with its reason recorded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import JUDGE, read_json, scenario, script, write_benchmark

from pytest_evalbench.formats.spec import DEFAULT_MAX_TOKENS
from pytest_evalbench.gate.decision import EXIT_INCOMPLETE
from pytest_evalbench.llm.limits import DEFAULT_OUTPUT_CAP
from pytest_evalbench.testing import FakeLLMServer, Reply

pytestmark = pytest.mark.usefixtures("quick_backoff")  # in-process runs retry after short backoffs

OUTPUT_PRICE = 1000.0
"""$ per million output tokens: one conversation call at its max_tokens (2048) costs $2.048."""
PRICED = {"pricing": {name: {"input_per_million": 0.0, "output_per_million": OUTPUT_PRICE}
                      for name in ("sim-user", "sim-target", "sim-judge")}}
LIMIT = 10.0
COMPARATIVE = Path(__file__).parents[1] / "data" / "agentsleague" / "preparation-workflow.comparative.explain.jsonl"
WORST_CALL = max(DEFAULT_MAX_TOKENS.values()) * OUTPUT_PRICE / 1e6


def expensive(request: dict[str, Any]) -> Reply:
    """The scripted answer, reporting the largest usage the request allows (its whole max_tokens),
    slowly enough that many calls are in flight together."""
    answer = script(True)(request)
    content = answer if isinstance(answer, str) else json.dumps(answer)
    return Reply(content=content, prompt_tokens=10_000,
                 completion_tokens=int(request.get("max_tokens") or DEFAULT_OUTPUT_CAP), delay=0.05)


@pytest.mark.parametrize("workers", ["0", "2"])
def test_budget_is_kept_with_calls_in_flight(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                              workers: str) -> None:
    rows = [scenario(f"m01_s{i:03d}_v01", "m01") for i in range(1, 13)]
    bench = write_benchmark(pytester.path, scenarios=rows, spec=PRICED)
    bench_env.set_responder(expensive)
    result = pytester.runpytest("--benchmark=demo", f"--evalbench-max-cost={LIMIT}", "-n", workers,
                                "--evalbench-concurrency=16", "--evalbench-cache=off")
    assert result.ret == EXIT_INCOMPLETE
    status = read_json(bench / "last_run.json")
    spent = status["llm"]["spent"]
    # every call reported its worst case, so the reservations alone keep the total within the limit;
    # and the budget is used up to less than one call's worst case before it stops
    assert LIMIT - WORST_CALL <= spent <= LIMIT, spent
    assert len(bench_env.requests) == status["llm"]["requests"]
    assert status["status"] == "incomplete"
    assert any("budget exhausted" in reason for reason in status["incomplete"]), status["incomplete"]
    assert "budget exhausted" in status["errors"].values()
    result.stdout.fnmatch_lines(["*budget exhausted*--evalbench-max-cost=$10.0000*"])


def test_unpriced_models_are_not_limited_and_named(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")])
    bench_env.set_responder(expensive)
    result = pytester.runpytest("--benchmark=demo", "--evalbench-max-cost=0.000001", "--evalbench-cache=off")
    result.assert_outcomes(passed=1)
    assert read_json(bench / "last_run.json")["llm"]["unpriced"] == ["sim-judge", "sim-target", "sim-user"]
    result.stdout.fnmatch_lines(["*no price for sim-judge, sim-target, sim-user*--evalbench-max-cost*"])


def dataset_answer(request: dict[str, Any]) -> Reply:
    """Targets answer, the judge scores 5; every answer reports its whole max_tokens."""
    content = json.dumps({"explanation": "ok", "score": 5}) if request["model"] == JUDGE else "a plan"
    return Reply(content=content, completion_tokens=int(request.get("max_tokens") or DEFAULT_OUTPUT_CAP), delay=0.05)


@pytest.mark.parametrize("workers", ["0", "2"])
def test_budget_is_kept_on_a_dataset_benchmark(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                               workers: str) -> None:
    bench = pytester.path / "benchmarks" / "agentsleague"
    bench.mkdir(parents=True)
    shutil.copy(COMPARATIVE, bench / COMPARATIVE.name)
    models = {JUDGE: JUDGE, "multi": "model-multi", "single": "model-single"}
    (bench / "benchmark.yaml").write_text(yaml.safe_dump({
        "name": "agentsleague", "kind": "dataset", "dataset": {"files": [COMPARATIVE.name]},
        "evaluator_model": {"model": JUDGE},
        "pricing": {m: {"input_per_million": 0.0, "output_per_million": OUTPUT_PRICE} for m in models.values()}}))
    bench_env.set_responder(dataset_answer)
    result = pytester.runpytest("--benchmark=agentsleague", f"--evalbench-max-cost={LIMIT}", "-n", workers,
                                "--evalbench-cache=off",
                                "--evalbench-target=preparation-workflow-multi-agent=model-multi",
                                "--evalbench-target=preparation-workflow-single-agent=model-single")
    assert result.ret == EXIT_INCOMPLETE
    status = read_json(bench / "last_run.json")
    assert LIMIT - WORST_CALL <= status["llm"]["spent"] <= LIMIT, status["llm"]
    assert "budget exhausted" in status["errors"].values()
