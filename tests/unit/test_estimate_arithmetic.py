"""The estimate's arithmetic: what the cache teaches (read only), prices, unpriced models, time bounds."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_evalbench.kinds.estimate import (
    Expectations,
    Plan,
    PlannedCall,
    estimate,
    message_tokens,
    render,
    wall_time,
)
from pytest_evalbench.llm.cache import ResponseCache, cache_key
from pytest_evalbench.llm.costs import PriceTable
from pytest_evalbench.llm.types import Endpoint, EngineSettings

JUDGE = Endpoint(model="gpt-4o-mini", base_url="http://127.0.0.1:9/v1", params={"max_tokens": 1000})


def record(cache: ResponseCache, system: str, out: int, given: int, text: str = "answer") -> None:
    request = {"endpoint": "x", "body": {"model": JUDGE.model, "messages": [{"role": "system", "content": system}]},
               "sample": out, "attempt": 0}
    key = cache_key(request)
    cache.put(key, request, {"content": text, "input_tokens": given, "output_tokens": out})


def test_output_and_input_sizes_come_from_the_cache_and_nothing_is_written(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "cache")
    messages = [{"role": "system", "content": "You are the judge."}]
    for out in (10, 30):
        record(cache, "You are the judge.", out, given=2 * message_tokens(messages))
    (tmp_path / "cache" / "ab").mkdir()
    (tmp_path / "cache" / "ab" / "broken.json").write_text("{not json")  # a corrupt entry teaches nothing
    before = sorted(p.name for p in (tmp_path / "cache").rglob("*"))
    expect = Expectations(tmp_path / "cache")
    assert expect.entries == 2
    assert expect.output(JUDGE, messages).tokens == 20 and expect.output(JUDGE, messages).source == "cache"
    assert expect.input(JUDGE, messages) == (2 * message_tokens(messages), True)  # the recorded ratio: 2
    other = [{"role": "system", "content": "Another role entirely"}]
    assert expect.output(JUDGE, other).tokens == 20  # the model's free-text answers
    assert expect.output(JUDGE, other, structured=True).source == "max_tokens"  # none of that form recorded
    small = Endpoint(model=JUDGE.model, base_url=None, params={"max_tokens": 5})
    assert expect.output(small, messages).tokens == 5  # never above max_tokens
    assert sorted(p.name for p in (tmp_path / "cache").rglob("*")) == before


def plan(endpoint: Endpoint, calls: int, tokens_in: int, tokens_out: int, *, possible: bool = False) -> Plan:
    output = Expectations(None).output(Endpoint(model="-", base_url=None, params={"max_tokens": tokens_out}), [])
    return Plan([PlannedCall("judge", endpoint, tokens_in, output, possible=possible)] * calls, chain=calls)


def test_prices_unpriced_models_and_upper_bounds_are_said() -> None:
    priced = estimate([plan(JUDGE, 4, 250_000, 125_000)])
    lines = render(priced, PriceTable(), EngineSettings(), 0)
    assert "estimate, not measured" in lines[0]
    assert "~$0.4500" in "\n".join(lines)  # 1M in x $0.15 + 0.5M out x $0.60 per million
    unknown = Endpoint(model="my-model", base_url=None)
    text = "\n".join(render(estimate([plan(unknown, 2, 100, 10, possible=True)]), PriceTable(), EngineSettings(), 0))
    assert "no price" in text and "$0.0000" not in text
    assert "unknown: models without a price: my-model (not counted as $0" in text
    assert "an upper bound: 2 judge calls happen only if no deterministic check decides" in text
    both = render(estimate([plan(JUDGE, 1, 10, 10), plan(unknown, 1, 10, 10)]), PriceTable(), EngineSettings(), 0)
    assert "for the priced models, plus models without a price: my-model" in "\n".join(both)


def test_time_is_bound_by_concurrency_chain_or_the_configured_limits() -> None:
    est = estimate([plan(JUDGE, 6, 100, 50)] * 10)  # 60 calls of 0.5 s + 50/50 s = 1.5 s each
    seconds, bound = wall_time(est, EngineSettings(concurrency=4))
    assert (seconds, bound) == (60 * 1.5 / 4, "concurrency 4")
    seconds, bound = wall_time(est, EngineSettings(concurrency=64))
    assert (seconds, bound) == (6 * 1.5, "the longest item's chain of calls")
    seconds, bound = wall_time(est, EngineSettings(concurrency=64, rate_limit=30))
    assert (seconds, bound) == (120.0, "rate limit 30 requests/min")
    seconds, bound = wall_time(est, EngineSettings(concurrency=64, rate_limit=30, token_limit=1000))
    assert (seconds, bound) == (60 * 150 * 60 / 1000, "token limit 1000 tokens/min")


def test_a_cached_request_costs_nothing(tmp_path: Path) -> None:
    cached = PlannedCall("judge", JUDGE, 100, Expectations(None).output(JUDGE, []), cached=True)
    est = estimate([Plan([cached], chain=1)])
    text = "\n".join(render(est, PriceTable(), EngineSettings(), 1))
    assert "1 of them replayed from the cache (no request, no cost)" in text and "$0 (all cached)" in text
    assert json.dumps(wall_time(est, EngineSettings())[0]) == "0.0"


def test_prices_come_from_genai_prices_offline_and_pricing_wins(monkeypatch) -> None:
    """The list prices are read from the data genai-prices ships: no socket is opened."""
    import socket

    def no_network(*args, **kwargs):
        raise AssertionError("a price lookup tried the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    table = PriceTable()
    assert table.known("o3-mini") and table.known("claude-3-5-haiku-latest")
    assert table.cost("o3-mini", 1_000_000, 0) > 0 and table.cost("claude-3-5-haiku-latest", 0, 1_000_000) > 0
    assert table.cost("gpt-4o-mini", 1_000_000, 1_000_000) == 0.75  # $0.15 + $0.60 per million
    assert not table.unpriced
    assert table.cost("sim-judge", 10, 10) == 0.0 and table.unpriced == {"sim-judge"}
    assert table.cost("o3-mini", 10, 10, local=True) == 0.0
    own = PriceTable({"o3-mini": (1.0, 2.0)})
    assert own.cost("o3-mini", 1_000_000, 1_000_000) == 3.0  # benchmark.yaml's `pricing:` wins


def test_the_judge_is_priced_at_the_batch_rate_when_batched_and_a_flex_role_at_flex() -> None:
    from pytest_evalbench.llm.costs import Rates

    prices = PriceTable({"m": Rates(1.0, 4.0)})
    judge = Endpoint(model="m", base_url=None)
    target = Endpoint(model="m", base_url=None, params={"service_tier": "flex"})
    output = Expectations(None).output(Endpoint(model="-", base_url=None, params={"max_tokens": 250_000}), [])
    calls = [PlannedCall("judge", judge, 1_000_000, output), PlannedCall("target t1", target, 1_000_000, output),
             PlannedCall("simulated user", judge, 1_000_000, output)]
    lines = render(estimate([Plan(calls, chain=3)]), prices, EngineSettings(), 0, batched=frozenset({"judge"}))
    rows = {line.split()[0]: line for line in lines[2:5]}
    assert rows["judge"].endswith("~$1.0000 (batch)")  # (1M x $1 + 0.25M x $4) / 2
    assert rows["target"].endswith("~$1.0000 (flex)")
    assert rows["simulated"].endswith("~$2.0000")  # standard
    assert "total: ~3750000 tokens, ~$4.0000" in "\n".join(lines)
    unbatched = render(estimate([Plan(calls, chain=3)]), prices, EngineSettings(), 0)
    assert "total: ~3750000 tokens, ~$5.0000" in "\n".join(unbatched)
