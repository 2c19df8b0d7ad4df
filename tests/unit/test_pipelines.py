"""The engine's pipelines (llm/pipelines.py): each starts as one task on the private loop, its result
reaches the caller's future, and close() cancels what still runs."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any

import pytest

import pytest_evalbench.llm.pipelines as pipelines_module
from pytest_evalbench.llm.pipelines import CALLS, PRIORITY, Pipelines
from pytest_evalbench.llm.types import Endpoint


def test_each_pipeline_is_one_task_whose_result_reaches_its_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """No second future is chained per pipeline (`run_coroutine_threadsafe` makes one, and its callbacks
    cost both threads the GIL per item of a cached replay): the loop makes the task itself."""
    chained: list[Any] = []
    real = asyncio.run_coroutine_threadsafe

    def counted(coro: Any, loop: Any) -> Any:
        chained.append(coro)
        return real(coro, loop)

    monkeypatch.setattr(pipelines_module.asyncio, "run_coroutine_threadsafe", counted)
    pipes = Pipelines(4, lambda: None)

    def factory(i: int) -> Any:
        async def pipeline() -> tuple[int, int, list[int] | None]:
            await asyncio.sleep(0)
            if i == 7:
                raise ValueError("seven")
            return i, PRIORITY.get(), CALLS.get()
        return pipeline

    for i in range(10):
        pipes.prefetch(i, factory(i), 100 + i)
    results = []
    for i in range(10):
        future = pipes.submit(i, factory(i), 0)
        if i == 7:
            with pytest.raises(ValueError, match="seven"):
                future.result(timeout=5)
        else:
            results.append(future.result(timeout=5))
        pipes.release(i)
    assert [r[0] for r in results] == [i for i in range(10) if i != 7]
    assert all(calls == [0] for _, _, calls in results)  # each pipeline's own call counter
    assert results[0][1] == 100 and results[5][1] == 105  # started from the queue: their own priority
    assert chained == []
    pipes.close(lambda: asyncio.sleep(0))


def test_close_cancels_a_running_pipeline_and_its_callers_future() -> None:
    pipes = Pipelines(4, lambda: None)
    started, ended = threading.Event(), []

    async def forever() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            ended.append("cancelled")

    future = pipes.submit("k", forever, 0)
    assert started.wait(5)
    pipes.close(lambda: asyncio.sleep(0))
    assert future.cancelled() and ended == ["cancelled"]
    with pytest.raises(concurrent.futures.CancelledError):
        future.result(timeout=1)


def test_released_slots_are_refilled_in_batches_within_the_window() -> None:
    """A release frees one slot; slots are refilled `PUMP_BATCH` at a time (a window of 256) in one
    hand-over to the loop, so a cached replay wakes the loop once per batch, not per item; the window
    still bounds what runs ahead, and every pipeline runs once, in order."""
    from pytest_evalbench.llm.pipelines import PUMP_BATCH

    pipes = Pipelines(256, lambda: None)
    loop = pipes._ensure_loop()
    handovers: list[int] = []
    real = loop.call_soon_threadsafe

    def counted(callback: Any, *args: Any, **kwargs: Any) -> Any:
        handovers.append(len(args[0]) if args and isinstance(args[0], list) else 0)
        return real(callback, *args, **kwargs)

    loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
    started: list[int] = []

    def factory(i: int) -> Any:
        async def pipeline() -> int:
            started.append(i)
            return i
        return pipeline

    count = 256 + 20 * PUMP_BATCH
    for i in range(count):
        pipes.prefetch(i, factory(i), i)
    assert handovers == [1] * 256  # the first window: each prefetch hands its own over
    handovers.clear()
    for i in range(count):
        assert pipes.submit(i, factory(i), 0).result(timeout=5) == i
        pipes.release(i)
        assert len(pipes._active) <= 256
    assert handovers == [PUMP_BATCH] * 20 and started == list(range(count))
    pipes.close(lambda: asyncio.sleep(0))


def test_calls_rank_by_deadline_not_by_item() -> None:
    """A pipeline's later calls rank behind the first calls of the next few items (concurrency / stride)."""
    import contextvars

    from pytest_evalbench.llm.pipelines import CALLS, ITEM_STRIDE, PRIORITY, call_priority

    def ranks(position: int, calls: int) -> list[int]:
        def run() -> list[int]:
            PRIORITY.set(position)
            CALLS.set([0])
            return [call_priority(64) for _ in range(calls)]

        return contextvars.copy_context().run(run)

    assert ranks(0, 3) == [0, 64, 128]
    assert ranks(10, 2) == [10 * ITEM_STRIDE, 10 * ITEM_STRIDE + 64]
    assert ranks(0, 2)[1] < ranks(64 // ITEM_STRIDE + 1, 1)[0]  # item 0's 2nd call beats item 65's 1st
    assert contextvars.copy_context().run(lambda: (PRIORITY.set(5), call_priority(64))[1]) == 5 * ITEM_STRIDE


class _SleepTransport:
    """Answers every call after `latency` seconds; records call starts and the peak in flight."""

    def __init__(self, latency: float) -> None:
        self.latency = latency
        self.starts: list[str] = []
        self.in_flight = self.peak = 0

    async def complete(self, endpoint: Endpoint, body: dict[str, object], headers_out: object = None, *,
                       data: bytes | None = None) -> object:
        from pytest_evalbench.llm.types import Completion

        self.starts.append(str(body["messages"][0]["content"]))  # type: ignore[index]
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await asyncio.sleep(self.latency)
        finally:
            self.in_flight -= 1
        return Completion(content="ok", input_tokens=1, output_tokens=1)

    async def aclose(self) -> None:
        return None


def test_item_chains_pipeline_and_finish_in_order(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Each call (not each item) takes a slot: a later item's first call starts before an earlier
    item's last call, items still finish in order and in flight never exceeds the concurrency."""
    from pytest_evalbench.llm.cache import ResponseCache
    from pytest_evalbench.llm.costs import PriceTable
    from pytest_evalbench.llm.engine import Engine, EngineSettings

    transport = _SleepTransport(0.01)
    engine = Engine(EngineSettings(concurrency=8), ResponseCache(tmp_path, "off"), PriceTable(),
                    transport=transport)  # type: ignore[arg-type]
    endpoint = Endpoint(model="m", base_url=None, api_key="k")
    finished: list[int] = []

    def chain(item: int) -> object:
        async def run() -> int:
            for call in range(7):
                messages = [{"role": "user", "content": f"{item}.{call}"}]
                await engine.complete(endpoint, messages, role="target", phase="simulate", sample=0)
            finished.append(item)
            return item

        return run

    try:
        futures = [engine.submit(i, chain(i), i) for i in range(20)]
        assert [f.result(timeout=30) for f in futures] == list(range(20))
    finally:
        engine.close()
    assert transport.peak == 8 and len(transport.starts) == 140
    # the last item starts long before the first item's last call (strict item order: 127th vs 54th start)
    assert transport.starts.index("19.0") < transport.starts.index("0.6")
    assert finished[:4] == [0, 1, 2, 3] and finished[-1] >= 16  # early items first, roughly in order


def test_alternating_the_loop_runs_only_while_its_caller_waits() -> None:
    """A replay's pipelines only compute: run beside the test loop they would hand the GIL back and
    forth at every system call. Alternating, no pipeline runs while the caller works on a result, a
    wait fills the window and lasts until every started pipeline has ended, and every pipeline still
    runs once, in order, its result reaching its own caller."""
    pipes = Pipelines(8, lambda: None, alternate=True)
    working = threading.Event()
    ran: list[tuple[int, bool]] = []

    def factory(i: int) -> Any:
        async def pipeline() -> int:
            ran.append((i, working.is_set()))
            await asyncio.sleep(0)
            return i
        return pipeline

    for i in range(30):
        pipes.prefetch(i, factory(i), i)
    for i in range(30):
        future = pipes.submit(i, factory(i), 0)
        assert not concurrent.futures.wait(pipes.awaited(future), timeout=5).not_done
        assert all(started.done() for started in pipes._futures.values())
        working.set()
        assert future.result() == i
        pipes.release(i)
        threading.Event().wait(0.002)  # the loop would start the next pipeline now, were it pumped
        working.clear()
        assert len(pipes._active) <= 8
    assert [i for i, _ in ran] == list(range(30))
    assert not any(during for _, during in ran)
    pipes.close(lambda: asyncio.sleep(0))
