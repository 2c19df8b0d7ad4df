"""The batch tier end to end: a scenario benchmark judged (or run whole) through the fake server's Batch
API gives the standard run's verdicts, with no synchronous request of a batched role and the judge at
half the price; a rerun replays the batched answers from the cache."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import JUDGE, TARGET, USER, read_json, script, write_benchmark

from pytest_evalbench.testing import FakeLLMServer

PRICES = {model: {"input_per_million": 1.0, "output_per_million": 2.0} for model in (USER, TARGET, JUDGE)}


def judged_present(request: dict[str, Any]) -> bool:
    """A verdict that depends on the conversation: the runs must agree row by row, not by chance."""
    return "v01" in str(request["messages"])


def user(request: dict[str, Any]) -> str:
    """The simulated user names its scenario, so every conversation (and judge call) is its own."""
    text = str(request["messages"])
    return "Thought: ok\nMessage: help me with " + next(v for v in ("v01", "v02", "") if v in text)


def outcome(bench: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    rows = read_json(bench / "runs" / "tgt" / "scores.json")
    return {row["conv_id"]: (row["present"], row["passed"]) for row in rows}, read_json(
        bench / "runs" / "tgt" / "cost.json")


def models(requests: list[dict[str, Any]]) -> list[str]:
    return [request["model"] for request in requests]


def test_judge_batch_keeps_the_verdicts_at_half_the_judge_price(pytester: pytest.Pytester,
                                                                 bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, pricing=PRICES)
    bench_env.set_responder(script(judged_present, user=user))
    pytester.runpytest("--benchmark=demo", "--evalbench-cache-dir=standard").assert_outcomes(passed=2, failed=2)
    standard, standard_cost = outcome(bench)
    assert JUDGE in models(bench_env.requests)
    bench_env.reset()

    result = pytester.runpytest("--benchmark=demo", "--evalbench-cache-dir=batched", "--evalbench-batch=judge",
                                "--evalbench-batch-poll=0.05")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["evalbench: 4/4 done*, batches 1 submitted, 0 in progress, 1 done (*s since submission)*"])
    result.stdout.fnmatch_lines(["llm: * requests, 4 calls in provider batches, * cache hits*"])
    batched, batched_cost = outcome(bench)
    assert batched == standard
    assert JUDGE not in models(bench_env.requests)  # 0 synchronous judge requests
    assert models(bench_env.batch.lines) == [JUDGE] * 4
    assert len(bench_env.batch.batches) == 1  # the judge calls ready together: one batch
    assert batched_cost["evaluate"]["cost"] == pytest.approx(standard_cost["evaluate"]["cost"] / 2)
    assert batched_cost["simulate"]["cost"] == pytest.approx(standard_cost["simulate"]["cost"])
    assert not list((pytester.path / "batched" / ".batches").iterdir())

    bench_env.reset()
    lines = len(bench_env.batch.lines)
    pytester.runpytest("--benchmark=demo", "--evalbench-cache-dir=batched").assert_outcomes(passed=2, failed=2)
    assert JUDGE not in models(bench_env.requests)  # the batched answers replay for a standard run too
    assert len(bench_env.batch.lines) == lines
    pytester.runpytest("--benchmark=demo", "--evalbench-cache-dir=standard", "--evalbench-batch=judge",
                       "--evalbench-batch-poll=0.05").assert_outcomes(passed=2, failed=2)
    assert len(bench_env.batch.lines) == lines  # a cache hit never goes into a batch


def test_all_roles_batched_advance_one_batch_round_per_turn(pytester: pytest.Pytester,
                                                            bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, pricing=PRICES)
    bench_env.set_responder(script(judged_present, user=user))
    pytester.runpytest("--benchmark=demo", "--evalbench-cache-dir=standard").assert_outcomes(passed=2, failed=2)
    standard, standard_cost = outcome(bench)
    bench_env.reset()

    result = pytester.runpytest("--benchmark=demo", "--evalbench-cache-dir=batched", "--evalbench-batch=all",
                                "--evalbench-batch-poll=0.05")
    result.assert_outcomes(passed=2, failed=2)
    batched, batched_cost = outcome(bench)
    assert batched == standard
    assert bench_env.requests == []
    # two turns of (user, target) and the judge: five rounds, each round's calls of all four cases together
    # (the target sees the same conversation in two cases of each variant: those share one line)
    sizes = [batch["request_counts"]["total"] for batch in bench_env.batch.batches.values()]
    assert sizes == [4, 2, 4, 2, 4]
    total = sum(phase["cost"] for name, phase in standard_cost.items() if name != "version")
    assert sum(phase["cost"] for name, phase in batched_cost.items() if name != "version") == pytest.approx(total / 2)


def test_batch_true_on_a_role_in_benchmark_yaml(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, evaluator_model={"model": JUDGE, "batch": True})
    bench_env.set_responder(script(judged_present, user=user))
    bench_env.batch.delay = 1.5
    result = pytester.runpytest("--benchmark=demo", "--evalbench-batch-poll=0.05", "--evalbench-progress-every=0.3")
    result.assert_outcomes(passed=2, failed=2)
    # while the batch is pending, the progress line is redrawn (no item has finished yet)
    result.stdout.fnmatch_lines(["evalbench: 0/4 done*, batches 1 submitted, 1 in progress, 0 done (*s since submission)*"])
    assert JUDGE not in models(bench_env.requests) and models(bench_env.batch.lines) == [JUDGE] * 4


def test_unknown_batch_role_is_a_usage_error(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path)
    result = pytester.runpytest("--benchmark=demo", "--evalbench-batch=jugde")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--evalbench-batch*unknown role(s) 'jugde'*"])


def test_batched_calls_keep_the_budget(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    """`--evalbench-max-cost` holds for batched calls too: each reserves its worst case at the batch rate
    before it goes into a batch; one that does not fit is never submitted and its row is an error."""
    pricey = {USER: {"input_per_million": 0.0, "output_per_million": 1.0}, TARGET: {"input_per_million": 0.0,
              "output_per_million": 1.0}, JUDGE: {"input_per_million": 0.0, "output_per_million": 1000.0}}
    write_benchmark(pytester.path, pricing=pricey, generation={"turns": 1, "num_samples": 1, "perfunctory": False,
                                                                "landmarks": True})
    bench_env.set_responder(script(judged_present, user=user))
    # the conversations (calls of at most $0.002) fit; no judge call's worst case (1,024 tokens: $0.512 batched) does
    result = pytester.runpytest("--benchmark=demo", "--evalbench-batch=judge", "--evalbench-batch-poll=0.05",
                                "--evalbench-cache=off", "--evalbench-concurrency=1", "--evalbench-max-cost=0.4")
    assert result.ret == 7
    assert JUDGE not in models(bench_env.batch.lines) and JUDGE not in models(bench_env.requests)


def test_an_unreadable_batch_line_is_an_error_never_a_verdict(pytester: pytest.Pytester,
                                                              bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path)
    bench_env.set_responder(script(judged_present, user=user))
    bench_env.batch.garbage_lines = 1
    result = pytester.runpytest("--benchmark=demo", "--evalbench-batch=judge", "--evalbench-batch-poll=0.05")
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors") == 1 and outcomes.get("passed", 0) + outcomes.get("failed", 0) == 3
    assert result.ret == 7
    result.stdout.fnmatch_lines(["*bad response*could not be read*"])


@pytest.mark.slow
def test_a_killed_run_resumes_its_batch_without_paying_again(pytester: pytest.Pytester,
                                                             bench_env: FakeLLMServer) -> None:
    """A run killed (SIGKILL) once its judge batch is submitted; the rerun polls that batch again and
    submits nothing twice."""
    bench = write_benchmark(pytester.path)
    bench_env.set_responder(script(judged_present, user=user))
    bench_env.batch.delay = 120.0
    records = bench / ".evalbench-cache" / ".batches"
    process = subprocess.Popen([sys.executable, "-m", "pytest", "--benchmark=demo", "--evalbench-batch=judge",
                                "--evalbench-batch-poll=0.05", "-p", "no:randomly"], cwd=pytester.path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not list(records.glob("*.json")) and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
    finally:
        process.kill()
        process.wait()
    assert len(bench_env.batch.batches) == 1 and len(list(records.glob("*.json"))) == 1
    bench_env.batch.delay = 0.0
    result = pytester.runpytest("--benchmark=demo", "--evalbench-batch=judge", "--evalbench-batch-poll=0.05")
    result.assert_outcomes(passed=2, failed=2)
    assert len(bench_env.batch.batches) == 1  # resumed, not submitted again
    assert models(bench_env.batch.lines) == [JUDGE] * 4 and JUDGE not in models(bench_env.requests)
    assert not list(records.glob("*.json"))


def test_the_estimate_prices_a_batched_judge_at_the_batch_rate(pytester: pytest.Pytester,
                                                               bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, pricing=PRICES)

    def judge_cost(*options: str) -> float:
        result = pytester.runpytest("--benchmark=demo", "--evalbench-estimate", *options)
        [line] = [line for line in result.outlines if line.strip().startswith("judge ")]
        return float(line.split("~$")[1].split()[0])

    assert judge_cost("--evalbench-batch=judge") == pytest.approx(judge_cost() / 2, abs=1e-4)
    assert bench_env.requests == [] and bench_env.batch.batches == {}
