"""The LLM engine through the plugin: cache modes, keys, budget, pricing, usage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import JUDGE, METRICS, USER, read_json, scenario, script, write_benchmark

from conftest import SECRET
from pytest_evalbench.gate.decision import EXIT_INCOMPLETE
from pytest_evalbench.testing import FakeLLMServer

CALLS_PER_ITEM = 5  # 2 turns x (user + target) + judge


def cache_files(bench: Path) -> list[Path]:
    return sorted((bench / ".evalbench-cache").rglob("*.json"))


def test_cache_modes(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")])
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo", "--evalbench-cache=off").assert_outcomes(passed=1)
    assert cache_files(bench) == [] and len(bench_env.requests) == CALLS_PER_ITEM
    result = pytester.runpytest("--benchmark=demo", "--evalbench-cache=replay")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*evalbench cache miss:*no recorded response*--evalbench-cache=on*"])
    assert result.ret == EXIT_INCOMPLETE
    bench_env.reset()
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1)
    assert len(cache_files(bench)) == CALLS_PER_ITEM and len(bench_env.requests) == CALLS_PER_ITEM
    bench_env.reset()
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1)
    assert bench_env.requests == []
    bench_env.set_responder(script(False))
    pytester.runpytest("--benchmark=demo", "--evalbench-cache=refresh").assert_outcomes(failed=1)
    assert len(bench_env.requests) == CALLS_PER_ITEM
    bench_env.reset()
    pytester.runpytest("--benchmark=demo", "--evalbench-cache=replay").assert_outcomes(failed=1)
    assert bench_env.requests == []


def test_cache_key_follows_what_changes_the_output(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")])
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo")
    bench_env.reset()
    # the metric's examples (shown to the judge only) changed: only the judge call is new
    metrics = [dict(METRICS[0], examples=["A new example?"]), METRICS[1]]
    write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")], metrics=metrics)
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1)
    assert [r["model"] for r in bench_env.requests] == [JUDGE]
    bench_env.reset()
    # a new API key is not part of any key
    pytester.runpytest("--benchmark=demo", "--evalbench-cache=replay").assert_outcomes(passed=1)
    for path in cache_files(bench):
        text = path.read_text()
        assert SECRET not in text
        entry = json.loads(text)
        assert set(entry) == {"key", "request", "response", "digest", "version"}
        assert entry["request"]["endpoint"] == bench_env.base_url


@pytest.mark.slow
def test_parallel_workers_share_the_cache(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    rows = [scenario(f"m01_s{i:03d}_v01", "m01") for i in range(1, 13)]
    bench = write_benchmark(pytester.path, scenarios=rows)
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo", "-n", "2").assert_outcomes(passed=12)
    for path in cache_files(bench):
        json.loads(path.read_text())  # never half-written
    bench_env.reset()
    pytester.runpytest("--benchmark=demo", "-n", "2", "--evalbench-cache=replay").assert_outcomes(passed=12)
    assert bench_env.requests == []


def old_memo(payload: str) -> str:
    """A memo file as earlier versions wrote them in `.items/` and `.loads/`: a header, then its payload."""
    return json.dumps({"digest": "0" * 64, "key": "1" * 64, "version": 1}, sort_keys=True) + "\n" + payload


def test_memo_directories_of_earlier_versions_are_ignored(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    """`.items/` and `.loads/`, which earlier versions wrote in the cache directory, are neither read,
    written nor removed: collection takes its rows from scenarios.json, the cache replays every call,
    and the result files are the ones written without them (also under xdist)."""
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01"), scenario("m01_s002_v01", "m01")])
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=2)
    results = {p: p.read_bytes() for p in sorted((bench / "runs").rglob("*.json"))}
    cache = bench / ".evalbench-cache"
    planted_row = json.dumps(scenario("planted_row", "m01"))
    failing = {"benchmark": "demo", "target_id": "tgt", "status": "failed", "score": {"passed": False}}
    leftovers = {
        cache / ".loads" / f"{'a' * 32}.load": old_memo(json.dumps(
            {"rows": [["planted_row", "m01", "positive", [], planted_row]], "warnings": []})),
        cache / ".loads" / ".gitignore": "*\n",
        cache / ".items" / "ab" / f"ab{'0' * 62}.item": old_memo(json.dumps([["ab" + "0" * 62, "simulate", "user",
                                                                             USER, False, 1, 1, "0" * 64]])
                                                               + "\n" + json.dumps(failing)),
        cache / ".items" / "cd" / f"cd{'0' * 62}.item": "not a memo at all",
        cache / ".items" / "plugin-code": "f" * 64 + "\n",
        cache / ".items" / ".gitignore": "# item memos: valid only beside this cache's files\n*\n",
    }
    for path, text in leftovers.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    # ...and in an xdist worker (one: what it reads is the same with more)
    for args in (["--evalbench-cache=replay"], ["--evalbench-cache=on"], ["--evalbench-cache=replay", "-n", "1"]):
        bench_env.reset()
        result = pytester.runpytest("--benchmark=demo", "-v", *args)
        result.assert_outcomes(passed=2)
        result.stdout.no_fnmatch_line("*planted_row*")
        assert bench_env.requests == []
        assert {p: p.read_bytes() for p in sorted((bench / "runs").rglob("*.json"))} == results
        assert {p: p.read_text() for p in leftovers} == leftovers  # left as they were
    assert "planted_row" not in pytester.runpytest("--benchmark=demo", "--collect-only", "-q").stdout.str()


PRICED = {"pricing": {name: {"input_per_million": 1_000_000.0, "output_per_million": 0.0}
                      for name in ("sim-user", "sim-target", "sim-judge")}}


def test_pricing_and_cost_json(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")], spec=PRICED)
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo")
    cost = read_json(bench / "runs" / "tgt" / "cost.json")
    tokens = {r["model"]: 0 for r in bench_env.requests}
    assert cost["simulate"]["cost"] == pytest.approx(cost["simulate"]["input_tokens"], rel=1e-9)
    assert cost["evaluate"]["cost"] == pytest.approx(cost["evaluate"]["input_tokens"], rel=1e-9)
    assert tokens and cost["evaluate"]["input_tokens"] > 0
    result.stdout.fnmatch_lines(["*evaluate:judge*", "*simulate:user*"])
    result.stdout.no_fnmatch_line("*no price for*")
    # a cached rerun reports the same cost of producing the artifacts, spending nothing
    result = pytester.runpytest("--benchmark=demo", "--evalbench-cache=replay")
    assert read_json(bench / "runs" / "tgt" / "cost.json") == cost
    result.stdout.fnmatch_lines(["*$0.0000 spent this run*"])


def test_budget_stops_new_calls_and_marks_run_incomplete(pytester: pytest.Pytester,
                                                         bench_env: FakeLLMServer) -> None:
    rows = [scenario(f"m01_s{i:03d}_v01", "m01") for i in range(1, 7)]
    bench = write_benchmark(pytester.path, scenarios=rows, spec=PRICED)
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo", "--evalbench-max-cost=300", "--evalbench-concurrency=1")
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors", 0) >= 1 and outcomes.get("failed", 0) == 0
    assert result.ret == EXIT_INCOMPLETE
    result.stdout.fnmatch_lines(["*evalbench budget exhausted:*--evalbench-max-cost=$300.0000; the run is incomplete*",
                                 "*INCOMPLETE:*budget exhausted*"])
    status = read_json(bench / "last_run.json")
    assert status["status"] == "incomplete"
    assert status["llm"]["spent"] < 300 + 400  # at most the calls already in flight overshoot


def test_header_names_the_run(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")])
    result = pytester.runpytest("--benchmark=demo", "--collect-only", "--evalbench-concurrency=3")
    result.stdout.fnmatch_lines(["evalbench: benchmark=demo cache=on concurrency=3"])


@pytest.mark.slow
def test_rate_limit_holds_across_workers(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    import time

    rows = [scenario(f"m01_s{i:03d}_v01", "m01") for i in range(1, 5)]
    write_benchmark(pytester.path, scenarios=rows, generation={"turns": 1})
    stamps: list[float] = []

    def record(request: dict) -> object:
        stamps.append(time.monotonic())
        return script(True)(request)

    bench_env.set_responder(record)
    started = time.monotonic()
    pytester.runpytest("--benchmark=demo", "-n", "2", "--evalbench-rate-limit=300",
                       "--evalbench-cache=off").assert_outcomes(passed=4)
    # 300/min = one start per 0.2 s across both workers: the 12th request cannot start before 11
    # intervals after the run began, however arrivals jitter (exact spacing: unit test of the limiter)
    n = len(stamps)  # identical calls are made once per process, so fewer than 12
    assert n >= 6 and max(stamps) - started >= (n - 1) * 0.2, stamps
    # and the arrivals themselves are spread (1 s of slack for client set-up under load)
    assert max(stamps) - min(stamps) >= (n - 1) * 0.2 - 1.0, stamps
