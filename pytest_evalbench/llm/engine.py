"""The LLM engine: cache, bounded retries, budget and a concurrency limit on one event loop.

pytest runs tests one at a time, but LLM calls must not wait for each other. The engine owns a
private asyncio loop in a daemon thread; the pytest layer submits every selected item's pipeline
ahead of time and each test then waits for its own future. A priority semaphore keeps at most
`concurrency` requests in flight; each *call* (not each item) waits for a slot, so the chains of
many items pipeline: as soon as any call ends, the most urgent waiting call starts.

Urgency is a deadline (see `call_priority`): an item's later calls are ranked behind the first
calls of the next few items. Strict item order (every call of item 0 before any of item 1) leaves
slots idle in the last rounds, when only a few chains remain and each must run its calls one
after the other; first-come order keeps every slot busy but finishes every item at the very end,
starving pytest's main loop, which waits on items in order. The deadline order keeps many items
active, so the tail is short, and results still stream out in order.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import dataclasses
import heapq
import itertools
import random
import threading
import time
from collections import Counter
from collections.abc import Coroutine
from typing import Any, TypeVar

from ..errors import BudgetExhausted, CacheMiss, EvalbenchError, LLMError
from ..redaction import SECRETS
from .budget import Budget, worst_case_tokens
from .cache import CorruptEntry, ResponseCache, canonical_json, request_key
from .pricing import PriceTable
from .rate_limit import AdaptiveConcurrency, SharedRateLimit, TokenRate, exhausted_for
from .transport import Failure, Transport, classify, make_transport
from .types import Completion, Endpoint, EngineSettings, EngineStats, Usage

T = TypeVar("T")

PRIORITY: contextvars.ContextVar[int] = contextvars.ContextVar("evalbench_priority", default=1 << 30)
"""Priority of the pipeline making calls: its item's index in the session (lower runs first)."""

CALLS: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("evalbench_calls", default=None)
"""Calls one pipeline has made so far (a shared counter for all its tasks), set by `Engine.submit`."""

ITEM_STRIDE = 1
"""Deadline units per item position: a call ranks `concurrency / ITEM_STRIDE` items later per call the
pipeline already made. A simulation of 200 chains x 7 calls at C = 64 finishes in 0.80 x the wave
ideal (C = 128: 0.87), against 1.00 (1.05) in strict item order and 0.81 (0.93) first-come, with
items still finishing in order; strides 2 and 4 were worse (0.82, 0.86)."""


def call_priority(concurrency: int) -> int:
    """The deadline of the next call of the current pipeline (lower starts first); counts the call."""
    position = PRIORITY.get()
    calls = CALLS.get()
    if calls is None:
        return position * ITEM_STRIDE
    made = calls[0]
    calls[0] = made + 1
    return position * ITEM_STRIDE + made * concurrency


def redacted(completion: Completion) -> Completion:
    """The completion with the run's secrets masked in its text and tool calls (an endpoint that
    echoes a key must not get it into transcripts, reports or the cache)."""
    content = SECRETS.redact(completion.content) if completion.content else completion.content
    calls = SECRETS.redact_data(completion.tool_calls) if completion.tool_calls else completion.tool_calls
    if content == completion.content and calls == completion.tool_calls:
        return completion
    return dataclasses.replace(completion, content=content, tool_calls=calls)


def bounded_strings(schema: dict[str, Any], limit: int = 400) -> dict[str, Any]:
    """A copy of a JSON schema with `maxLength` on every string property that has none."""
    out = dict(schema)
    if out.get("type") == "string" and "maxLength" not in out:
        out["maxLength"] = limit
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: bounded_strings(v, limit) for k, v in out["properties"].items()}
    if isinstance(out.get("items"), dict):
        out["items"] = bounded_strings(out["items"], limit)
    return out


def estimate_tokens(body: dict[str, Any]) -> int:
    """Tokens a request may use before its answer says: ~4 characters a token, plus the output cap."""
    prompt = sum(len(str(m.get("content") or "")) for m in body.get("messages", ())) // 4 + 1
    return prompt + int(body.get("max_completion_tokens") or body.get("max_tokens") or 0)


class PrioritySemaphore:
    """A semaphore whose waiters are served lowest priority value first (FIFO among equals)."""

    def __init__(self, value: int) -> None:
        self._value = value
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._counter = itertools.count()

    async def acquire(self, priority: int) -> None:
        if self._value > 0 and not self._waiters:
            self._value -= 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._counter), future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release()
            raise

    def release(self) -> None:
        while self._waiters:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():
                future.set_result(None)
                return
        self._value += 1


class Engine:
    """Runs LLM pipelines concurrently for a synchronous caller (pytest)."""

    def __init__(self, settings: EngineSettings, cache: ResponseCache, prices: PriceTable,
                 transport: Transport | None = None) -> None:
        self.settings = settings
        self.cache = cache
        self.prices = prices
        self.stats = EngineStats()
        self._transport = transport
        self._writer: concurrent.futures.ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._semaphore: PrioritySemaphore | None = None
        self._in_flight = 0
        self._cooldown: dict[str, float] = {}
        self._connection_failures: Counter[str] = Counter()
        self._refusals: dict[str, tuple[str, str]] = {}
        """Endpoint -> (kind, message) of its last refused connection: what an open circuit reports."""
        self._lock = threading.Lock()
        self._futures: dict[Any, concurrent.futures.Future[Any]] = {}
        self._queue: list[list[Any]] = []
        """Heap of [priority, sequence, key, factory] of pipelines not started yet."""
        self._queued: dict[Any, list[Any]] = {}
        self._started: dict[Any, concurrent.futures.Future[Any]] = {}
        self._sequence = itertools.count()
        self._active: set[Any] = set()
        """Keys started and not yet released: at most `window` (plus those a caller waited for)."""
        self._closed = False
        self.window = max(256, 4 * settings.concurrency)
        """Pipelines started ahead of their callers: enough to keep `concurrency` requests in flight."""
        self._pending: dict[str, asyncio.Future[Completion]] = {}
        self._rate = (SharedRateLimit(cache.directory / ".rate-limit", settings.rate_limit)
                      if settings.rate_limit else None)
        self._tokens = TokenRate(settings.token_limit) if settings.token_limit else None
        self._adaptive: dict[str, AdaptiveConcurrency] = {}
        self.budget = (Budget.open(settings.max_cost, settings.budget_ledger, settings.timeout)
                       if settings.max_cost is not None else None)

    @property
    def transport(self) -> Transport:
        """Built at the first cache miss: a fully replayed run never loads an HTTP client."""
        if self._transport is None:
            self._transport = make_transport(self.settings.transport, self.settings.timeout,
                                             self.settings.max_response_bytes)
        return self._transport

    @property
    def in_flight(self) -> int:
        """Requests on the network right now (read by the progress line)."""
        return self._in_flight

    # ------------------------------------------------------------------ loop management
    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    self._semaphore = PrioritySemaphore(max(1, self.settings.concurrency))
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
        self._start(entry, min(priority, entry[0]), future)
        return future

    def _take(self, entry: list[Any]) -> concurrent.futures.Future[Any]:
        """Under the lock: the entry's pipeline counts against the window from now on."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._futures[entry[2]] = future
        self._active.add(entry[2])
        return future

    def _pump(self) -> None:
        """Start queued pipelines, lowest priority first, while the window has room."""
        while True:
            with self._lock:
                if len(self._active) >= self.window or not self._queue or self._closed:
                    return
                entry = heapq.heappop(self._queue)
                if self._queued.pop(entry[2], None) is None:
                    continue  # started by submit() already, or dropped by close()
                future = self._take(entry)
            self._start(entry, entry[0], future)

    def _start(self, entry: list[Any], priority: int, future: concurrent.futures.Future[Any]) -> None:
        key, factory = entry[2], entry[3]
        entry[3] = None  # a stale heap entry keeps no factory (nor the case it closes over)

        async def runner() -> Any:
            PRIORITY.set(priority)
            CALLS.set([0])
            return await factory()

        inner = asyncio.run_coroutine_threadsafe(runner(), self._ensure_loop())
        with self._lock:  # close() cancels it (no callback between the two futures: no reference cycle)
            if not inner.done():
                self._started[key] = inner

        def done(finished: concurrent.futures.Future[Any]) -> None:
            with self._lock:
                self._started.pop(key, None)
            try:
                if finished.cancelled():
                    future.cancel()
                elif finished.exception() is not None:
                    future.set_exception(finished.exception())
                else:
                    future.set_result(finished.result())
            except concurrent.futures.InvalidStateError:
                pass  # cancelled by close() meanwhile

        inner.add_done_callback(done)

    def result(self, key: Any, factory: Any, priority: int) -> Any:
        """Block until the pipeline for `key` is done (starting it if it was not prefetched)."""
        return self.submit(key, factory, priority).result()

    def release(self, key: Any) -> None:
        """The caller is done with `key`'s result: its window slot goes to the next queued pipeline
        and a finished future (with the result it holds) is dropped, so a long session keeps no
        results; an unfinished one stays until close() cancels it."""
        with self._lock:
            self._active.discard(key)
            future = self._futures.get(key)
            if future is not None and future.done():
                del self._futures[key]
        self._pump()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run one coroutine on the engine loop and wait for it (used by the authoring commands)."""
        return asyncio.run_coroutine_threadsafe(coro, self._ensure_loop()).result()

    def close(self) -> None:
        """Cancel pending work and stop the loop; safe to call twice."""
        loop = self._loop
        if loop is None:
            return
        with self._lock:
            self._closed = True
            self._queue, self._queued = [], {}
            started = list(self._started.values())
        for future in [*self._futures.values(), *started]:
            future.cancel()

        async def shutdown() -> None:
            if self._transport is not None:
                await self._transport.aclose()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout=5)
        except Exception:
            pass
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._loop = None
        if self._writer is not None:
            self._writer.shutdown(wait=True)  # every answer received is on disk before the run ends
            self._writer = None

    # ------------------------------------------------------------------ one call
    def request_body(self, endpoint: Endpoint, messages: list[dict[str, Any]],
                     schema: tuple[str, dict[str, Any]] | None, tools: list[dict[str, Any]] | None
                     ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": endpoint.model, "messages": messages, **endpoint.params}
        if schema is not None:
            name, json_schema = schema
            if endpoint.provider == "local":
                # llama.cpp's server rejects OpenAI's json_schema shape; it takes json_object + schema,
                # and unbounded strings let a small model ramble until max_tokens cuts the JSON.
                body["response_format"] = {"type": "json_object", "schema": bounded_strings(json_schema)}
            else:
                body["response_format"] = {"type": "json_schema",
                                           "json_schema": {"name": name, "schema": json_schema, "strict": True}}
        if tools:
            body["tools"] = tools
        return body

    async def complete(self, endpoint: Endpoint, messages: list[dict[str, Any]], *, role: str, phase: str,
                       sample: int, attempt: int = 0, schema: tuple[str, dict[str, Any]] | None = None,
                       tools: list[dict[str, Any]] | None = None, ledger: dict[str, Usage] | None = None
                       ) -> Completion:
        """One chat completion: replayed from the cache or fetched with bounded retries."""
        body = self.request_body(endpoint, messages, schema, tools)
        encoded = canonical_json(body)  # hashed into the key and sent as is: the body is encoded once
        key = request_key(endpoint.identity, encoded, sample, attempt)
        cached = self._cached(key, role, endpoint.model)
        if cached is not None:
            self.stats.cache_hits += 1
            completion = redacted(Completion.from_json(cached, cached=True, key=key))
        elif self.cache.mode == "replay":
            raise CacheMiss(role, endpoint.model, key)
        elif key in self._pending:
            # single flight: an identical call is already under way; share its answer, pay once
            self.stats.cache_hits += 1
            completion = dataclasses.replace(await asyncio.shield(self._pending[key]), cached=True)
        else:
            pending: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
            self._pending[key] = pending
            try:
                completion = dataclasses.replace(redacted(await self._fetch(endpoint, body, role, encoded.encode())),
                                                 key=key)
            except BaseException as exc:
                pending.set_exception(exc)
                pending.exception()  # retrieved: waiters re-raise it, nobody logs it as lost
                del self._pending[key]
                raise
            pending.set_result(completion)
            self._write_behind(key, {"endpoint": endpoint.identity, "body": body, "sample": sample,
                                     "attempt": attempt}, completion)
        cost = self.prices.cost(endpoint.model, completion.input_tokens, completion.output_tokens,
                                local=endpoint.provider == "local")
        usage = Usage(completion.input_tokens, completion.output_tokens, cost)
        self.stats.usage[f"{phase}:{role}"].add(usage)
        self.stats.unpriced.update(self.prices.unpriced)
        if ledger is not None:
            ledger.setdefault(phase, Usage()).add(usage)
        if not completion.cached:
            self.stats.spent += cost
        return completion

    def _cached(self, key: str, role: str, model: str) -> dict[str, Any] | None:
        """A verified cache entry; a corrupt one is a miss that the fetch repairs, or in replay
        mode an error naming the file."""
        try:
            return self.cache.get(key)
        except CorruptEntry as exc:
            self.stats.failures["corrupt cache entry"] += 1
            if self.cache.mode == "replay":
                raise LLMError("corrupt cache entry", f"{exc}; re-record it with --evalbench-cache=on",
                               role=role, model=model) from None
            return None

    def _write_behind(self, key: str, material: dict[str, Any], completion: Completion) -> None:
        """Write the cache entry on the writer thread, off the event loop (one file write is ~0.5 ms).

        The answer stays in `_pending` until it is on disk, so an identical call meanwhile is
        served from memory exactly as it would be from the file (same counts, no second request).
        """
        if not self.cache.reads:
            del self._pending[key]  # `refresh` asks again for an identical later call, as before
        if not self.cache.writes:
            return
        if self._writer is None:
            self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="evalbench-cache")
        written = self._writer.submit(self._put, key, material, completion.to_json())
        if not self.cache.reads:
            return
        loop = asyncio.get_running_loop()

        def done(_: object) -> None:
            try:
                loop.call_soon_threadsafe(self._pending.pop, key, None)
            except RuntimeError:  # the loop is closed: the run is over, nobody asks any more
                pass

        written.add_done_callback(done)

    def _put(self, key: str, material: dict[str, Any], response: dict[str, Any]) -> None:
        """Store an entry unless its request carries a secret of the run (a key pasted into a
        prompt): no credential is ever written to the cache (the response is redacted already)."""
        if SECRETS and SECRETS.leaks(canonical_json(material)):
            self.stats.failures["not cached: the request holds a secret"] += 1
            return
        self.cache.put(key, material, response)

    async def forget(self, keys: list[str]) -> None:
        """Drop cache entries, after any of their writes still queued (same writer thread, FIFO)."""
        if self._writer is None:
            self.cache.forget(keys)
            return
        await asyncio.wrap_future(self._writer.submit(self.cache.forget, keys))

    async def _fetch(self, endpoint: Endpoint, body: dict[str, Any], role: str, data: bytes) -> Completion:
        settings = self.settings
        started = time.monotonic()
        ident = endpoint.identity
        for attempt in range(settings.max_attempts):
            if endpoint.provider != "local" and not endpoint.api_key and endpoint.base_url is None:
                raise LLMError("no API key", f"set {endpoint.key_source} (or api_key_env in benchmark.yaml), "
                               "or use --evalbench-cache=replay with a recorded cache", role=role,
                               model=endpoint.model)
            if self._connection_failures[ident] >= 2 * settings.max_attempts:
                # the circuit is open: fail with the refusal that opened it, so every item the dead
                # endpoint stops reads the same error (however many calls were in flight by then)
                raise LLMError(*self._refusals[ident], role=role, model=endpoint.model)
            wait = self._cooldown.get(ident, 0.0) - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            failure = await self._attempt(endpoint, body, role, data)
            if isinstance(failure, Completion):
                self._connection_failures[ident] = 0
                return failure
            self.stats.failures[failure.kind] += 1
            message = SECRETS.redact(failure.message)
            if failure.connection:
                self._connection_failures[ident] += 1
                self._refusals[ident] = (failure.kind, message)
            elapsed = time.monotonic() - started
            if not failure.retryable or attempt + 1 >= settings.max_attempts:
                raise LLMError(failure.kind, message
                               + (f" (after {attempt + 1} attempts, {elapsed:.1f}s)" if attempt else ""),
                               role=role, model=endpoint.model)
            delay = self._backoff(attempt, failure)
            if elapsed + delay > settings.max_retry_seconds:
                raise LLMError(failure.kind, message
                               + f" (gave up after {attempt + 1} attempts: retry budget "
                               f"{settings.max_retry_seconds:.0f}s exhausted)", role=role, model=endpoint.model)
            if failure.retry_after is not None:
                self._cooldown[ident] = max(self._cooldown.get(ident, 0.0), time.monotonic() + delay)
            self.stats.retries += 1
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _attempt(self, endpoint: Endpoint, body: dict[str, Any], role: str, data: bytes
                       ) -> Completion | Failure:
        assert self._semaphore is not None
        ident = endpoint.identity
        gate = self._adaptive.get(ident)
        if gate is None:
            gate = self._adaptive[ident] = AdaptiveConcurrency(self.settings.concurrency)
        priority = call_priority(self.settings.concurrency)
        started_round = await gate.acquire(priority)
        try:
            await self._semaphore.acquire(priority)
        except BaseException:
            gate.release(started_round, limited=False)
            raise
        limited = False
        reserved, actual = 0.0, 0.0
        self._in_flight += 1
        try:
            if self._rate is not None:
                await self._rate.wait()
            estimate = 0
            if self._tokens is not None:
                estimate = estimate_tokens(body)
                await self._tokens.wait(estimate)
            local = endpoint.provider == "local"
            if self.budget is not None:
                # the call's worst-case price is reserved before it is sent (see budget.py)
                worst = self.prices.quote(endpoint.model, *worst_case_tokens(body, data), local=local)
                if not await self.budget.reserve(worst):
                    raise BudgetExhausted(self.budget.spent(), self.budget.limit, role, endpoint.model, worst)
                reserved = worst
            self.stats.peak_in_flight = max(self.stats.peak_in_flight, self._in_flight)
            self.stats.requests += 1
            headers: dict[str, str] = {}
            completion = await self.transport.complete(endpoint, body, headers, data=data)
            actual = self.prices.quote(endpoint.model, completion.input_tokens, completion.output_tokens, local=local)
            if self._tokens is not None:
                self._tokens.correct(estimate, completion.input_tokens + completion.output_tokens)
            self._hold_off(ident, exhausted_for(headers))
            return completion
        except (asyncio.CancelledError, EvalbenchError):
            raise
        except Exception as exc:
            failure = classify(exc)
            limited = failure.kind == "rate limited"
            self._hold_off(ident, exhausted_for(failure.headers))
            return failure
        finally:
            if reserved:
                self.budget.settle(reserved, actual)  # type: ignore[union-attr]
            self._in_flight -= 1
            self._semaphore.release()
            gate.release(started_round, limited)

    def _hold_off(self, ident: str, seconds: float | None) -> None:
        """The provider's rate headers say its window is used up: start nothing new there until it resets."""
        if seconds:
            self._cooldown[ident] = max(self._cooldown.get(ident, 0.0), time.monotonic() + seconds)

    def _backoff(self, attempt: int, failure: Failure) -> float:
        if failure.retry_after is not None:
            return min(failure.retry_after, self.settings.backoff_cap) + random.uniform(0, 0.05)
        ceiling = min(self.settings.backoff_cap, self.settings.backoff_base * (2 ** attempt))
        return random.uniform(ceiling / 2, ceiling)

