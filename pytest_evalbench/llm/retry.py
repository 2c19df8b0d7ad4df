"""Attempts of one request: the no-key check, a circuit breaker per endpoint (breaker.py), classification of
failures, backoff (the server's Retry-After when it sends one) and the retry budget in seconds.
Each attempt goes through the limits (limits.py) and is sent by the transport.

A 429 is not a failed attempt: the provider is pacing us (shared_limits.py slows every process),
so the call is asked again until its retry budget (`--evalbench-retry-budget`, seconds from the
call's start) is spent; only then is it an error, "still rate limited". `max_attempts` counts the
other failures only."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

from ..errors import EvalbenchError, LLMError
from ..redaction import SECRETS
from .breaker import Breaker
from .failures import Failure, classify
from .limits import Limits
from .transport import Transport
from .types import Completion, Endpoint, EngineSettings, EngineStats


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
        settings = self.settings
        started = time.monotonic()
        ident = endpoint.identity
        attempt = 0  # attempts that failed for real: a 429 is the provider pacing us, not a failure
        limited = 0
        while True:
            if endpoint.provider != "local" and not endpoint.api_key and endpoint.base_url is None:
                raise LLMError("no API key", f"set {endpoint.key_source} (or api_key_env in benchmark.yaml), "
                               "or use --evalbench-cache=replay with a recorded cache", role=role,
                               model=endpoint.model)
            self.breaker.check(ident, role, endpoint.model)
            failure = await self._attempt(endpoint, body, role, data)
            if isinstance(failure, Completion):
                self.breaker.answered(ident, endpoint.model)
                return failure
            message = SECRETS.redact(failure.message)
            elapsed = time.monotonic() - started
            if failure.kind == "rate limited":
                limited += 1
                self.stats.rate_limited += 1
                await self._paced_retry(limited, failure, elapsed, message, role, endpoint)
                continue
            self.stats.failures[failure.kind] += 1
            if failure.connection or failure.kind == "server error":
                self.breaker.failed(ident, endpoint.model, message, connection=failure.connection, retry=attempt > 0,
                                    kind=failure.kind)
                self.breaker.check(ident, role, endpoint.model)
            if not failure.retryable or attempt + 1 >= settings.max_attempts:
                raise LLMError(failure.kind, message
                               + (f" (after {attempt + 1} attempts, {elapsed:.1f}s)" if attempt else ""),
                               role=role, model=endpoint.model)
            delay = self._backoff(attempt, failure)
            if elapsed + delay > settings.max_retry_seconds:
                raise LLMError(failure.kind, message
                               + f" (gave up after {attempt + 1} attempts: retry budget "
                               f"{settings.max_retry_seconds:.0f}s exhausted)", role=role, model=endpoint.model)
            self.stats.retries += 1
            attempt += 1
            await self.breaker.pause(ident, endpoint.model, delay)

    async def _paced_retry(self, limited: int, failure: Failure, elapsed: float, message: str, role: str,
                           endpoint: Endpoint) -> None:
        """A 429: asked again (the shared limits already hold every process for its Retry-After) until
        the call's retry budget is spent, with a backoff that grows with this call's 429s."""
        budget = self.settings.max_retry_seconds
        backoff = min(self.settings.backoff_cap, 0.05 * 2 ** min(limited - 1, 20)) * random.uniform(0.5, 1.0)
        delay = max(failure.retry_after or 0.0, backoff)
        if elapsed + delay > budget:
            raise LLMError("rate limited", message + f" (still rate limited after {elapsed:.1f}s and {limited} "
                           f"answers 429: retry budget {budget:.0f}s exhausted)", role=role, model=endpoint.model)
        await asyncio.sleep(delay)

    async def _attempt(self, endpoint: Endpoint, body: dict[str, Any], role: str, data: bytes
                       ) -> Completion | Failure:
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

    def _backoff(self, attempt: int, failure: Failure) -> float:
        if failure.retry_after is not None:
            return min(failure.retry_after, self.settings.backoff_cap) + random.uniform(0, 0.05)
        ceiling = min(self.settings.backoff_cap, self.settings.backoff_base * (2 ** attempt))
        return random.uniform(ceiling / 2, ceiling)
