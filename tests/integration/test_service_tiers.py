"""A run whose judge asks for the flex tier against an endpoint with a prompt cache: the judge's
requests say `service_tier: flex` and are priced at the flex rate, refusals at peak are asked again
(never an error or a failed row), and the prompt tokens the provider's cache served are priced at the
cache-read rate, recorded in cost.json and named in the summary with what they saved."""

from __future__ import annotations

import pytest
from helpers import JUDGE, TARGET, USER, read_json, script, write_benchmark

from pytest_evalbench.testing import FakeLLMServer
from pytest_evalbench.testing.tiers import PromptCache

INPUT, CACHED, OUTPUT = 1.0, 0.25, 2.0


def test_a_flex_judge_is_priced_at_flex_and_cache_reads_at_the_cache_rate(pytester: pytest.Pytester,
                                                                          bench_env: FakeLLMServer) -> None:
    prices = {"input_per_million": INPUT, "output_per_million": OUTPUT, "cached_input_per_million": CACHED,
              "flex": 0.5}
    bench = write_benchmark(pytester.path, spec={
        "pricing": dict.fromkeys((USER, TARGET, JUDGE), prices),
        "evaluator_model": {"model": JUDGE, "params": {"service_tier": "flex"}}})
    bench_env.set_responder(script(True))
    bench_env.prompt_cache = PromptCache()
    bench_env.flex.remaining = 2
    result = pytester.runpytest("--benchmark=demo", "--evalbench-cache=off", "-p", "no:randomly")
    assert result.ret in (0, 1), result.stdout.str()[-2000:]
    judged = [r for r in bench_env.requests if r["model"] == JUDGE]
    assert judged and all(r["service_tier"] == "flex" for r in judged)
    assert not any("service_tier" in r for r in bench_env.requests if r["model"] != JUDGE)
    assert bench_env.flex.refused == 2
    status = read_json(bench / "last_run.json")
    assert status["llm"]["rate_limited"] == 2 and status["errors"] == {}
    cost = read_json(bench / "runs" / "tgt" / "cost.json")

    def price(phase: dict[str, float], share: float) -> float:
        plain = phase["input_tokens"] - phase["cached_tokens"]
        return (plain * INPUT + phase["cached_tokens"] * CACHED + phase["output_tokens"] * OUTPUT) / 1e6 * share

    evaluate, simulate = cost["evaluate"], cost["simulate"]
    assert simulate["cached_tokens"] > 0  # a conversation's next request extends its last one
    assert evaluate["cost"] == pytest.approx(price(evaluate, 0.5), abs=2e-6)
    assert simulate["cost"] == pytest.approx(price(simulate, 1.0), abs=2e-6)
    saved = (evaluate["cached_tokens"] * 0.5 + simulate["cached_tokens"]) * (INPUT - CACHED) / 1e6
    assert evaluate["saved"] + simulate["saved"] == pytest.approx(saved, abs=2e-6)
    cached = evaluate["cached_tokens"] + simulate["cached_tokens"]
    result.stdout.fnmatch_lines([f"*{cached:,} input tokens read from the provider's prompt cache, saving $*"])
