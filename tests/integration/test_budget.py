"""`--evalbench-max-cost` is kept: each call reserves its worst-case price before it is sent, at
-n 0 and under xdist (one shared ledger), and a budget stop is exit 7 with its reason recorded."""

from __future__ import annotations

import json
from typing import Any

import pytest
from helpers import read_json, scenario, script, write_benchmark

from pytest_evalbench.gate.outcome import EXIT_INCOMPLETE
from pytest_evalbench.llm.budget import DEFAULT_OUTPUT_CAP
from pytest_evalbench.spec import DEFAULT_MAX_TOKENS
from pytest_evalbench.testing import FakeLLMServer, Reply

OUTPUT_PRICE = 1000.0
"""$ per million output tokens: one conversation call at its max_tokens (2048) costs $2.048."""
PRICED = {"pricing": {name: {"input_per_million": 0.0, "output_per_million": OUTPUT_PRICE}
                      for name in ("sim-user", "sim-target", "sim-judge")}}
LIMIT = 10.0
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
