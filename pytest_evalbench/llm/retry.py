"""Attempts of one request: the no-key check, a circuit breaker per endpoint (breaker.py), classification of
failures, backoff (the server's Retry-After when it sends one) and the retry budget in seconds. Each
attempt goes through the limits (limits.py) and is sent by the transport; tenacity's `AsyncRetrying`
runs the attempts with the policy's callables (`_Call`).

A 429 is not a failed attempt: the provider is pacing us (shared_limits.py slows every process),
so the call is asked again until its retry budget (`--evalbench-retry-budget`, seconds from the
call's start) is spent; only then is it an error, "still rate limited". `max_attempts` counts the
other failures only."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception

from pytest_evalbench.errors import EvalbenchError, LLMError
from pytest_evalbench.llm.breaker import Breaker
from pytest_evalbench.llm.failures import Failure, classify
from pytest_evalbench.llm.limits import Limits
from pytest_evalbench.llm.transport import Transport
from pytest_evalbench.llm.types import Completion, Endpoint, EngineSettings, EngineStats
from pytest_evalbench.redaction import SECRETS


class Refused(Exception):
    """An attempt failed (`_Call.last` says how)."""


class Retrier:
    """Fetches one answer with bounded retries; an endpoint that kept failing is failed at once
    (breaker.py has the rule)."""

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
        retrying = AsyncRetrying(retry=retry_if_exception(call.asked_again), wait=call.wait, stop=call.stop,
                                 before_sleep=call.before_sleep, sleep=call.sleep, reraise=True)
        try:
            return await retrying(call.attempt, body, data)
        except Refused:
            raise call.error() from None

    async def send(self, endpoint: Endpoint, body: dict[str, Any], role: str, data: bytes) -> Completion | Failure:
        """One attempt through the limits and the transport: the answer, or what failed."""
        async with self.limits.admission(endpoint) as admitted:
            try:
                await admitted.admit(body, data, role)
                headers: dict[str, str] = {}
                completion = await self._transport().complete(endpoint, body, headers, data=data)
                admitted.answered(completion, headers)
                return completion
            except (asyncio.CancelledError, EvalbenchError):
                raise
            except Exception as exc:
                failure = classify(exc)
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

    async def attempt(self, body: dict[str, Any], data: bytes) -> Completion:
        """One attempt unless the endpoint's circuit is open; a failure is counted (statistics, breaker)."""
        breaker, ident, model = self.retrier.breaker, self.endpoint.identity, self.endpoint.model
        breaker.check(ident, self.role, model)
        result = await self.retrier.send(self.endpoint, body, self.role, data)
        if isinstance(result, Completion):
            breaker.answered(ident, model)
            return result
        self.last = failure = replace(result, message=SECRETS.redact(result.message))
        self.paced = failure.kind == "rate limited"
        if self.paced:
            self.limited += 1
            self.retrier.stats.rate_limited += 1
            raise Refused
        self.failed += 1
        self.retrier.stats.failures[failure.kind] += 1
        if failure.connection or failure.kind == "server error":
            breaker.failed(ident, model, failure.message, connection=failure.connection, retry=self.failed > 1,
                           kind=failure.kind)
            breaker.check(ident, self.role, model)
        raise Refused

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
        """A failure's backoff ends when the endpoint's circuit opens meanwhile (breaker.py); a 429's
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
        return LLMError(failure.kind, failure.message + why, role=self.role, model=self.endpoint.model)
