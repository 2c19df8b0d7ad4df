"""Admission of one request: what it waits for before it is sent, and what it gives back after.

In order: the endpoint's adaptive concurrency (rate_limit.py), a slot of the global priority
semaphore (at most `concurrency` requests in flight, the most urgent waiter first), the shared
request rate, the token rate, the endpoint's start slot in the machine-wide view of its limits
(shared_limits.py), and the budget's reservation of the call's worst-case price (budget.py).
After the answer (or the failure) the reservation is settled at the real price, the token
estimate corrected, and what the answer says about the endpoint's limits (429, Retry-After,
x-ratelimit-* headers) goes into the shared view, pacing every process.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from pytest_evalbench.errors import BudgetExhausted
from pytest_evalbench.llm.budget import Budget, worst_case_tokens
from pytest_evalbench.llm.failures import Failure
from pytest_evalbench.llm.pipelines import call_priority
from pytest_evalbench.llm.pricing import PriceTable
from pytest_evalbench.llm.rate_headers import parse
from pytest_evalbench.llm.rate_limit import AdaptiveConcurrency, SharedRateLimit, TokenRate
from pytest_evalbench.llm.shared_limits import SharedLimits, endpoint_key
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

    async def admit(self, body: dict[str, Any], data: bytes, role: str) -> None:
        """Wait for the request and token rates and reserve the worst-case price, then count the request."""
        limits, endpoint = self.limits, self.endpoint
        if limits.rate is not None:
            await limits.rate.wait()
        if limits.tokens is not None:
            self.estimate = estimate_tokens(body)
            await limits.tokens.wait(self.estimate)
        delay = limits.shared.reserve(limits.key(endpoint)) - time.time()
        if delay > 0:  # paced: the endpoint's next start slot, shared by every process
            await asyncio.sleep(delay)
        if limits.budget is not None:
            # the call's worst-case price is reserved before it is sent (see budget.py)
            worst = limits.prices.quote(endpoint.model, *worst_case_tokens(body, data), local=self.local)
            if not await limits.budget.reserve(worst):
                raise BudgetExhausted(limits.budget.spent(), limits.budget.limit, role, endpoint.model, worst)
            self.reserved = worst
        limits.stats.peak_in_flight = max(limits.stats.peak_in_flight, limits._in_flight)
        limits.stats.requests += 1

    def answered(self, completion: Completion, headers: dict[str, str]) -> None:
        """The real price (settled on exit), the real tokens, and the hold-off the rate headers ask for."""
        limits = self.limits
        self.actual = limits.prices.quote(self.endpoint.model, completion.input_tokens, completion.output_tokens,
                                          local=self.local)
        if limits.tokens is not None:
            limits.tokens.correct(self.estimate, completion.input_tokens + completion.output_tokens)
        limits.shared.learn(limits.key(self.endpoint), parse(headers), limited=False,
                            tokens=completion.input_tokens + completion.output_tokens)

    def refused(self, failure: Failure) -> None:
        """A rate-limited answer cuts the endpoint's concurrency (on exit) and paces it for every
        process; any error's headers may say its windows are used up."""
        self.limited = failure.kind == "rate limited"
        if self.limited or failure.headers:
            self.limits.shared.learn(self.limits.key(self.endpoint), parse(failure.headers), limited=self.limited)
