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
