"""Attempts of one request: the no-key check, a circuit breaker per endpoint, classification of failures,
backoff (the server's Retry-After when it sends one) and the retry budget in seconds. Each attempt goes
through the limits (limits.py) and is sent by the transport. A call's first attempt is sent directly
(most are answered, and building tenacity per call cost more than the rest of this layer); when it
fails, tenacity's `AsyncRetrying` takes over from that failure with the policy's callables (`_Call`).

A 429 is not a failed attempt: the provider is pacing us (shared_limits.py slows every process), so the
call is asked again until its retry budget (`--evalbench-retry-budget`, seconds from the call's start) is
spent; only then is it an error, "still rate limited". `max_attempts` counts the other failures only.
A flex request the provider refuses at peak (429 "resource unavailable") is paced the same way.

The circuit breaker makes an endpoint that keeps failing fail the rest of the run at once, so failing
items cost no more than answered ones. It is our own code: pybreaker, aiobreaker and purgatory count one
function's failures and half-open after a timeout, where this one counts refused connections per URL and
retried server errors per model, stays open for the run and wakes the backoffs sleeping on it:

- a failed attempt counts when it is a connection failure, or a server error (HTTP 5xx, 408, 409)
  answered to a retry: the endpoint still failed after a backoff (a call's first attempt answered 5xx
  neither counts nor resets, so a burst of concurrent first attempts refused by an overloaded server
  proves nothing alone); any answer resets the count (a 429, a timeout or a 4xx neither counts nor
  resets it);
- connection failures are counted per endpoint (base URL), server errors per endpoint and model (one
  broken model does not stop the others served by the same URL);
- the circuit opens at K counted failures in a row, K = 2 x max_attempts (10 by default);
- an open circuit stays open for the rest of the process: every later call to that endpoint fails
  without sending anything (also an attempt that was waiting for its slot when it opened), and calls
  sleeping in a retry backoff for it wake at once (`pause`). A circuit opened by refused connections
  raises exactly the refusal that opened it (so a dead endpoint is one error group in the summary); one
  opened by server errors raises `LLMError("endpoint down: <the failure>")`. Its rows are errors, the
  run exits 7 and last_run.json names the reason.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception

from pytest_evalbench.base.errors import EvalbenchError, LLMError
from pytest_evalbench.base.safe_text import SECRETS
from pytest_evalbench.llm.limits import Limits
from pytest_evalbench.llm.transport import Failure, Transport, classify
from pytest_evalbench.llm.types import Completion, Endpoint, EngineSettings, EngineStats


class Refused(Exception):
    """An attempt failed (`_Call.last` says how)."""


class Retrier:
    """Fetches one answer with bounded retries; an endpoint that kept failing is failed at once
    (`Breaker` has the rule)."""

    def __init__(self, settings: EngineSettings, stats: EngineStats, limits: Limits,
                 transport: Callable[[], Transport]) -> None:
        self.settings = settings
        self.stats = stats
        self.limits = limits
        self._transport = transport
        """The engine's transport, built at the first request (a replayed run never loads a client)."""
        self.breaker = Breaker(2 * settings.max_attempts)

    async def fetch(self, endpoint: Endpoint, body: dict[str, Any], role: str, data: bytes) -> Completion:
        if endpoint.provider != "local" and not endpoint.api_key and endpoint.base_url is None:
            raise LLMError("no API key", f"set {endpoint.key_source} (or api_key_env in benchmark.yaml), "
                           "or use --evalbench-cache=replay with a recorded cache", role=role, model=endpoint.model)
        call = _Call(self, endpoint, role)
        try:  # most calls are answered at once: tenacity is built only for a call that failed
            return await call.attempt(body, data)
        except Refused:
            pass
        retrying = AsyncRetrying(retry=retry_if_exception(call.asked_again), wait=call.wait, stop=call.stop,
                                 before_sleep=call.before_sleep, sleep=call.sleep, reraise=True)
        try:
            return await retrying(call.again, body, data)
        except Refused:
            raise call.error() from None

    async def send(self, endpoint: Endpoint, body: dict[str, Any], role: str, data: bytes,
                   deadline: float | None = None) -> Completion | Failure:
        """One attempt through the limits and the transport: the answer, or what failed. `deadline`
        (monotonic): the end of the call's retry budget, which no pacing may wait past."""
        async with self.limits.admission(endpoint) as admitted:
            try:
                await admitted.admit(body, data, role, deadline)
                self.breaker.check(endpoint.identity, role, endpoint.model)  # it may have opened meanwhile
                headers: dict[str, str] = {}
                completion = await self._transport().complete(endpoint, body, headers, data=data)
                admitted.answered(completion, headers)
                return completion
            except (asyncio.CancelledError, EvalbenchError):
                raise
            except Exception as exc:
                failure = classify(exc, endpoint.address)  # a connection failure names scheme, host and port
                admitted.refused(failure)
                return failure


class _Call:
    """One call's attempts, and the callables tenacity runs them with. Failed attempts and 429s are
    counted apart: `max_attempts` bounds the first, the retry budget both."""

    def __init__(self, retrier: Retrier, endpoint: Endpoint, role: str) -> None:
        self.retrier, self.settings, self.endpoint, self.role = retrier, retrier.settings, endpoint, role
        self.started = time.monotonic()
        self.failed = self.limited = 0
        self.last = Failure("", "", retryable=False)
        """The last attempt's failure, its message redacted."""
        self.paced = False
        """The last failure was a 429."""
        self.first_failed = True
        """`again` has still to hand tenacity the first attempt's failure."""

    async def attempt(self, body: dict[str, Any], data: bytes) -> Completion:
        """One attempt unless the endpoint's circuit is open; a failure is counted (statistics, breaker)."""
        breaker, ident, model = self.retrier.breaker, self.endpoint.identity, self.endpoint.model
        breaker.check(ident, self.role, model)
        result = await self.retrier.send(self.endpoint, body, self.role, data,
                                         self.started + self.settings.max_retry_seconds)
        if isinstance(result, Completion):
            breaker.answered(ident, model)
            return result
        self.last = failure = replace(result, message=SECRETS.redact(result.message))
        self.paced = failure.category == "rate limited"
        if self.paced:
            self.limited += 1
            self.retrier.stats.rate_limited += 1
            raise Refused
        self.failed += 1
        self.retrier.stats.failures[failure.category] += 1
        if failure.connection or failure.category == "server error":
            breaker.failed(ident, model, failure.message, connection=failure.connection, retry=self.failed > 1,
                           category=failure.category)
            breaker.check(ident, self.role, model)
        raise Refused

    async def again(self, body: dict[str, Any], data: bytes) -> Completion:
        """tenacity's attempts after a failed first one: its first is that failure (the policy decides
        on it as it would have), the others are sent."""
        if self.first_failed:
            self.first_failed = False
            raise Refused
        return await self.attempt(body, data)

    def asked_again(self, error: BaseException) -> bool:
        """A 429 or a retryable failure (an open circuit or a cancelled call: never)."""
        return isinstance(error, Refused) and (self.paced or self.last.retryable)

    def wait(self, state: RetryCallState) -> float:
        """A 429: the server's Retry-After, or a jittered backoff growing with this call's 429s if longer.
        A failure: its Retry-After (capped), else a jittered exponential backoff."""
        cap, retry_after = self.settings.backoff_cap, self.last.retry_after
        if self.paced:
            return max(retry_after or 0.0, min(cap, 0.05 * 2 ** min(self.limited - 1, 20)) * random.uniform(0.5, 1.0))
        if retry_after is not None:
            return min(retry_after, cap) + random.uniform(0, 0.05)
        ceiling = min(cap, self.settings.backoff_base * (2 ** (self.failed - 1)))
        return random.uniform(ceiling / 2, ceiling)

    def stop(self, state: RetryCallState) -> bool:
        """After `max_attempts` failures, or when the next attempt would start past the retry budget."""
        return ((not self.paced and self.failed >= self.settings.max_attempts)
                or time.monotonic() - self.started + state.upcoming_sleep > self.settings.max_retry_seconds)

    def before_sleep(self, state: RetryCallState) -> None:
        if not self.paced:  # a 429 is asked again, not retried
            self.retrier.stats.retries += 1

    async def sleep(self, seconds: float) -> None:
        """A failure's backoff ends when the endpoint's circuit opens meanwhile (`Breaker.pause`); a 429's
        wait is the provider's pacing, slept whole."""
        if self.paced:
            await asyncio.sleep(seconds)
        else:
            await self.retrier.breaker.pause(self.endpoint.identity, self.endpoint.model, seconds)

    def error(self) -> LLMError:
        """The call's error: its last failure, and why no attempt followed."""
        failure, elapsed, budget = self.last, time.monotonic() - self.started, self.settings.max_retry_seconds
        if self.paced:
            why = (f" (still rate limited after {elapsed:.1f}s and {self.limited} answers 429: retry budget "
                   f"{budget:.0f}s exhausted)")
        elif not failure.retryable or self.failed >= self.settings.max_attempts:
            why = f" (after {self.failed} attempts, {elapsed:.1f}s)" if self.failed > 1 else ""
        else:
            why = f" (gave up after {self.failed} attempts: retry budget {budget:.0f}s exhausted)"
        return LLMError(failure.category, failure.message + why, role=self.role, model=self.endpoint.model)


@dataclass
class _Streak:
    failures: int = 0
    category: str = ""
    reason: str = ""
    open: bool = False


class Breaker:
    """Consecutive server/connection failures per endpoint identity, and the circuits they opened (our
    own: a breaker library counts one function's failures; the module docstring says why that does not fit)."""

    def __init__(self, threshold: int) -> None:
        self.threshold = max(1, threshold)
        self._streaks: dict[str, _Streak] = {}
        self._sleepers: dict[str, set[asyncio.Future[None]]] = {}
        """Circuit key -> the backoffs sleeping on it (woken when it opens)."""

    def check(self, ident: str, role: str, model: str) -> None:
        """Raise the endpoint-down error when the circuit of this endpoint (or of this model on it) is open."""
        for key in (ident, f"{ident} {model}"):
            streak = self._streaks.get(key)
            if streak is not None and streak.open and key == ident:  # refused connections: the same error
                raise LLMError(streak.category, streak.reason, role=role, model=model)
            if streak is not None and streak.open:
                raise LLMError(f"endpoint down: {streak.reason}",
                               f"circuit open after {self.threshold} failures in a row: later calls send no request",
                               role=role, model=model)

    def answered(self, ident: str, model: str) -> None:
        """The endpoint answered: a closed circuit's count starts again (an open one stays open)."""
        for key in (ident, f"{ident} {model}"):
            streak = self._streaks.get(key)
            if streak is not None and not streak.open:
                del self._streaks[key]

    def failed(self, ident: str, model: str, reason: str, *, connection: bool, retry: bool,
               category: str = "connection error") -> None:
        """A server error or connection failure (`retry`: the attempt was not the call's first);
        opens the circuit at K counted ones in a row."""
        if not (connection or retry):
            return
        streak = self._streaks.setdefault(ident if connection else f"{ident} {model}", _Streak())
        if streak.open:
            return
        streak.failures += 1
        streak.category, streak.reason = category, reason
        if streak.failures >= self.threshold:
            streak.open = True
            for sleeper in self._sleepers.pop(ident if connection else f"{ident} {model}", ()):
                if not sleeper.done():
                    sleeper.set_result(None)

    async def pause(self, ident: str, model: str, delay: float) -> None:
        """Sleep a retry's backoff, cut short when a circuit of this endpoint (or model) opens meanwhile:
        the caller's next `check` then fails at once instead of after the rest of the backoff.
        Called on the engine's one event loop, like `failed`."""
        keys = (ident, f"{ident} {model}")
        sleeper: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._sleepers.setdefault(key, set()).add(sleeper)
        try:
            await asyncio.wait({sleeper}, timeout=delay)
        finally:
            sleeper.cancel()
            for key in keys:
                waiting = self._sleepers.get(key)
                if waiting is not None:
                    waiting.discard(sleeper)
                    if not waiting:
                        del self._sleepers[key]

