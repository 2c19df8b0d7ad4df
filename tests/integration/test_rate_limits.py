"""An endpoint's rate limit, learned from its answers and shared by every xdist worker: every row
scored, few 429s, and a 429 is never a failed attempt."""

from __future__ import annotations

import json
import re
import time

import pytest
from helpers import JUDGE, read_json, scenario, script, write_benchmark

from pytest_evalbench.testing import FakeLLMServer, RateWindow, Reply, sequence

pytestmark = pytest.mark.usefixtures("quick_backoff")  # in-process runs retry after short backoffs

ROWS = [scenario(f"m01_s{i:03d}_v01", "m01") for i in range(1, 17)]


def distinct_user(request: dict) -> str:
    """A different user message per row, so no two rows share a request (nothing is deduplicated)."""
    return "Message: I am " + re.search(r"persona of (\w+)", json.dumps(request)).group(1)


@pytest.mark.slow
def test_workers_share_the_endpoints_limit(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1})
    bench_env.set_responder(script(True, user=distinct_user))
    bench_env.latency = 0.05
    bench_env.rate_window = RateWindow(480, burst=0.5)  # 8 a second, 4 at once; 48 calls
    started = time.monotonic()
    result = pytester.runpytest("--benchmark=demo", "-n", "2", "--evalbench-cache=off", "--evalbench-concurrency=16",
                                "--evalbench-max-attempts=2")
    wall = time.monotonic() - started
    result.assert_outcomes(passed=16)
    assert result.ret == 0
    calls = len(bench_env.requests)
    assert calls == 16 * 3
    # the first answers teach the limit: only the opening burst (16 in flight, 4 admitted) may be refused
    assert bench_env.rate_window.limited <= 16, bench_env.rate_window.limited
    assert wall < 30


def test_a_rate_limited_call_is_not_a_failed_attempt(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                     transport_name: str) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")])
    limited = Reply(status=429, headers={"retry-after-ms": "20"})
    judge = sequence(limited, limited, limited, limited, json.dumps({"justification": "ok", "present": True}))
    responder = script(True)
    bench_env.set_responder(lambda r: judge(r) if r.get("model") == JUDGE else responder(r))
    result = pytester.runpytest("--benchmark=demo", "--evalbench-cache=off", "--evalbench-max-attempts=2",
                                f"--evalbench-transport={transport_name}")
    result.assert_outcomes(passed=1)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*llm: * requests, 0 cache hits, 0 retries*"])  # four 429s, none a retry
    assert read_json(bench / "runs" / "tgt" / "scores.json")[0]["passed"] is True


def test_rate_limited_past_the_retry_budget_is_an_error_with_the_reason(pytester: pytest.Pytester,
                                                                        bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")])
    responder = script(True)
    bench_env.set_responder(lambda r: Reply(status=429, headers={"retry-after-ms": "100"}) if r.get("model") == JUDGE
                            else responder(r))
    result = pytester.runpytest("--benchmark=demo", "--evalbench-cache=off", "--evalbench-retry-budget=1",
                                "--evalbench-max-attempts=2")
    result.assert_outcomes(errors=1)
    assert result.ret == 7
    result.stdout.fnmatch_lines(["*rate limited*still rate limited after*answers 429: retry budget 1s exhausted*"])
    last = read_json(bench / "last_run.json")
    assert last["status"] == "incomplete" and "1 item rate limited" in last["incomplete"][0], last["incomplete"]
