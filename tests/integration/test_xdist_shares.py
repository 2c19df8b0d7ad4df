"""xdist that helps: fixed contiguous shares, whole-share prefetch, the concurrency split."""

from __future__ import annotations

import json
import re

import pytest
from helpers import scenario, script, write_benchmark

from pytest_evalbench.testing import FakeLLMServer

ROWS = [scenario(f"m01_s{i:03d}_v01", "m01") for i in range(1, 13)]


def distinct_user(request: dict) -> str:
    return "Message: I am " + re.search(r"persona of (\w+)", json.dumps(request)).group(1)


def test_each_worker_runs_one_contiguous_share_and_prefetches_all_of_it(pytester: pytest.Pytester,
                                                                         bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1})
    bench_env.set_responder(script(True, user=distinct_user))
    bench_env.latency = 0.3
    result = pytester.runpytest("--benchmark=demo", "-n", "2", "-v", "--evalbench-cache=off",
                                "--evalbench-concurrency=8")
    result.assert_outcomes(passed=12)
    # 8 in flight in total (4 per worker): more than the 2 items per worker a next-item prefetch allows
    assert 4 < bench_env.peak_concurrency <= 8
    ran_on = {m.group(2): m.group(1) for m in re.finditer(r"\[(gw\d)\] \[\s*\d+%\] PASSED \S+::(m01_s\d+_v01)",
                                                          result.stdout.str())}
    assert len(ran_on) == 12
    assert [ran_on[r["id"]] for r in ROWS] == ["gw0"] * 6 + ["gw1"] * 6
    with_xdist = len(bench_env.requests)
    bench_env.reset()
    pytester.runpytest("--benchmark=demo", "--evalbench-cache=off").assert_outcomes(passed=12)
    assert len(bench_env.requests) == with_xdist == 12 * 3


def test_other_dist_modes_keep_xdist_scheduling(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=ROWS[:4], generation={"turns": 1})
    bench_env.set_responder(script(True, user=distinct_user))
    result = pytester.runpytest("--benchmark=demo", "-n", "2", "--dist", "loadfile", "-v")
    result.assert_outcomes(passed=4)
    assert len(set(re.findall(r"\[(gw\d)\] \[", result.stdout.str()))) == 1  # one file, one worker (either)


def test_shares_also_when_xdist_is_named_with_p_and_autoload_is_off(
        pytester: pytest.Pytester, bench_env: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """`PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 pytest -p xdist.plugin` registers xdist as "xdist.plugin"."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1})
    bench_env.set_responder(script(True, user=distinct_user))
    bench_env.latency = 0.3
    result = pytester.runpytest_subprocess("-p", "pytest_evalbench.plugin", "-p", "xdist.plugin", "--benchmark=demo",
                                           "-n", "2", "--evalbench-cache=off", "--evalbench-concurrency=8")
    result.assert_outcomes(passed=12)
    assert 4 < bench_env.peak_concurrency <= 8  # whole shares prefetched, not one item per worker
