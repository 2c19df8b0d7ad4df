"""A persistently failing endpoint: the circuit breaker (llm/breaker.py) fails the rest of the run fast."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest
from helpers import read_json, scenario, script, write_benchmark

from pytest_evalbench.gate.decision import EXIT_INCOMPLETE
from pytest_evalbench.testing import FakeLLMServer, Reply

pytestmark = pytest.mark.usefixtures("quick_backoff")  # in-process runs retry after short backoffs

OPTS = ["--evalbench-max-attempts=3", "--evalbench-cache=off"]  # K = 2 x 3 = 6


@pytest.mark.slow
def test_dead_endpoint_opens_the_circuit_and_the_rest_fails_fast(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                                   transport_name: str) -> None:
    rows = [scenario(f"m01_s{i:03d}_v01", "m01") for i in range(1, 31)]
    bench = write_benchmark(pytester.path, scenarios=rows)
    bench_env.set_responder(lambda request: Reply(status=500, content="internal error"))
    # four rows at a time: how many retries are in flight when the circuit opens does not depend on load
    result = pytester.runpytest("--benchmark=demo", *OPTS, "--evalbench-concurrency=4",
                                f"--evalbench-transport={transport_name}")
    result.assert_outcomes(errors=30)
    assert result.ret == EXIT_INCOMPLETE
    # without the breaker each of the 30 first calls pays its 3 attempts (90 requests); with it, the 30
    # first attempts (which do not count), the 6 retries that open it and at most the 3 others in flight
    # then: a request still waiting for its slot when the circuit opens is not sent
    assert len(bench_env.requests) <= 39
    result.stdout.fnmatch_lines(["*evalbench endpoint down: HTTP 500*circuit open after 6 failures in a row*"])
    result.stdout.no_fnmatch_line("*Traceback*")
    last = read_json(bench / "last_run.json")
    assert last["status"] == "incomplete"
    assert any("endpoint down: HTTP 500" in reason for reason in last["incomplete"]), last["incomplete"]


def test_endpoint_recovering_before_k_failures_does_not_open_it(pytester: pytest.Pytester,
                                                                 bench_env: FakeLLMServer) -> None:
    rows = [scenario(f"m01_s{i:03d}_v01", "m01") for i in range(1, 5)]
    write_benchmark(pytester.path, scenarios=rows)
    answered = script(True)
    counter = itertools.count()
    lock = threading.Lock()

    def flaky(request: dict[str, Any]) -> Any:
        with lock:
            n = next(counter)
        return Reply(status=503, content="overloaded") if n < 5 else answered(request)  # K - 1 = 5 failures

    bench_env.set_responder(flaky)
    result = pytester.runpytest("--benchmark=demo", *OPTS)
    result.assert_outcomes(passed=4)
    assert result.ret == 0
    result.stdout.no_fnmatch_line("*endpoint down*")
