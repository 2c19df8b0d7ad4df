"""Scheduling: the engine's private event loop and the pipelines started on it.

pytest runs tests one at a time, but LLM calls must not wait for each other. The engine owns a
private asyncio loop in a daemon thread; the pytest layer submits every selected item's pipeline
ahead of time and each test then waits for its own future. A priority semaphore (limits.py) keeps at
most `concurrency` requests in flight; each *call* (not each item) waits for a slot, so the chains of
many items pipeline: as soon as any call ends, the most urgent waiting call starts.

Urgency is a deadline (see `call_priority`): an item's later calls are ranked behind the first
calls of the next few items. Strict item order (every call of item 0 before any of item 1) leaves
slots idle in the last rounds, when only a few chains remain and each must run its calls one
after the other; first-come order keeps every slot busy but finishes every item at the very end,
starving pytest's main loop, which waits on items in order. The deadline order keeps many items
active, so the tail is short, and results still stream out in order.

This is the only module that hands coroutines to the loop from another thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import heapq
import itertools
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

PRIORITY: contextvars.ContextVar[int] = contextvars.ContextVar("evalbench_priority", default=1 << 30)
"""Priority of the pipeline making calls: its item's index in the session (lower runs first)."""

CALLS: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("evalbench_calls", default=None)
"""Calls one pipeline has made so far (a shared counter for all its tasks), set by `Pipelines.submit`."""

ITEM_STRIDE = 1
"""Deadline units per item position: a call ranks `concurrency / ITEM_STRIDE` items later per call the
pipeline already made. A simulation of 200 chains x 7 calls at C = 64 finishes in 0.80 x the wave
ideal (C = 128: 0.87), against 1.00 (1.05) in strict item order and 0.81 (0.93) first-come, with
items still finishing in order; strides 2 and 4 were worse (0.82, 0.86)."""


PUMP_BATCH = 16
"""Released window slots are refilled this many at a time (fewer for a window under 256), handed to the
loop in one call: one wake-up of the loop per batch instead of per item (the lookahead stays within
this many of the window)."""


HAND_OFF_TURNS = 2
"""Turns of the event loop a chain waits after a fetched answer before it goes on (`hand_off`)."""


async def hand_off() -> None:
    """Let the call a fetched answer's slot went to (prepared, waiting) be sent before the answered
    chain prepares its next call. Answers arrive in bursts (a round of `concurrency` calls); without
    this, every chain of a burst built its next request (the costly part of a call) before any
    waiting call got on the wire, delaying each round by the whole burst's work. A woken caller runs in
    the next turn, after what was ready before it: the first turn puts this chain behind it, the second
    behind every caller woken in that turn."""
    for _ in range(HAND_OFF_TURNS):
        await asyncio.sleep(0)


def call_priority(concurrency: int) -> int:
    """The deadline of the next call of the current pipeline (lower starts first); counts the call."""
    position = PRIORITY.get()
    calls = CALLS.get()
    if calls is None:
        return position * ITEM_STRIDE
    made = calls[0]
    calls[0] = made + 1
    return position * ITEM_STRIDE + made * concurrency


class Pipelines:
    """Pipelines (coroutine factories, one per key) run on a private loop for a synchronous caller."""

    def __init__(self, window: int, on_loop_start: Callable[[], None], *, alternate: bool = False) -> None:
        self.window = window
        """Pipelines started ahead of their callers: enough to keep `concurrency` requests in flight."""
        self.alternate = alternate
        """Nothing the pipelines do waits on the network (a replay): the loop and its caller alternate,
        the loop running only while the caller waits (`awaited`). Run side by side, two threads that
        only compute gain nothing under the GIL and hand it to each other at every system call either
        makes (each cache file's open and reads, pytest's output capture)."""
        self._on_loop_start = on_loop_start
        """Called on the loop's thread before its first task (the limits make their slots there)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._futures: dict[Any, concurrent.futures.Future[Any]] = {}
        self._queue: list[list[Any]] = []
        """Heap of [priority, sequence, key, factory] of pipelines not started yet."""
        self._queued: dict[Any, list[Any]] = {}
        self._started: dict[Any, asyncio.Task[Any]] = {}
        """Tasks running on the loop (close() cancels them there)."""
        self._sequence = itertools.count()
        self._active: set[Any] = set()
        """Keys started and not yet released: at most `window` (plus those a caller waited for)."""
        self._closed = False

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    self._on_loop_start()
                    ready.set()
                    loop.run_forever()

                self._thread = threading.Thread(target=run, name="evalbench-engine", daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
                self._closed = False
            return self._loop

    def prefetch(self, key: Any, factory: Any, priority: int) -> None:
        """Queue `factory()` (a coroutine factory) once per key, to start when the window has room.

        At most `window` pipelines are started and not yet released (`release`, once their caller
        has their result), lowest priority first; the others wait in the queue as a factory, with
        no coroutine and no future, so prefetching 100,000 items costs a small entry each and the
        results running ahead of the test loop stay bounded by the window."""
        self._ensure_loop()
        with self._lock:
            if key not in self._futures and key not in self._queued:
                entry = self._queued[key] = [priority, next(self._sequence), key, factory]
                heapq.heappush(self._queue, entry)
        if not self.alternate:  # else the caller's next wait starts them (`awaited`)
            self._pump()

    def submit(self, key: Any, factory: Any, priority: int) -> concurrent.futures.Future[Any]:
        """The future of `key`'s pipeline, started now unless it already was (a queued one whose
        caller is waiting does not wait for the window: the test loop must not stall)."""
        self._ensure_loop()
        with self._lock:
            existing = self._futures.get(key)
            if existing is not None:
                return existing
            entry = self._queued.pop(key, None)  # its heap entry is skipped when popped
            if entry is None:
                entry = [priority, next(self._sequence), key, factory]
            future = self._take(entry)
            start = (key, entry[3], min(priority, entry[0]), future)
            entry[3] = None  # a stale heap entry keeps no factory (nor the case it closes over)
        self._start([start])
        return future

    def awaited(self, future: concurrent.futures.Future[Any]) -> list[concurrent.futures.Future[Any]]:
        """What a caller who needs `future` waits for: `future`, or when the loop and the caller
        alternate, also the window refilled once half of it is free, and the pipelines that starts; so
        the loop runs while the caller waits (a half window of rows at a time) and rests while the
        caller works on the results."""
        if not self.alternate:
            return [future]
        # the last wait outlasted every pipeline started before it: only these can be running
        return [future, *self._pump(max(1, self.window // 2))]

    def _take(self, entry: list[Any]) -> concurrent.futures.Future[Any]:
        """Under the lock: the entry's pipeline counts against the window from now on."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._futures[entry[2]] = future
        self._active.add(entry[2])
        return future

    def _pump(self, batch: int = 1) -> list[concurrent.futures.Future[Any]]:
        """Start queued pipelines, lowest priority first, while the window has room (once it has room
        for `batch` of them), handed to the loop together; the futures of those started."""
        starts = []
        with self._lock:
            if self.window - len(self._active) < batch:
                return []
            while len(self._active) < self.window and self._queue and not self._closed:
                entry = heapq.heappop(self._queue)
                if self._queued.pop(entry[2], None) is None:
                    continue  # started by submit() already, or dropped by close()
                starts.append((entry[2], entry[3], entry[0], self._take(entry)))
                entry[3] = None  # a stale heap entry keeps no factory (nor the case it closes over)
        if starts:
            self._start(starts)
        return [start[3] for start in starts]

    def _start(self, starts: list[tuple[Any, Any, int, concurrent.futures.Future[Any]]]) -> None:
        """Hand (key, factory, priority, future) of pipelines to the loop, which makes their tasks there
        (`_spawn`): one call across threads, no second future chained to each `future`."""
        self._ensure_loop().call_soon_threadsafe(self._spawn, starts)

    def _spawn(self, starts: list[tuple[Any, Any, int, concurrent.futures.Future[Any]]]) -> None:
        """On the loop: each pipeline's task, whose end settles its future (unless close() cancelled it)."""
        loop = asyncio.get_running_loop()
        for key, factory, priority, future in starts:
            if not future.done():  # else cancelled by close() before the loop got to it
                self._spawn_one(loop, key, factory, priority, future)

    def _spawn_one(self, loop: asyncio.AbstractEventLoop, key: Any, factory: Any, priority: int,
                   future: concurrent.futures.Future[Any]) -> None:
        """On the loop: one pipeline's task, with its priority and its own call counter."""

        async def runner() -> Any:
            PRIORITY.set(priority)
            CALLS.set([0])
            return await factory()

        task = loop.create_task(runner())
        with self._lock:  # close() cancels it
            self._started[key] = task
        task.add_done_callback(functools.partial(self._settle, key, future))

    def _settle(self, key: Any, future: concurrent.futures.Future[Any], task: asyncio.Task[Any]) -> None:
        """On the loop, when the task ends: its outcome becomes the caller's future's."""
        with self._lock:
            self._started.pop(key, None)
        try:
            if task.cancelled():
                future.cancel()
            elif task.exception() is not None:
                future.set_exception(task.exception())
            else:
                future.set_result(task.result())
        except concurrent.futures.InvalidStateError:
            pass  # cancelled by close() meanwhile

    def result(self, key: Any, factory: Any, priority: int) -> Any:
        """Block until the pipeline for `key` is done (starting it if it was not prefetched)."""
        return self.submit(key, factory, priority).result()

    def release(self, key: Any) -> None:
        """The caller is done with `key`'s result: its window slot goes to the next queued pipeline
        (when the loop and the caller alternate, at the caller's next wait: `awaited`) and a finished
        future (with the result it holds) is dropped, so a long session keeps no results; an unfinished
        one stays until close() cancels it."""
        with self._lock:
            self._active.discard(key)
            future = self._futures.get(key)
            if future is not None and future.done():
                del self._futures[key]
        if not self.alternate:
            self._pump(min(PUMP_BATCH, max(1, self.window // 16)))

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one coroutine on the loop and wait for it (used by the authoring commands)."""
        return asyncio.run_coroutine_threadsafe(coro, self._ensure_loop()).result()

    def close(self, shutdown: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Cancel pending work, run `shutdown()` on the loop (at most 5 s), then stop the loop; safe to
        call twice (nothing runs when no loop was started)."""
        loop = self._loop
        if loop is None:
            return
        with self._lock:
            self._closed = True
            self._queue, self._queued = [], {}
            started = list(self._started.values())
        for future in self._futures.values():
            future.cancel()
        for task in started:  # queued before the shutdown below: cancelled first
            loop.call_soon_threadsafe(task.cancel)

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout=5)
        except Exception:
            pass
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._loop = None
