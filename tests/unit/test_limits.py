"""The limits on requests (llm/limits.py): adaptive concurrency per endpoint, the tokens-per-minute
limit, the priority semaphore, rate-limit slots spaced across processes, and the budget ledger
(reservations, waiting for calls in flight, the stop, one ledger for processes)."""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import time
from pathlib import Path

import pytest
from helpers import dead_base_url
from spawned import race_for_slots, reserve_many, reserve_rate_slots

from pytest_evalbench.base.errors import LLMError
from pytest_evalbench.llm.cache import ResponseCache
from pytest_evalbench.llm.costs import PriceTable
from pytest_evalbench.llm.engine import Engine, EngineSettings
from pytest_evalbench.llm.limits import (
    DEFAULT_OUTPUT_CAP,
    AdaptiveConcurrency,
    Budget,
    FileLedger,
    LocalLedger,
    PrioritySemaphore,
    TokenRate,
    worst_case_tokens,
)
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


def test_priority_semaphore_serves_lowest_priority_first() -> None:
    order: list[int] = []

    async def main() -> None:
        sem = PrioritySemaphore(1)
        await sem.acquire(0)

        async def worker(priority: int) -> None:
            await sem.acquire(priority)
            order.append(priority)
            sem.release()

        tasks = [asyncio.create_task(worker(p)) for p in (5, 3, 9, 1)]
        await asyncio.sleep(0.01)
        sem.release()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert order == [1, 3, 5, 9]


def test_rate_limit_slots_are_spaced_across_processes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = pool.starmap(reserve_rate_slots, [(str(tmp_path / "rl"), 5), (str(tmp_path / "rl"), 5)])
    slots = sorted(s for r in results for s in r)
    gaps = [b - a for a, b in itertools.pairwise(slots)]
    assert len(slots) == 10 and min(gaps) >= 0.1 - 1e-6


def test_racing_reservations_never_share_a_slot(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Processes and threads reserving at the same moment: each read-change-write of the state file is
    exclusive, so no two reservations read the same next slot (without the lock, they do). The limit
    of one per second keeps every slot in the future: a lost update is a repeated slot."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    ready, out = context.Barrier(3), context.Queue()
    racers = [context.Process(target=race_for_slots, args=(str(tmp_path / "rl"), ready, out)) for _ in range(3)]
    for racer in racers:
        racer.start()
    results = [out.get(timeout=120) for _ in racers]
    for racer in racers:
        racer.join()
    slots = sorted(s for r in results for s in r)
    assert len(slots) == 3 * 2 * 40
    assert [b - a for a, b in itertools.pairwise(slots)] == pytest.approx([1.0] * (len(slots) - 1))


def test_worst_case_tokens_from_the_request() -> None:
    data = b'{"messages":[{"content":"hello","role":"user"}]}'
    assert worst_case_tokens({"max_tokens": 100}, data) == (len(data), 100)
    assert worst_case_tokens({"max_completion_tokens": 50, "max_tokens": 100, "n": 3}, data) == (len(data), 150)
    assert worst_case_tokens({}, data) == (len(data), DEFAULT_OUTPUT_CAP)
    assert worst_case_tokens({"max_tokens": "many"}, data) == (len(data), DEFAULT_OUTPUT_CAP)


def test_a_reservation_waits_for_calls_in_flight_then_the_budget_stops() -> None:
    async def scenario() -> list[str]:
        budget = Budget(1.0, LocalLedger())
        events: list[str] = []
        assert await budget.reserve(0.6)  # in flight, worst case 0.6

        async def second() -> None:
            events.append(f"second {await budget.reserve(0.6)}")

        task = asyncio.create_task(second())
        await asyncio.sleep(0.1)
        events.append("first settles")
        budget.settle(0.6, 0.1)  # it really cost 0.1: 0.6 more fits
        await task
        budget.settle(0.6, 0.6)
        events.append(f"third {await budget.reserve(0.6)}")  # 0.7 spent: 0.6 more cannot fit
        events.append(f"fourth {await budget.reserve(0.01)}")  # the budget was reached: nothing starts
        assert budget.spent() == 0.7
        return events

    assert asyncio.run(scenario()) == ["first settles", "second True", "third False", "fourth False"]


def test_processes_share_one_ledger(tmp_path: Path) -> None:
    path = tmp_path / "ledger.json"
    processes = [multiprocessing.get_context("spawn").Process(target=reserve_many, args=(str(path), 20))
                 for _ in range(3)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
    state = FileLedger(path).state()
    # 60 calls of $0.10 wanted, $1.00 allowed in total: exactly ten ran (float sums may fit 9)
    assert 0.9 - 1e-9 <= state.spent <= 1.0 and state.reserved < 1e-9 and state.stopped


def test_over_reported_usage_overshoots_by_its_excess_only_and_stops_the_budget() -> None:
    async def scenario() -> tuple[float, bool]:
        budget = Budget(1.0, LocalLedger())
        for _ in range(3):
            assert await budget.reserve(0.3)  # three calls in flight, $0.90 reserved
        for _ in range(3):
            budget.settle(0.3, 0.5)  # each server reports more than its request allows
        return budget.spent(), await budget.reserve(0.0001)

    spent, more = asyncio.run(scenario())
    assert spent <= 1.0 + 3 * (0.5 - 0.3) + 1e-9 and not more
