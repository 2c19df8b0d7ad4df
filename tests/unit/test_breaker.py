"""The circuit breaker's rule (llm/breaker.py): K counted failures in a row open it."""

from __future__ import annotations

import pytest

from pytest_evalbench.base.errors import LLMError
from pytest_evalbench.llm.retry import Breaker

URL = "http://127.0.0.1:9/v1"


def is_open(breaker: Breaker, model: str) -> bool:
    """Whether a call to URL for `model` would be refused without a request."""
    try:
        breaker.check(URL, "judge", model)
    except LLMError:
        return True
    return False


def fail(breaker: Breaker, times: int, *, retry: bool = True, model: str = "m", connection: bool = False) -> None:
    for _ in range(times):
        breaker.failed(URL, model, "HTTP 500: boom", connection=connection, retry=retry)


def test_opens_after_k_failures_in_a_row_and_fails_fast() -> None:
    breaker = Breaker(threshold=4)
    fail(breaker, 3)
    breaker.check(URL, "judge", "m")  # K - 1: still closed
    fail(breaker, 1)
    with pytest.raises(LLMError) as raised:
        breaker.check(URL, "judge", "m")
    assert raised.value.category == "endpoint down: HTTP 500: boom"
    assert "circuit open after 4 failures in a row" in str(raised.value)
    breaker.answered(URL, "m")  # a late answer of a call in flight does not close it again
    assert is_open(breaker, "m")


def test_an_answer_before_k_resets_the_count() -> None:
    breaker = Breaker(threshold=4)
    for _ in range(5):
        fail(breaker, 3)
        breaker.answered(URL, "m")
    breaker.check(URL, "judge", "m")
    assert not is_open(breaker, "m")


def test_first_attempts_answered_5xx_neither_count_nor_reset() -> None:
    """A burst of concurrent first attempts answered 5xx is not evidence of a dead endpoint; failing
    retries (the endpoint still failed after a backoff) are. Refused connections always count."""
    breaker = Breaker(threshold=4)
    fail(breaker, 20, retry=False)
    assert not is_open(breaker, "m")
    fail(breaker, 3)
    fail(breaker, 5, retry=False)  # no reset either
    fail(breaker, 1)
    assert is_open(breaker, "m")
    refused = Breaker(threshold=4)
    fail(refused, 4, retry=False, connection=True)
    assert is_open(refused, "m")


def test_server_errors_count_per_model_connection_failures_per_endpoint() -> None:
    breaker = Breaker(threshold=2)
    fail(breaker, 2, model="broken")
    assert is_open(breaker, "broken") and not is_open(breaker, "fine")
    fail(breaker, 2, model="fine", connection=True)
    assert is_open(breaker, "other")
    with pytest.raises(LLMError) as raised:  # refused connections: the refusal itself, one error group
        breaker.check(URL, "target", "other")
    assert raised.value.category == "connection error" and "endpoint down" not in str(raised.value)


def test_a_backoff_wakes_when_its_circuit_opens_and_only_then() -> None:
    """Retries sleeping in a backoff for an endpoint whose circuit opens wake at once (a dead
    endpoint's items cost no more than answered ones); a backoff on another model sleeps it out."""
    import asyncio
    import time

    async def scenario() -> tuple[float, float, float]:
        breaker = Breaker(threshold=2)

        async def timed(model: str, delay: float) -> float:
            began = time.monotonic()
            await breaker.pause(URL, model, delay)
            return time.monotonic() - began

        same = asyncio.ensure_future(timed("m", 30.0))
        other = asyncio.ensure_future(timed("other", 0.3))
        alone = asyncio.ensure_future(timed("m", 0.2))
        await asyncio.sleep(0.05)
        await alone  # nothing opened: the whole backoff
        fail(breaker, 2)  # opens the circuit of model m
        woke = await asyncio.wait_for(same, 5.0)
        return woke, await other, await alone

    woke, other, alone = asyncio.run(scenario())
    assert woke < 1.0  # not the 30 s backoff
    assert other >= 0.29 and alone >= 0.19
