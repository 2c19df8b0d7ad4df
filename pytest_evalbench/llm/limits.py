"""Admission of one request: what it waits for before it is sent, and what it gives back after.

In order: the endpoint's adaptive concurrency (cut by 429s), a slot of the global priority semaphore (at
most `concurrency` requests in flight, the most urgent waiter first), the user's shared request rate,
the token rate, the endpoint's start slot in the machine-wide view of its limits (shared_limits.py), and
the budget's reservation of the call's worst-case price. After the answer (or the failure) the
reservation is settled at the real price, the token estimate corrected, and what the answer says about
the endpoint's limits (429, Retry-After, x-ratelimit-* headers) goes into the shared view, pacing every
process.

Rate limits the user sets: requests per minute shared by every process on the machine (xdist workers
included), each request reserving the next free slot in a small state file under an exclusive
`filelock`, then sleeping until its slot (a crashed worker leaves nothing locked); tokens per minute per
process. Our own code, not a rate-limit library's: aiolimiter and the `limits` package count per process,
pyrate-limiter shares a bucket across processes only through SQLite, Redis or a manager process, and none
has the adaptive concurrency cut by 429s or a token schedule corrected by the answers' real usage.

The budget (`--evalbench-max-cost`): every call reserves its worst-case price before it is sent and
settles with its priced usage after, so the calls on the network can never together spend more than is
left. Worst case of one request (`worst_case_tokens`): one input token per byte of the JSON body sent (a
byte-level tokenizer's token covers at least one byte; the JSON quoting around each message outweighs
the few template tokens a chat format adds) and its `max_completion_tokens` or `max_tokens` times `n`
output tokens, or `DEFAULT_OUTPUT_CAP` when the request sets none. A call whose reservation does not fit
next to what is spent and reserved waits for the calls in flight to settle; once it cannot fit even with
nothing in flight, the budget is reached: that call and every later one is refused with
`BudgetExhausted` (the row is an error, the run exit 7). Under xdist all workers keep one ledger: a small
JSON file under an exclusive `filelock`, made by the controller for the session; a single process keeps
it in memory. A model with no price reserves and costs $0 (the summary names it).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import os
import stat
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Protocol

from filelock import FileLock

from pytest_evalbench.base.errors import BudgetExhausted, EvalbenchWarning, InputError, LLMError
from pytest_evalbench.base.files import atomic_write_text, finite_json, read_bounded
from pytest_evalbench.base.json_input import parse_json
from pytest_evalbench.llm.costs import PriceTable, call_tier
from pytest_evalbench.llm.pipelines import call_priority
from pytest_evalbench.llm.shared_limits import SharedLimits, endpoint_key, parse
from pytest_evalbench.llm.transport import Failure
from pytest_evalbench.llm.types import Completion, Endpoint, EngineSettings, EngineStats

LOCAL_SLOTS = 1
"""Requests in flight to the embedded llama.cpp server: it answers one at a time, so more would only
queue inside it, where the wait counts against each request's timeout (16 concurrent judge calls of
the 1.5B model timed out); they wait here instead, with no timeout."""


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


class Limits:
    """The limits every request of one engine passes; `admission(endpoint)` is one request's way through."""

    def __init__(self, settings: EngineSettings, stats: EngineStats, prices: PriceTable, rate_file: Path) -> None:
        self.settings = settings
        self.stats = stats
        self.prices = prices
        self.semaphore: PrioritySemaphore | None = None
        self._in_flight = 0
        self.shared = SharedLimits(rate_file.with_name(".endpoint-limits"))
        self._keys: dict[str, str] = {}
        self.rate = SharedRateLimit(rate_file, settings.rate_limit) if settings.rate_limit else None
        self.tokens = TokenRate(settings.token_limit) if settings.token_limit else None
        self.adaptive: dict[str, AdaptiveConcurrency] = {}
        self.budget = (Budget.open(settings.max_cost, settings.budget_ledger, settings.timeout)
                       if settings.max_cost is not None else None)

    def open_slots(self) -> None:
        """Fresh slots for a new event loop (called on the loop's thread before it runs anything)."""
        self.semaphore = PrioritySemaphore(max(1, self.settings.concurrency))

    @property
    def in_flight(self) -> int:
        """Requests on the network right now (read by the progress line)."""
        return self._in_flight

    def key(self, endpoint: Endpoint) -> str:
        """The endpoint's name in the shared view of limits (scheme://host:port/path, no credentials)."""
        ident = endpoint.identity
        key = self._keys.get(ident)
        if key is None:
            key = self._keys[ident] = ident if endpoint.provider == "local" else endpoint_key(ident)
        return key

    def admission(self, endpoint: Endpoint) -> Admission:
        """`async with limits.admission(endpoint) as admitted:` holds a concurrency slot for one request."""
        return Admission(self, endpoint)


class Admission:
    """One request's slot: taken on entry, given back on exit with what its answer says."""

    def __init__(self, limits: Limits, endpoint: Endpoint) -> None:
        self.limits = limits
        self.endpoint = endpoint
        self.local = endpoint.provider == "local"
        self.limited = False
        self.reserved, self.actual = 0.0, 0.0
        self.estimate = 0
        self._gate: AdaptiveConcurrency | None = None
        self._started_round = 0

    async def __aenter__(self) -> Admission:
        limits = self.limits
        assert limits.semaphore is not None
        ident = self.endpoint.identity
        gate = limits.adaptive.get(ident)
        if gate is None:
            ceiling = LOCAL_SLOTS if self.local else limits.settings.concurrency
            gate = limits.adaptive[ident] = AdaptiveConcurrency(ceiling)
        priority = call_priority(limits.settings.concurrency)
        started_round = await gate.acquire(priority)
        try:
            await limits.semaphore.acquire(priority)
        except BaseException:
            gate.release(started_round, limited=False)
            raise
        self._gate, self._started_round = gate, started_round
        limits._in_flight += 1
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        limits = self.limits
        if self.reserved:
            limits.budget.settle(self.reserved, self.actual)  # type: ignore[union-attr]
        limits._in_flight -= 1
        limits.semaphore.release()  # type: ignore[union-attr]
        self._gate.release(self._started_round, self.limited)  # type: ignore[union-attr]

    async def admit(self, body: dict[str, Any], data: bytes, role: str, deadline: float | None = None) -> None:
        """Wait for the request and token rates and reserve the worst-case price, then count the request.
        `deadline` (monotonic): when the call's retry budget ends; a pace that would start the request
        later (a header or a state file asking for a long wait) ends the call with an error instead."""
        limits, endpoint = self.limits, self.endpoint
        if limits.rate is not None:
            await self._pace(await asyncio.to_thread(limits.rate.reserve) - time.time(), deadline, role,
                             "the shared request rate (--evalbench-rate-limit)")
        if limits.tokens is not None:
            self.estimate = estimate_tokens(body)
            await self._pace(limits.tokens.delay(self.estimate), deadline, role,
                             "the token rate (--evalbench-token-limit)")
        # paced: the endpoint's next start slot, shared by every process
        await self._pace(limits.shared.reserve(limits.key(endpoint)) - time.time(), deadline, role,
                         "the endpoint's rate limits (its x-ratelimit-* and Retry-After headers)")
        if limits.budget is not None:
            # the call's worst-case price is reserved before it is sent (see `Budget`)
            worst = limits.prices.quote(endpoint.model, *worst_case_tokens(body, data), local=self.local,
                                        tier=call_tier(endpoint))
            if not await limits.budget.reserve(worst):
                raise BudgetExhausted(limits.budget.spent(), limits.budget.limit, role, endpoint.model, worst)
            self.reserved = worst
        limits.stats.peak_in_flight = max(limits.stats.peak_in_flight, limits._in_flight)
        limits.stats.requests += 1

    async def _pace(self, delay: float, deadline: float | None, role: str, why: str) -> None:
        """Sleep `delay` seconds, or fail the call when that would run past its `deadline`."""
        if delay <= 0:
            return
        if deadline is not None and time.monotonic() + delay > deadline:
            budget = self.limits.settings.max_retry_seconds
            raise LLMError("rate limited", f"{why} would hold this request {delay:.1f}s, longer than its retry "
                           f"budget allows ({budget:g}s, --evalbench-retry-budget): not sent",
                           role=role, model=self.endpoint.model)
        await asyncio.sleep(delay)

    def answered(self, completion: Completion, headers: dict[str, str]) -> None:
        """The real price (settled on exit), the real tokens, and the hold-off the rate headers ask for."""
        limits = self.limits
        if self.reserved:  # the price settles a budget reservation only
            self.actual = limits.prices.quote(self.endpoint.model, completion.input_tokens, completion.output_tokens,
                                              local=self.local, tier=call_tier(self.endpoint),
                                              cached_tokens=completion.cached_tokens,
                                              cache_write_tokens=completion.cache_write_tokens)
        if limits.tokens is not None:
            limits.tokens.correct(self.estimate, completion.input_tokens + completion.output_tokens)
        limits.shared.learn(limits.key(self.endpoint), parse(headers), limited=False,
                            tokens=completion.input_tokens + completion.output_tokens)

    def refused(self, failure: Failure) -> None:
        """A rate-limited answer cuts the endpoint's concurrency (on exit) and paces it for every
        process; any error's headers may say its windows are used up."""
        self.limited = failure.category == "rate limited"
        if self.limited or failure.headers:
            self.limits.shared.learn(self.limits.key(self.endpoint), parse(failure.headers), limited=self.limited)


MAX_QUEUE_SECONDS = 3600.0
"""Furthest ahead a shared rate's next slot can be: a value beyond (or not a number) is a corrupt
or planted file, not a queue of waiting requests."""


class SharedRateLimit:
    """At most `per_minute` request starts per minute across all processes using `path`."""

    def __init__(self, path: Path, per_minute: float) -> None:
        self.path = path
        self.interval = 60.0 / per_minute
        self._lock = FileLock(str(path) + ".lock")
        """Held for a read-change-write of `path` (per thread: reserved on worker threads)."""
        self._warned = False

    def reserve(self) -> float:
        """Claim the next slot; return the wall-clock time it starts."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock.acquire(poll_interval=0.001):  # a holder keeps it for microseconds
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)  # never a link,
                         | getattr(os, "O_NONBLOCK", 0), 0o644)  # nor a FIFO waited on
            try:
                now = time.time()
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    self._ignored(b"(not a regular file)")
                    return now
                raw = os.read(fd, 64)
                try:
                    next_free = float(raw.decode() or 0)
                except ValueError:
                    next_free = 0.0
                if not (math.isfinite(next_free) and next_free <= now + MAX_QUEUE_SECONDS):
                    self._ignored(raw)  # a committed or edited file: no slot that far ahead was ever given
                    next_free = 0.0
                slot = max(now, next_free)
                os.lseek(fd, 0, os.SEEK_SET)
                os.ftruncate(fd, 0)
                os.write(fd, repr(slot + self.interval).encode())
                return slot
            finally:
                os.close(fd)


    def _ignored(self, raw: bytes) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(EvalbenchWarning(f"{self.path}: next slot {raw[:30]!r} is not a time within "
                                           f"{MAX_QUEUE_SECONDS:g}s of now; ignored"), stacklevel=3)


class AdaptiveConcurrency:
    """Requests in flight to one endpoint, adapted to what the provider accepts (AIMD).

    A 429 halves the limit (once per round: answers to requests sent before the last cut do not
    cut again); every success adds 1/limit, so the limit grows back by about one per round of
    successful requests, up to the configured concurrency. Waiters are served lowest priority
    value first, like the engine's semaphore, so a throttled endpoint still finishes early items first.
    """

    def __init__(self, ceiling: int) -> None:
        self.ceiling = float(max(1, ceiling))
        self.limit = self.ceiling
        self.in_flight = 0
        self.round = 0
        """How many times a 429 cut the limit (one cut per round)."""
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    async def acquire(self, priority: int = 0) -> int:
        """Wait for a slot; return the round the request starts in (hand it back to `release`)."""
        if self.in_flight < int(self.limit) and not self._waiters:
            self.in_flight += 1
            return self.round
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._order), future))
        self._wake(int(self.limit) - self.in_flight)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():  # granted, then cancelled: give the slot back
                self.in_flight -= 1
                self._wake(int(self.limit) - self.in_flight)
            raise
        return self.round

    def release(self, started_round: int, limited: bool) -> None:
        self.in_flight -= 1
        if limited:
            if started_round == self.round:
                self.limit = max(1.0, self.limit / 2)
                self.round += 1
        else:
            self.limit = min(self.ceiling, self.limit + 1 / self.limit)
        self._wake(int(self.limit) - self.in_flight)

    def _wake(self, slots: int) -> None:
        while slots > 0 and self._waiters:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():
                self.in_flight += 1
                future.set_result(None)
                slots -= 1


class TokenRate:
    """At most `per_minute` tokens per minute in this process, by a virtual schedule (GCRA).

    A request reserves its estimated tokens before it starts and waits until the schedule lets it
    go (one second of burst); the true count from the response corrects the schedule afterwards.
    """

    BURST_SECONDS = 1.0

    def __init__(self, per_minute: float) -> None:
        self.per_second = per_minute / 60.0
        self._due = 0.0

    def delay(self, tokens: int) -> float:
        """Reserve `tokens` on the schedule; the seconds to wait before the request starts."""
        now = time.monotonic()
        due = max(self._due, now)
        self._due = due + tokens / self.per_second
        return due - now - self.BURST_SECONDS

    def correct(self, estimated: int, actual: int) -> None:
        self._due += (actual - estimated) / self.per_second


DEFAULT_OUTPUT_CAP = 4096
"""Output tokens reserved for a request that sets neither `max_tokens` nor `max_completion_tokens`
(every role sets one by default, see `spec.DEFAULT_MAX_TOKENS`; `params` can remove it)."""
POLL_SECONDS = 0.05
"""How often a waiting call re-reads a shared ledger (other processes settle there)."""

Reservation = Literal["ok", "wait", "stop"]


def worst_case_tokens(body: dict[str, Any], data: bytes) -> tuple[int, int]:
    """(input, output) tokens the request can at most be billed for (see the module docstring)."""
    cap = body.get("max_completion_tokens") or body.get("max_tokens")
    try:
        output = int(cap) if cap else DEFAULT_OUTPUT_CAP
        choices = max(1, int(body.get("n") or 1))
    except (TypeError, ValueError):
        output, choices = DEFAULT_OUTPUT_CAP, 1
    return len(data), max(0, output) * choices


@dataclass
class LedgerState:
    spent: float = 0.0
    """Settled cost of every call of the session (all processes)."""
    reserved: float = 0.0
    """Worst-case cost of the calls on the network now."""
    stopped: bool = False
    """The budget was reached: no call starts any more."""

    def decide(self, amount: float, limit: float) -> Reservation:
        if self.stopped:
            return "stop"
        if self.spent + amount > limit:
            self.stopped = True
            return "stop"
        if self.reserved > 0 and self.spent + self.reserved + amount > limit:
            return "wait"
        self.reserved += amount
        return "ok"

    def settle(self, reserved: float, actual: float) -> None:
        self.reserved = max(0.0, self.reserved - reserved)
        self.spent += actual


class Ledger(Protocol):
    def try_reserve(self, amount: float, limit: float) -> Reservation: ...

    def settle(self, reserved: float, actual: float) -> None: ...

    def state(self) -> LedgerState: ...


class LocalLedger:
    """One process's ledger (no xdist)."""

    def __init__(self) -> None:
        self._state = LedgerState()

    def try_reserve(self, amount: float, limit: float) -> Reservation:
        return self._state.decide(amount, limit)

    def settle(self, reserved: float, actual: float) -> None:
        self._state.settle(reserved, actual)

    def state(self) -> LedgerState:
        return self._state


class FileLedger:
    """The session's ledger shared by xdist workers: read, change and write under one file lock
    (released by the OS if a holder dies)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = FileLock(str(path) + ".lock")

    def _read(self) -> LedgerState:
        try:
            data = parse_json(read_bounded(self.path, 4096).decode("utf-8"), self.path)
            spent, reserved = float(data["spent"]), float(data["reserved"])
        except (OSError, ValueError, KeyError, TypeError, InputError):
            return LedgerState()
        if not (math.isfinite(spent) and math.isfinite(reserved) and spent >= 0 and reserved >= 0):
            return LedgerState(stopped=True)  # never a credit: a ledger that cannot be believed spends nothing more
        return LedgerState(spent, reserved, data.get("stopped") is True)

    def _write(self, state: LedgerState) -> None:
        atomic_write_text(self.path, finite_json({"spent": state.spent, "reserved": state.reserved,
                                                   "stopped": state.stopped}, self.path), None)

    def try_reserve(self, amount: float, limit: float) -> Reservation:
        with self._lock:
            state = self._read()
            verdict = state.decide(amount, limit)
            if verdict != "wait":
                self._write(state)
            return verdict

    def settle(self, reserved: float, actual: float) -> None:
        with self._lock:
            state = self._read()
            state.settle(reserved, actual)
            self._write(state)

    def state(self) -> LedgerState:
        with self._lock:
            return self._read()


class Budget:
    """Reservations against `limit` dollars in `ledger`, for one process's engine."""

    def __init__(self, limit: float, ledger: Ledger, wait_limit: float = 600.0) -> None:
        self.limit = limit
        self.ledger = ledger
        self.wait_limit = wait_limit
        """A reservation that cannot be placed for this long (a worker died holding reservations)
        counts as the budget reached."""
        self._settled: asyncio.Event | None = None

    @classmethod
    def open(cls, limit: float, shared: str | None, request_timeout: float) -> Budget:
        ledger: Ledger = FileLedger(Path(shared)) if shared else LocalLedger()
        return cls(limit, ledger, wait_limit=2 * request_timeout + 10 if request_timeout > 0 else 600.0)

    async def reserve(self, amount: float) -> bool:
        """Place a reservation of `amount` dollars (True), waiting while calls in flight hold what it
        needs; False once the budget is reached."""
        deadline = time.monotonic() + self.wait_limit
        while True:
            verdict = self.ledger.try_reserve(amount, self.limit)
            if verdict != "wait":
                return verdict == "ok"
            if time.monotonic() > deadline:
                return False
            if self._settled is None:
                self._settled = asyncio.Event()
            self._settled.clear()
            try:
                await asyncio.wait_for(self._settled.wait(), POLL_SECONDS)
            except asyncio.TimeoutError:
                pass

    def settle(self, reserved: float, actual: float) -> None:
        """The call is over: its reservation becomes what it really cost (0 when it failed)."""
        self.ledger.settle(reserved, actual)
        if self._settled is not None:
            self._settled.set()

    def spent(self) -> float:
        return self.ledger.state().spent
