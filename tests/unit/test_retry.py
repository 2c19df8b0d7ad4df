"""The retry policy of one call (llm/retry.py): what is asked again, how long it waits, when it gives
up and what it says then. The breaker's side is in test_breaker.py and test_dead_endpoint.py."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_evalbench.base.errors import LLMError
from pytest_evalbench.llm import retry
from pytest_evalbench.llm.cache import ResponseCache
from pytest_evalbench.llm.costs import PriceTable
from pytest_evalbench.llm.engine import Engine, EngineSettings
from pytest_evalbench.llm.types import Endpoint
from pytest_evalbench.testing import FakeLLMServer, Reply, sequence


def call(tmp_path: Path, *replies: Reply | str, **settings: Any) -> tuple[Engine, list[float], str]:
    """One completion against a server answering `replies` in order: the engine, the arrival time of
    each request and the answer (or the error's text)."""
    arrivals: list[float] = []
    answer = sequence(*replies)

    def respond(request: dict[str, Any]) -> Any:
        arrivals.append(time.monotonic())
        return answer(request)

    with FakeLLMServer(respond) as server:
        engine = Engine(EngineSettings(**{"backoff_base": 0.05, "backoff_cap": 0.5, **settings}),
                        ResponseCache(tmp_path, "off"), PriceTable())
        endpoint = Endpoint(model="m", base_url=server.base_url, api_key="k")
        try:
            completion = engine.run(engine.complete(endpoint, [{"role": "user", "content": "q"}], role="judge",
                                                    phase="judge", sample=0))
            outcome = completion.content or ""
        except LLMError as error:
            outcome = str(error)
        finally:
            engine.close()
    return engine, arrivals, outcome


def gaps(arrivals: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(arrivals)]


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_a_rejected_request_fails_at_once(tmp_path: Path, status: int) -> None:
    engine, arrivals, outcome = call(tmp_path, Reply(status=status, content="no"), "ok")
    assert len(arrivals) == 1
    assert f"request rejected: HTTP {status}" in outcome and "attempts" not in outcome
    assert (engine.stats.retries, engine.stats.failures["request rejected"]) == (0, 1)


def test_failures_are_retried_up_to_max_attempts_with_growing_backoff(tmp_path: Path) -> None:
    engine, arrivals, outcome = call(tmp_path, Reply(status=500, content="boom"), max_attempts=4)
    assert len(arrivals) == 4
    assert "server error" in outcome and "(after 4 attempts, " in outcome
    assert (engine.stats.retries, engine.stats.failures["server error"]) == (3, 4)
    # backoff k is drawn from [base x 2^k / 2, base x 2^k]: 0.025-0.05, 0.05-0.1, 0.1-0.2 s
    assert [gap >= low for gap, low in zip(gaps(arrivals), (0.025, 0.05, 0.1))] == [True] * 3


def test_a_failure_then_an_answer(tmp_path: Path) -> None:
    engine, arrivals, outcome = call(tmp_path, Reply(status=503), Reply(raw_body=b"<html>"), "fine", max_attempts=3)
    assert (outcome, len(arrivals), engine.stats.retries) == ("fine", 3, 2)
    assert (engine.stats.failures["server error"], engine.stats.failures["bad response"]) == (1, 1)


def test_a_failures_retry_after_is_honoured_and_capped(tmp_path: Path) -> None:
    _, arrivals, outcome = call(tmp_path, Reply(status=503, headers={"Retry-After": "0.4"}), "ok", backoff_cap=5.0)
    assert outcome == "ok" and gaps(arrivals)[0] >= 0.4
    _, arrivals, outcome = call(tmp_path, Reply(status=503, headers={"Retry-After": "60"}), "ok", backoff_cap=0.2)
    assert outcome == "ok" and gaps(arrivals)[0] < 5  # the cap, not the minute asked


def test_the_retry_budget_stops_a_failing_call_before_a_backoff_past_it(tmp_path: Path) -> None:
    started = time.monotonic()
    engine, arrivals, outcome = call(tmp_path, Reply(status=503, headers={"Retry-After": "3"}), max_attempts=5,
                                     backoff_cap=5.0, max_retry_seconds=1.0)
    assert time.monotonic() - started < 2.5  # the 3 s backoff was never slept
    assert len(arrivals) == 1 and engine.stats.retries == 0
    assert outcome.endswith("(gave up after 1 attempts: retry budget 1s exhausted)")


def test_429s_are_not_attempts_and_back_off_growing(tmp_path: Path) -> None:
    engine, arrivals, outcome = call(tmp_path, *[Reply(status=429)] * 5, "paced", max_attempts=1)
    assert (outcome, len(arrivals)) == ("paced", 6)
    assert (engine.stats.rate_limited, engine.stats.retries, sum(engine.stats.failures.values())) == (5, 0, 0)
    # the k-th 429 waits min(cap, 0.05 x 2^(k-1)) x [0.5, 1] s (the shared limits may add to it)
    assert [gap >= min(0.5, 0.05 * 2 ** k) / 2 for k, gap in enumerate(gaps(arrivals))] == [True] * 5


def test_429s_past_the_retry_budget_are_an_error_with_the_reason(tmp_path: Path) -> None:
    engine, arrivals, outcome = call(tmp_path, Reply(status=429, headers={"retry-after-ms": "300"}), max_attempts=1,
                                     max_retry_seconds=1.0)
    assert 2 <= len(arrivals) <= 4 and engine.stats.rate_limited == len(arrivals)
    assert [gap >= 0.3 for gap in gaps(arrivals)] == [True] * (len(arrivals) - 1)  # Retry-After honoured
    assert "rate limited: HTTP 429" in outcome
    assert f"and {len(arrivals)} answers 429: retry budget 1s exhausted)" in outcome


def test_tenacity_runs_only_the_calls_whose_first_attempt_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[object] = []

    class Counted(retry.AsyncRetrying):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            built.append(self)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(retry, "AsyncRetrying", Counted)
    engine, arrivals, outcome = call(tmp_path, "at once")
    assert (outcome, len(arrivals), engine.stats.retries, len(built)) == ("at once", 1, 0, 0)
    engine, arrivals, outcome = call(tmp_path / "again", Reply(status=503), Reply(status=500), "fine", max_attempts=3)
    assert (outcome, len(arrivals), engine.stats.retries, len(built)) == ("fine", 3, 2, 1)
    engine, arrivals, outcome = call(tmp_path / "rejected", Reply(status=400, content="no"), "ok")
    assert len(arrivals) == 1 and "request rejected: HTTP 400" in outcome and len(built) == 2
