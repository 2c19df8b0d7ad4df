"""Service tiers and the provider's prompt cache (llm/costs.py, the engine's pricing, the fake server):
a flex role's calls are sent with `service_tier: flex`, priced at the flex rate and asked again when the
provider refuses flex at peak; batch and flex prices come from genai-prices where it has them and from
`pricing:` otherwise; prompt tokens read from the provider's cache are priced at its cache-read rate
and the money they saved is counted."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from pytest_evalbench.llm.cache import ResponseCache
from pytest_evalbench.llm.costs import PriceTable, Rates, Tokens, cache_tokens, call_tier, update_cost_file
from pytest_evalbench.llm.engine import Engine, EngineSettings
from pytest_evalbench.llm.transport import parse_completion
from pytest_evalbench.llm.types import Completion, Endpoint, Usage
from pytest_evalbench.testing import FakeLLMServer
from pytest_evalbench.testing.tiers import PromptCache

RATES = Rates(input=2.0, output=8.0, cached_input=0.5, cache_write=2.5, batch=0.5, flex=0.5)


def test_pricing_rates_price_each_tier_and_the_cache_parts() -> None:
    million = 1_000_000
    assert RATES(Tokens(million, million), "standard") == pytest.approx(10.0)
    assert RATES(Tokens(million, million), "batch") == pytest.approx(5.0)
    assert RATES(Tokens(million, million), "flex") == pytest.approx(5.0)
    # 600k plain + 300k read + 100k written: 1.2 + 0.15 + 0.25 (+ no output)
    assert RATES(Tokens(million, 0, 300_000, 100_000), "standard") == pytest.approx(1.6)
    # without cache prices, cached tokens cost the input price (no saving is invented)
    assert Rates(2.0, 8.0)(Tokens(million, 0, million), "standard") == pytest.approx(2.0)


def test_cached_parts_are_bounded_by_the_prompt() -> None:
    tokens = Tokens(100, 5, cached=500, cache_write=-3)
    assert (tokens.cached, tokens.cache_write) == (100, 0)
    assert Tokens(100, 0, cached=70, cache_write=70).cache_write == 30


def test_genai_prices_tiers_where_it_has_them_else_half() -> None:
    pytest.importorskip("genai_prices")
    prices = PriceTable()
    standard = prices.cost("gpt-5-mini", 1_000_000, 1_000_000)
    assert standard > 0
    # genai-prices lists gpt-5-mini's flex and batch prices: half, as OpenAI sells them
    assert prices.cost("gpt-5-mini", 1_000_000, 1_000_000, tier="flex") == pytest.approx(standard / 2)
    assert prices.cost("gpt-5-mini", 1_000_000, 1_000_000, tier="batch") == pytest.approx(standard / 2)
    # a model without a flex variant in genai-prices: the standard price halved
    plain = prices.cost("gpt-4o-mini", 1_000_000, 0)
    assert prices.cost("gpt-4o-mini", 1_000_000, 0, tier="flex") == pytest.approx(plain / 2)
    # cache reads at genai-prices' cache-read price, and the saving counted
    cached = prices.cost("gpt-4o-mini", 1_000_000, 0, cached_tokens=1_000_000)
    assert cached < plain
    assert prices.saved("gpt-4o-mini", 1_000_000, 1_000_000) == pytest.approx(plain - cached)


def test_pricing_overrides_genai_prices_and_an_unknown_model_is_named() -> None:
    prices = PriceTable({"gpt-4o-mini": RATES})
    assert prices.cost("gpt-4o-mini", 1_000_000, 0, tier="batch") == pytest.approx(1.0)
    assert prices.cost("no-such-model-xyz", 10, 10, tier="flex") == 0.0
    assert prices.unpriced == {"no-such-model-xyz"}
    assert prices.saved("no-such-model-xyz", 10, 10) == 0.0


def test_call_tier() -> None:
    assert call_tier(Endpoint("m", None)) == "standard"
    assert call_tier(Endpoint("m", None, params={"service_tier": "flex"})) == "flex"
    assert call_tier(Endpoint("m", None, params={"service_tier": "flex"}), batched=True) == "batch"


@pytest.mark.parametrize(("usage", "expected"), [
    ({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 6}}, (6, 0)),
    ({"prompt_tokens": 10, "cache_read_input_tokens": 4, "cache_creation_input_tokens": 5}, (4, 5)),
    ({"prompt_tokens_details": {"cached_tokens": 3, "cache_write_tokens": 2}}, (3, 2)),
    ({"prompt_tokens_details": {"cached_tokens": -1}, "cache_read_input_tokens": 1e300}, (0, 0)),
    ({"prompt_tokens_details": {"cached_tokens": True}}, (0, 0)),
    ({"prompt_tokens_details": "many"}, (0, 0)),
])
def test_cache_fields_of_an_answer_are_read_bounded(usage: dict[str, Any], expected: tuple[int, int]) -> None:
    assert cache_tokens(usage) == expected


def test_cached_tokens_survive_the_response_cache_and_old_entries_read_as_before() -> None:
    body = {"choices": [{"message": {"content": "hi"}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 8}}}
    completion = parse_completion(body)
    assert completion.cached_tokens == 8
    assert Completion.from_json(completion.to_json(), cached=True).cached_tokens == 8
    plain = Completion(content="hi", input_tokens=1)
    assert "cached_tokens" not in plain.to_json()  # entries without a cache read keep their bytes
    assert Completion.from_json({"content": "x", "cached_tokens": -5}, cached=True).cached_tokens == 0


def test_usage_files_and_cost_json_carry_cached_tokens_and_savings(tmp_path: Path) -> None:
    usage = Usage(100, 10, 0.5, cached_tokens=80, saved=0.25)
    assert Usage.from_json(usage.to_json()) == usage
    assert Usage.from_json({"input_tokens": 5, "cached_tokens": 50, "saved": math.inf}) == Usage(5, 0, 0.0, 5, 0.0)
    assert "cached_tokens" not in Usage(1, 1, 0.1).to_json()
    update_cost_file(tmp_path / "cost.json", {"judge": usage})
    phase = json.loads((tmp_path / "cost.json").read_text())["judge"]
    assert (phase["cached_tokens"], phase["saved"]) == (80, 0.25)


def engine_for(tmp_path: Path, rates: Rates = RATES, **settings: Any) -> Engine:
    return Engine(EngineSettings(**{"backoff_base": 0.01, "backoff_cap": 0.05, **settings}),
                  ResponseCache(tmp_path, "off"), PriceTable({"m": rates}))


def ask(engine: Engine, endpoint: Endpoint, content: str = "q", system: str = "rules " * 50) -> Completion:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": content}]
    return engine.run(engine.complete(endpoint, messages, role="judge", phase="judge", sample=0))


def test_a_flex_role_is_sent_flex_priced_flex_and_asked_again_when_refused(tmp_path: Path) -> None:
    with FakeLLMServer(lambda request: "ok") as server:
        server.flex.remaining = 3
        engine = engine_for(tmp_path)
        endpoint = Endpoint("m", server.base_url, api_key="k", params={"service_tier": "flex"})
        try:
            completion = ask(engine, endpoint)
        finally:
            engine.close()
        assert completion.content == "ok"
        assert server.flex.refused == 3 and len(server.requests) == 1
        assert server.requests[0]["service_tier"] == "flex"
    # the refusals were paced 429s: asked again, never a failure or a retry
    assert (engine.stats.rate_limited, engine.stats.retries, sum(engine.stats.failures.values())) == (3, 0, 0)
    usage = engine.stats.usage["judge:judge"]
    standard = RATES(Tokens(completion.input_tokens, completion.output_tokens), "standard")
    assert usage.cost == pytest.approx(standard / 2) and engine.stats.spent == pytest.approx(standard / 2)


def test_flex_refused_past_the_retry_budget_is_an_error_not_an_answer(tmp_path: Path) -> None:
    from pytest_evalbench.base.errors import LLMError

    with FakeLLMServer(lambda request: "ok") as server:
        server.flex.remaining = 10_000
        engine = engine_for(tmp_path, max_retry_seconds=0.3)
        endpoint = Endpoint("m", server.base_url, api_key="k", params={"service_tier": "flex"})
        try:
            with pytest.raises(LLMError, match="still rate limited"):
                ask(engine, endpoint)
        finally:
            engine.close()
        assert server.requests == []


def test_prompt_cache_reads_are_priced_at_the_cache_rate_and_the_saving_counted(tmp_path: Path) -> None:
    with FakeLLMServer(lambda request: "ok") as server:
        server.prompt_cache = PromptCache()
        engine = engine_for(tmp_path)
        endpoint = Endpoint("m", server.base_url, api_key="k")
        try:
            first, second = ask(engine, endpoint, "one"), ask(engine, endpoint, "two")
        finally:
            engine.close()
    assert first.cached_tokens == 0 and 0 < second.cached_tokens < second.input_tokens
    usage = engine.stats.usage["judge:judge"]
    assert usage.cached_tokens == second.cached_tokens
    assert usage.saved == pytest.approx(second.cached_tokens * (2.0 - 0.5) / 1_000_000)
    full = RATES(Tokens(first.input_tokens + second.input_tokens, first.output_tokens + second.output_tokens),
                 "standard")
    assert usage.cost == pytest.approx(full - usage.saved)


def test_the_fake_servers_anthropic_cache_reports_writes_up_to_the_marker_then_reads() -> None:
    cache = PromptCache(anthropic=True)
    system = {"role": "system", "content": [{"type": "text", "text": "rules " * 40,
                                              "cache_control": {"type": "ephemeral"}}]}
    first = cache.usage({"model": "m", "messages": [system, {"role": "user", "content": "a"}]})
    second = cache.usage({"model": "m", "messages": [system, {"role": "user", "content": "b"}]})
    assert first["cache_read_input_tokens"] == 0 and first["cache_creation_input_tokens"] > 0
    assert second == {"cache_read_input_tokens": first["cache_creation_input_tokens"],
                      "cache_creation_input_tokens": 0}
