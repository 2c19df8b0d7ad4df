"""The engine's pipelines (llm/pipelines.py): each starts as one task on the private loop, its result
reaches the caller's future, and close() cancels what still runs."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any

import pytest

import pytest_evalbench.llm.pipelines as pipelines_module
from pytest_evalbench.llm.pipelines import CALLS, PRIORITY, Pipeline, Pipelines


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

    results = run_all(pipes, 10, factory, 7, "seven", first_priority=100)
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


def test_a_pipeline_settled_by_its_first_attempt_makes_no_task() -> None:
    """A memo hit (`Pipeline.first` returns a value) settles the caller's future on the loop without a
    task: the coroutine is never made. None runs the coroutine; an exception reaches the caller."""
    pipes = Pipelines(4, lambda: None)
    made: list[int] = []
    tasks: list[Any] = []

    def pipeline(i: int) -> Pipeline:
        async def chain() -> str:
            tasks.append(asyncio.current_task())
            return f"chain {i}"

        def run() -> Any:
            made.append(i)
            return chain()

        def first() -> str | None:
            if i == 3:
                raise ValueError("three")
            return f"hit {i}" if i % 2 == 0 else None

        return Pipeline(run, first)

    results = run_all(pipes, 6, pipeline, 3, "three")
    assert results == ["hit 0", "chain 1", "hit 2", "hit 4", "chain 5"]
    assert made == [1, 5] and len(tasks) == 2  # only the misses made a coroutine and a task
    pipes.close(lambda: asyncio.sleep(0))


def test_a_first_attempt_runs_on_the_calling_thread_and_its_counting_on_the_loop() -> None:
    """A memo hit is settled where it is started (the test loop's thread): the loop's thread stays idle
    in a fully cached replay (no GIL contention, no futex hand-off per item); what it counts (`soon`)
    runs on the loop's thread, with the engine's other counting, before close() returns."""
    pipes = Pipelines(4, lambda: None)
    first_threads: list[threading.Thread] = []
    counted: list[threading.Thread] = []

    def pipeline(i: int) -> Pipeline:
        async def chain() -> int:
            return -i

        def first() -> int:
            first_threads.append(threading.current_thread())
            pipes.soon(lambda: counted.append(threading.current_thread()))
            return i

        return Pipeline(chain, first)

    for i in range(6):
        pipes.prefetch(i, pipeline(i), i)
    assert [pipes.submit(i, pipeline(i), 0).result(timeout=5) for i in range(6)] == list(range(6))
    pipes.close(lambda: asyncio.sleep(0))
    assert first_threads == [threading.main_thread()] * 6
    assert len(counted) == 6 and threading.main_thread() not in counted


def test_a_replay_wakes_the_idle_loop_only_per_batch_of_counting() -> None:
    """Memo hits settle on the calling thread; their counting (`soon`) wakes the loop only once
    `DEFERRED_BATCH` of it waits (a wake-up takes the GIL from the test loop), goes along with a
    pipeline handed over anyway (a miss), and all of it runs, once, by close()."""
    from pytest_evalbench.llm.pipelines import DEFERRED_BATCH, PUMP_BATCH

    pipes = Pipelines(256, lambda: None)
    loop = pipes._ensure_loop()
    handovers: list[tuple[int, int]] = []
    real = loop.call_soon_threadsafe

    def counted(callback: Any, *args: Any, **kwargs: Any) -> Any:
        if args and isinstance(args[0], list):
            handovers.append((len(args[0]), len(args[1])))
        return real(callback, *args, **kwargs)

    loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
    ran: list[int] = []
    count = 256 + 4 * DEFERRED_BATCH
    miss = count - 3 * PUMP_BATCH

    def pipeline(i: int) -> Pipeline:
        async def chain() -> int:
            return -i

        def first() -> int | None:
            pipes.soon(lambda: ran.append(i))
            return None if i == miss else i

        return Pipeline(chain, first)

    for i in range(count):
        pipes.prefetch(i, pipeline(i), i)
    for i in range(count):
        assert pipes.submit(i, pipeline(i), 0).result(timeout=5) == (-i if i == miss else i)
        pipes.release(i)
    deferred = [n for _, n in handovers]
    assert all(n >= DEFERRED_BATCH for started, n in handovers if not started)  # woken for counting alone
    assert len(handovers) <= count // DEFERRED_BATCH + 1 and any(started and n for started, n in handovers)
    pipes.close(lambda: asyncio.sleep(0))
    assert sorted(ran) == list(range(count)) and sum(deferred) < count  # the rest ran at close


def run_all(pipes: Pipelines, count: int, make: Callable[[int], Any], failing: int, message: str,
            first_priority: int = 0) -> list[Any]:
    """Prefetch `count` pipelines, then wait for each in order (pipeline `failing` raises ValueError
    `message`) and release it: the results of the others, in order."""
    for i in range(count):
        pipes.prefetch(i, make(i), first_priority + i)
    results = []
    for i in range(count):
        future = pipes.submit(i, make(i), 0)
        if i == failing:
            with pytest.raises(ValueError, match=message):
                future.result(timeout=5)
        else:
            results.append(future.result(timeout=5))
        pipes.release(i)
    return results
