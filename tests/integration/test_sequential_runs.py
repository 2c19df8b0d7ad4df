"""Sequential sampling in real runs (`generation.sampling: sequential`) against the fake server: a
settled case's later samples are not requested and end `not drawn`, which keeps the run complete
(exit 0/1, never 7); with no earlier run (no prior) the per-case verdicts are exactly fixed k's, with
and without xdist; with an earlier run's prior a stable case stops after two samples."""

from __future__ import annotations

import json
import re
import shutil
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import JUDGE, TARGET, USER, judge_says, read_json, scenario, write_benchmark

from pytest_evalbench.testing import FakeLLMServer, by_model

SID = re.compile(r"(m01_s001_v\d\d)")
VERDICT = re.compile(r"per-case: (m01_s001_v\d\d)\[tgt\] (\d+)/(\d+) passed -> (\w+)")
K = 5


def plan_script(plan: dict[str, list[bool]]) -> Callable[[dict[str, Any]], Any]:
    """The user names its scenario; the judge answers a scenario's n-th judged transcript with
    `plan[sid][n]` (n counts this server's judge requests for that scenario)."""
    lock = threading.Lock()
    seen: Counter[str] = Counter()

    def user(request: dict[str, Any]) -> str:
        found = SID.search(json.dumps(request))
        return f"Thought: ok\nMessage: I need help with {found.group(1) if found else '?'}"

    def present(request: dict[str, Any]) -> bool:
        sid = SID.search(request["messages"][-1]["content"].split("CONVERSATION:", 1)[1]).group(1)  # type: ignore[union-attr]
        with lock:
            n = seen[sid]
            seen[sid] += 1
        return plan[sid][n]

    return by_model({USER: user, TARGET: lambda r: "Sure, where to?", JUDGE: judge_says(present)})


def bench(root: Path, plan: dict[str, list[bool]], sampling: str) -> Path:
    return write_benchmark(root, scenarios=[scenario(sid, "m01") for sid in plan],
                           generation={"turns": 1, "num_samples": K, "perfunctory": False, "landmarks": True,
                                       "sampling": sampling})


def set_sampling(bench_dir: Path, sampling: str) -> None:
    path = bench_dir / "benchmark.yaml"
    path.write_text(path.read_text().replace("sampling: fixed", f"sampling: {sampling}"))


def judged(server: FakeLLMServer) -> Counter[str]:
    """Judge requests per scenario."""
    return Counter(SID.search(str(r["messages"][-1]["content"]).split("CONVERSATION:", 1)[1]).group(1)  # type: ignore[union-attr]
                   for r in server.requests if r["model"] == JUDGE)


def verdicts(stdout: str) -> dict[str, str]:
    return {m.group(1): m.group(4) for m in VERDICT.finditer(stdout)}


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--benchmark=demo", "--evalbench-cache=off", "-rs", *args)


# per scenario, the judge's judgments in the order of its samples: a stable pass, a stable fail, and
# cases whose k = 5 verdict is inconclusive (flaky), settled for certain once one pass and one fail are in
PLAN = {
    "m01_s001_v01": [True] * 5,
    "m01_s001_v02": [False] * 5,
    "m01_s001_v03": [True, False, True, True, True],
    "m01_s001_v04": [False, True, False, False, False],
    "m01_s001_v05": [True, True, True, True, False],
}


def test_without_a_prior_the_verdicts_are_fixed_ks_and_settled_samples_are_not_drawn(
        pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench_dir = bench(pytester.path, PLAN, "fixed")
    bench_env.set_responder(plan_script(PLAN))
    fixed = run(pytester, "-p", "no:xdist")
    assert sum(judged(bench_env).values()) == 5 * K
    shutil.rmtree(bench_dir / "runs")  # no earlier scores: no prior
    set_sampling(bench_dir, "sequential")
    bench_env.reset()
    bench_env.set_responder(plan_script(PLAN))
    result = run(pytester, "-p", "no:xdist")
    # stable cases draw all five (no prior: only a certain verdict stops them); a flaky case stops once
    # a pass and a fail make it inconclusive whatever follows; v05's fail comes last
    assert judged(bench_env) == Counter({"m01_s001_v01": 5, "m01_s001_v02": 5, "m01_s001_v03": 2,
                                         "m01_s001_v04": 2, "m01_s001_v05": 5})
    assert verdicts(result.stdout.str()) == verdicts(fixed.stdout.str()) == {
        "m01_s001_v01": "pass", "m01_s001_v02": "fail", "m01_s001_v03": "inconclusive",
        "m01_s001_v04": "inconclusive", "m01_s001_v05": "inconclusive"}
    assert result.ret == fixed.ret == 1  # v02 fails; not 7: the samples not drawn are accounted for
    result.stdout.fnmatch_lines(["*per-case: m01_s001_v03[[]tgt[]] 1/2 passed -> inconclusive (drew 2 of 5 samples)*",
                                 "*SKIPPED*not drawn: settled (inconclusive) after 2 of 5 samples*"])
    last = read_json(bench_dir / "last_run.json")
    assert last["status"] == "complete" and last["not_scored"] == {}
    calls_per_sample = (last["llm"]["requests"] + last["llm"]["cache_hits"]) / 19
    assert last["sequential"] == {"drawn": 19, "not_drawn": 6, "calls_saved": round(6 * calls_per_sample)}
    assert len(read_json(bench_dir / "runs" / "tgt" / "scores.json")) == 19  # no row for a sample not drawn
    assert "6 not drawn" in result.stdout.str()
    result.stdout.no_fnmatch_line("*not drawn: benchmarks/*")  # counted, not listed as a problem


def test_xdist_gives_the_same_verdicts_and_exit_status(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    plan = {sid: outcomes for sid, outcomes in PLAN.items() if sid != "m01_s001_v02"}  # nothing fails: exit 0
    bench_env.set_responder(plan_script(plan))
    bench_dir = bench(pytester.path, plan, "sequential")
    result = run(pytester, "-n", "2")
    assert verdicts(result.stdout.str()) == {"m01_s001_v01": "pass", "m01_s001_v03": "inconclusive",
                                             "m01_s001_v04": "inconclusive", "m01_s001_v05": "inconclusive"}
    assert result.ret == 0
    last = read_json(bench_dir / "last_run.json")
    assert last["status"] == "complete" and last["not_scored"] == {}
    # 20 items in two shares of 10: v03 (items 10-14) is split, so its samples on the second worker are
    # drawn there (they cannot see the first two); v04's later samples are not drawn
    assert last["sequential"]["not_drawn"] >= 3 and sum(judged(bench_env).values()) <= 17


def test_with_the_last_runs_prior_a_stable_case_stops_after_three_samples(
        pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    """An earlier fixed run of a mostly stable suite fits a U-shaped prior: three passes then settle a
    stable case at the error rate (gate.alpha; without the prior it would draw all five); the flaky
    case still stops at its first disagreement."""
    plan = {f"m01_s001_v{i:02d}": [True] * K for i in range(1, 9)}
    plan["m01_s001_v09"] = [True, False, True, False, True]
    bench_dir = bench(pytester.path, plan, "fixed")
    bench_env.set_responder(plan_script(plan))
    first = run(pytester, "-p", "no:xdist")
    assert first.ret == 0 and sum(judged(bench_env).values()) == 9 * K
    set_sampling(bench_dir, "sequential")
    bench_env.reset()
    bench_env.set_responder(plan_script(plan))
    result = run(pytester, "-p", "no:xdist")
    assert judged(bench_env) == Counter({**{f"m01_s001_v{i:02d}": 3 for i in range(1, 9)}, "m01_s001_v09": 2})
    assert len(bench_env.requests) == 26 * 3  # user, target and judge: 26 samples of 45 drawn
    assert result.ret == 0
    assert verdicts(result.stdout.str())["m01_s001_v01"] == "pass"
    result.stdout.fnmatch_lines(["*per-case: m01_s001_v01[[]tgt[]] 3/3 passed -> pass (drew 3 of 5 samples)*"])
    assert read_json(bench_dir / "last_run.json")["sequential"] == {"drawn": 26, "not_drawn": 19, "calls_saved": 57}


def test_with_the_last_runs_prior_a_failing_case_draws_until_its_fixed_k_verdict_is_certain(
        pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    """Agreeing failures never settle `fail` at the error rate: a stable failing case draws all five
    samples, and one that fails three then passes one is inconclusive, as fixed k calls it (settling
    at α would have failed it after its first failures)."""
    plan = {f"m01_s001_v{i:02d}": [True] * K for i in range(1, 7)}
    plan |= {"m01_s001_v07": [False] * K, "m01_s001_v08": [False] * K, "m01_s001_v09": [False, False, False, True, False]}
    bench_dir = bench(pytester.path, plan, "fixed")
    bench_env.set_responder(plan_script(plan))
    fixed = run(pytester, "-p", "no:xdist")
    set_sampling(bench_dir, "sequential")
    bench_env.reset()
    bench_env.set_responder(plan_script(plan))
    result = run(pytester, "-p", "no:xdist")
    assert verdicts(result.stdout.str()) == verdicts(fixed.stdout.str())
    assert verdicts(result.stdout.str())["m01_s001_v09"] == "inconclusive"
    assert [verdicts(result.stdout.str())[f"m01_s001_v0{i}"] for i in (7, 8)] == ["fail", "fail"]
    calls = judged(bench_env)
    assert calls["m01_s001_v07"] == calls["m01_s001_v08"] == K and calls["m01_s001_v09"] == 4
    assert all(calls[f"m01_s001_v{i:02d}"] < K for i in range(1, 7))  # the passing ones still stop early
    assert result.ret == fixed.ret == 1


def test_an_unknown_sampling_is_reported_with_the_other_errors_before_any_call(
        pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench_dir = bench(pytester.path, {"m01_s001_v01": [True] * K}, "sequentail")
    path = bench_dir / "benchmark.yaml"
    path.write_text(path.read_text() + "gate: {alpha: 7}\n")
    result = run(pytester, "-p", "no:xdist")
    assert result.ret == 2 and bench_env.requests == []
    result.stdout.fnmatch_lines(["2 problems:",
                                 "*benchmark.yaml:*, field 'generation.sampling': Input should be 'fixed' or 'sequential'",
                                 "*benchmark.yaml:*, field 'gate.alpha': Input should be less than 1"])
