"""Adaptive concurrency per endpoint, rate headers and the tokens-per-minute limit."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from helpers import dead_base_url

from pytest_evalbench.base.errors import LLMError
from pytest_evalbench.llm.cache import ResponseCache
from pytest_evalbench.llm.costs import PriceTable
from pytest_evalbench.llm.engine import Engine, EngineSettings
from pytest_evalbench.llm.limits import AdaptiveConcurrency, TokenRate
from pytest_evalbench.llm.types import Endpoint
from pytest_evalbench.testing import FakeLLMServer, Reply


def test_aimd_cuts_once_per_round_and_grows_back_slowly() -> None:
    async def run() -> None:
        gate = AdaptiveConcurrency(8)
        rounds = [await gate.acquire() for _ in range(8)]
        for started in rounds[:4]:
            gate.release(started, limited=True)  # four 429s from one round: one cut
        assert (gate.limit, gate.round) == (4.0, 1)
        for started in rounds[4:]:
            gate.release(started, limited=False)
        assert 4.9 < gate.limit < 5.1  # +1/limit per success: about one per round of successes
        later = await gate.acquire()
        gate.release(later, limited=True)
        assert gate.round == 2 and gate.limit < 2.6

    asyncio.run(run())


def test_waiters_wait_for_the_adapted_limit() -> None:
    async def run() -> list[int]:
        gate = AdaptiveConcurrency(4)
        first = await gate.acquire()
        gate.release(first, limited=True)  # limit 2
        peak, active = 0, 0

        async def one() -> None:
            nonlocal peak, active
            started = await gate.acquire()
            active += 1
            peak = max(peak, active)
            await asyncio.sleep(0.01)
            active -= 1
            gate.release(started, limited=False)

        await asyncio.gather(*(one() for _ in range(10)))
        return [peak, gate.in_flight]

    peak, in_flight = asyncio.run(run())
    assert peak <= 4 and in_flight == 0


def test_token_rate_spaces_requests_by_their_tokens() -> None:
    async def run() -> float:
        rate = TokenRate(60_000)  # 1000 tokens a second, one second of burst
        started = time.monotonic()
        for _ in range(10):  # as admission does: reserve the tokens, sleep the delay returned
            delay = rate.delay(200)
            if delay > 0:
                await asyncio.sleep(delay)
        return time.monotonic() - started

    elapsed = asyncio.run(run())
    assert 0.7 < elapsed < 2.0  # 2000 tokens: the last starts at 1.8 s minus the burst


def _engine(tmp_path: Path, **settings: object) -> Engine:
    return Engine(EngineSettings(backoff_base=0.05, backoff_cap=0.5, **settings),  # type: ignore[arg-type]
                  ResponseCache(tmp_path, "off"), PriceTable())


def _calls(engine: Engine, endpoint: Endpoint, count: int, size: int = 0) -> list[str | None]:
    async def many() -> list[str | None]:
        calls = [engine.complete(endpoint, [{"role": "user", "content": f"q{i}".ljust(size)}], role="target",
                                 phase="simulate", sample=0) for i in range(count)]
        return [c.content for c in await asyncio.gather(*calls)]

    return engine.run(many())


@pytest.mark.parametrize("with_headers", [False, True])
def test_concurrency_adapts_to_a_server_limit(tmp_path: Path, with_headers: bool) -> None:
    with FakeLLMServer(lambda r: "ok", latency=0.1) as server:
        server.max_in_flight = 4
        if with_headers:
            server.limit_headers = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "50ms"}
        engine = _engine(tmp_path, concurrency=16, max_attempts=8)
        endpoint = Endpoint(model="m", base_url=server.base_url, api_key="k")
        try:
            assert _calls(engine, endpoint, 48) == ["ok"] * 48
        finally:
            engine.close()
        gate = engine.limits.adaptive[endpoint.identity]
        assert gate.round >= 1 and gate.limit < 16
        # a fixed 16 in flight against 4 allowed would be refused 12 of 16 every round
        assert server.rejected <= 24 and len(server.requests) == 48


def test_rate_headers_on_success_hold_the_endpoint(tmp_path: Path) -> None:
    arrivals: list[float] = []

    def respond(request: dict) -> Reply:
        arrivals.append(time.monotonic())
        return Reply(content="ok", headers={"x-ratelimit-remaining-requests": "0",
                                            "x-ratelimit-reset-requests": "400ms"})

    with FakeLLMServer(respond) as server:
        engine = _engine(tmp_path)
        endpoint = Endpoint(model="m", base_url=server.base_url, api_key="k")
        try:
            _calls(engine, endpoint, 1)
            _calls(engine, endpoint, 1)
        finally:
            engine.close()
    assert arrivals[1] - arrivals[0] >= 0.35


def test_token_limit_through_the_engine(tmp_path: Path) -> None:
    with FakeLLMServer(lambda r: Reply(content="ok", prompt_tokens=200, completion_tokens=0)) as server:
        engine = _engine(tmp_path, token_limit=12_000)  # 200 tokens a second
        endpoint = Endpoint(model="m", base_url=server.base_url, api_key="k")
        started = time.monotonic()
        try:
            _calls(engine, endpoint, 4, size=800)  # estimated at 200 tokens each, as answered
        finally:
            engine.close()
    # 4 x 200 tokens at 200/s: the last may start at 3 s minus one second of burst
    assert time.monotonic() - started >= 1.5


def test_a_throttled_endpoint_still_serves_early_items_first() -> None:
    async def run() -> list[int]:
        gate = AdaptiveConcurrency(1)
        first = await gate.acquire()
        order: list[int] = []

        async def one(priority: int) -> None:
            started = await gate.acquire(priority)
            order.append(priority)
            gate.release(started, limited=False)

        tasks = [asyncio.create_task(one(p)) for p in (5, 1, 3)]
        await asyncio.sleep(0)
        cancelled = asyncio.create_task(one(0))
        await asyncio.sleep(0)
        cancelled.cancel()
        gate.release(first, limited=False)
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(run()) == [1, 3, 5]


def test_open_circuit_reports_the_refusal_that_opened_it(tmp_path: Path) -> None:
    """After two refused connections the breaker (llm/breaker.py) fails calls without dialling; those
    calls must read exactly like the refused ones, so a dead endpoint is one error in the summary."""
    engine = _engine(tmp_path, concurrency=1, max_attempts=1)
    endpoint = Endpoint(model="m", base_url=dead_base_url(), api_key="k")

    async def one() -> str:
        try:
            await engine.complete(endpoint, [{"role": "user", "content": "q"}], role="target",
                                  phase="simulate", sample=0)
        except LLMError as error:
            return str(error)
        return "answered"

    async def sequential() -> list[str]:
        return [await one() for _ in range(5)]

    try:
        errors = engine.run(sequential())
    finally:
        engine.close()
    assert engine.stats.failures["connection error"] == 2  # the last three never dialled
    assert len(set(errors)) == 1 and "cannot reach http://127.0.0.1:" in errors[0]


def test_the_embedded_server_gets_one_request_at_a_time(tmp_path: Path) -> None:
    """llama.cpp's server answers one request at a time: more in flight would only queue inside it,
    against each request's timeout. A remote endpoint keeps the configured concurrency."""
    from pytest_evalbench.llm.limits import Limits
    from pytest_evalbench.llm.types import EngineStats

    async def peak(endpoint: Endpoint) -> int:
        limits = Limits(EngineSettings(concurrency=8), EngineStats(), PriceTable({}), tmp_path / ".rate-limit")
        limits.open_slots()
        seen = [0]

        async def one() -> None:
            async with limits.admission(endpoint):
                seen[0] = max(seen[0], limits.in_flight)
                await asyncio.sleep(0.01)

        await asyncio.gather(*(one() for _ in range(6)))
        return seen[0]

    assert asyncio.run(peak(Endpoint(model="qwen2.5-coder-1.5b", base_url=None, provider="local"))) == 1
    assert asyncio.run(peak(Endpoint(model="m", base_url="http://127.0.0.1:9/v1"))) == 6
