"""The budget ledger: reservations, waiting for calls in flight, the stop, one ledger for processes."""

from __future__ import annotations

import asyncio
import multiprocessing
from pathlib import Path

from pytest_evalbench.llm.limits import DEFAULT_OUTPUT_CAP, Budget, FileLedger, LocalLedger, worst_case_tokens


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


def reserve_many(path: str, count: int) -> None:
    async def run() -> None:
        budget = Budget(1.0, FileLedger(Path(path)))
        for _ in range(count):
            if not await budget.reserve(0.1):
                return
            budget.settle(0.1, 0.1)

    asyncio.run(run())


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
