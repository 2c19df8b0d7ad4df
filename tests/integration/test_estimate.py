"""`--evalbench-estimate`: no call, nothing written, and within 20% of the calls and tokens the real
run then counts (its own `llm:` lines), for a scenario and a dataset benchmark, cold (sizes from
max_tokens, with a model that writes up to it) and refined from the cache's recorded usage."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import JUDGE, TARGET, USER, write_benchmark
from test_dataset import scores, write_dataset

from pytest_evalbench.testing import FakeLLMServer, Reply, by_model

ROW = re.compile(r"^  (simulated user|target \S+|judge(?: \S+)?)\s+(\S+)\s+(\d+)[^~]*~(\d+)\s+~(\d+)")
USED = re.compile(r"^\s+(\w+):(\w+)\s+(\d+) in\s+(\d+) out")
ROLE = {"user": "simulated user", "target": "target", "judge": "judge"}


def estimated(out: str) -> dict[str, tuple[int, int, int]]:
    """role -> (calls, input tokens, output tokens) from the estimate's table."""
    found = {}
    for line in out.splitlines():
        match = ROW.match(line)
        if match:
            role = "target" if match.group(1).startswith("target") else match.group(1)
            found[role] = (int(match.group(3)), int(match.group(4)), int(match.group(5)))
    return found


def sources(out: str) -> set[str]:
    """Where the table's output counts came from: cached, cache, max_tokens, cache/max_tokens."""
    return set(re.findall(r"~\d+ \(([a-z_/]+)\)", out))


def measured(out: str, server: FakeLLMServer) -> dict[str, tuple[int, int, int]]:
    """role -> (calls the server answered, input and output tokens the run counted in its `llm:` lines)."""
    calls = {ROLE["user"]: 0, ROLE["target"]: 0, ROLE["judge"]: 0}
    for request in server.requests:
        calls[{USER: ROLE["user"], TARGET: ROLE["target"], JUDGE: ROLE["judge"]}[request["model"]]] += 1
    found = {}
    for line in out.splitlines():
        match = USED.match(line)
        if match:
            role = ROLE[match.group(2)]
            found[role] = (calls[role], int(match.group(3)), int(match.group(4)))
    return found


def assert_within(estimate: dict[str, tuple[int, int, int]], real: dict[str, tuple[int, int, int]],
                  share: float = 0.2) -> None:
    assert set(estimate) == set(real), (estimate, real)
    for role, numbers in real.items():
        for what, want, got in zip(("calls", "input", "output"), numbers, estimate[role]):
            assert abs(got - want) <= share * want, f"{role} {what}: estimated {got}, the run counted {want}"


def files(bench: Path) -> dict[str, float]:
    return {str(p.relative_to(bench)): p.stat().st_mtime_ns for p in bench.rglob("*")}


def tag(request: dict[str, Any]) -> str:
    """8 characters that differ between requests: no two conversations are the same (as with real models)."""
    return hashlib.sha256(json.dumps(request["messages"]).encode()).hexdigest()[:8]


def verbose_script() -> Any:
    """Models that write up to their max_tokens (user 40, target 60, judge 30 tokens; 4 characters a
    token, as the fake server counts)."""
    return by_model({USER: lambda r: "Thought: " + "t" * 70 + "\nMessage: " + tag(r) + "m" * 63,
                     TARGET: lambda r: tag(r) + "y" * 232,
                     JUDGE: lambda r: json.dumps({"justification": "j" * 86, "present": True})})


def terse_script() -> Any:
    """Short answers far below the default max_tokens (2048/1024): only the cache can tell their size."""
    return by_model({USER: lambda r: f"Thought: short\nMessage: my order {tag(r)} is late, can you help",
                     TARGET: lambda r: f"Sorry to hear that. Is {tag(r)} your order number?",
                     JUDGE: lambda r: {"justification": "asked for it", "present": True}})


def scenario_bench(root: Path, **params: Any) -> Path:
    return write_benchmark(root, generation={"turns": 3, "num_samples": 2, "perfunctory": False, "landmarks": True},
                           targets=[{"id": "tgt", "model": TARGET, **params.get("target", {})}],
                           user_model={"model": USER, **params.get("user", {})},
                           evaluator_model={"model": JUDGE, **params.get("judge", {})})


def test_estimate_makes_no_call_and_writes_nothing(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = scenario_bench(pytester.path)
    before = files(bench)
    for extra in ([], ["-n", "2"], ["-k", "m01"]):
        # under xdist a subprocess, whose output holds what the workers print too
        run = pytester.runpytest_subprocess if "-n" in extra else pytester.runpytest
        result = run("--benchmark=demo", "--evalbench-estimate", *extra)
        out = result.stdout.str()
        assert result.ret == 0, out
        assert out.count("estimate, not measured (no LLM call was made)") == 1  # once, also with -n 2
        items = 4 if extra == ["-k", "m01"] else 8  # 4 rows x 2 samples, -k selects half
        assert f": {items} items, {items * 7} calls" in out  # 3 turns x (user + target) + judge
    assert bench_env.requests == []
    assert files(bench) == before  # no last_run.json, no result file, no cache entry


def test_estimate_of_a_missing_role_is_a_usage_error(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, user_model=None)
    result = pytester.runpytest("--benchmark=demo", "--evalbench-estimate")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "needs `user_model`" in result.stderr.str()


def test_scenario_estimate_within_20_percent_cold(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    scenario_bench(pytester.path, user={"params": {"max_tokens": 40}}, target={"params": {"max_tokens": 60}},
                   judge={"params": {"max_tokens": 30}})
    bench_env.set_responder(verbose_script())
    guess = pytester.runpytest("--benchmark=demo", "--evalbench-estimate")
    assert sources(guess.stdout.str()) == {"max_tokens"}
    assert "total: ~19504 tokens, unknown: models without a price: sim-judge, sim-target, sim-user" in guess.stdout.str()
    real = pytester.runpytest("--benchmark=demo")
    assert_within(estimated(guess.stdout.str()), measured(real.stdout.str(), bench_env))


def test_scenario_estimate_refined_from_the_cache(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    """Samples 0 recorded: their calls are planned on the recorded answers (replayed, no cost), samples 1
    from the mean of the recorded answers of each role."""
    scenario_bench(pytester.path)
    bench_env.set_responder(terse_script())
    cold = estimated(pytester.runpytest("--benchmark=demo", "--evalbench-estimate").stdout.str())
    pytester.runpytest("--benchmark=demo", "-k", "tgt-s0")  # records the cache of half the items
    guess = pytester.runpytest("--benchmark=demo", "--evalbench-estimate").stdout.str()
    assert "8 items, 56 calls, 28 of them replayed from the cache" in guess
    assert sources(guess) == {"cache"}
    bench_env.requests.clear()
    real = measured(pytester.runpytest("--benchmark=demo", "--evalbench-cache=refresh").stdout.str(), bench_env)
    assert_within(estimated(guess), real)
    assert cold["judge"][2] > 10 * real["judge"][2]  # without the cache: max_tokens, an upper bound


def dataset_bench(root: Path, **judge: Any) -> None:
    write_dataset(root, evaluator_model={"model": JUDGE, **judge})


def test_dataset_estimate_within_20_percent_cold(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    dataset_bench(pytester.path, params={"max_tokens": 30})
    bench_env.set_responder(scores({}, Reply(content=json.dumps({"explanation": "e" * 89, "score": 4}))))
    guess = pytester.runpytest("--benchmark=agents", "--evalbench-estimate")
    real = pytester.runpytest("--benchmark=agents")
    assert_within(estimated(guess.stdout.str()), measured(real.stdout.str(), bench_env))


def test_dataset_estimate_refined_from_the_cache(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    dataset_bench(pytester.path)
    bench_env.set_responder(scores({}, 4))
    pytester.runpytest("--benchmark=agents", "-k", "curator")  # records some cases' evals
    guess = pytester.runpytest("--benchmark=agents", "--evalbench-estimate", "-n", "2").stdout.str()
    assert "6 of them replayed from the cache" in guess and sources(guess) == {"cache"}
    bench_env.requests.clear()
    real = measured(pytester.runpytest("--benchmark=agents", "--evalbench-cache=refresh").stdout.str(), bench_env)
    assert_within(estimated(guess), real)


def test_panels_judge_samples_shards_and_rate_limits(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    """Two judges voting twice each: 2 turns x (user + target) + 2 x 2 votes = 8 calls per item, as sent."""
    other = "sim-judge-2"
    write_benchmark(pytester.path, evaluator_models=[{"model": other}], judge={"samples": 2})
    script = verbose_script()
    bench_env.set_responder(lambda r: script({**r, "model": JUDGE} if r["model"] == other else r))
    guess = pytester.runpytest("--benchmark=demo", "--evalbench-estimate").stdout.str()
    assert "4 items, 32 calls" in guess
    assert re.search(r"^  judge sim-judge-2\s+sim-judge-2\s+8\s", guess, re.M)
    shard = pytester.runpytest("--benchmark=demo", "--evalbench-estimate", "--evalbench-shard=1/2",
                               "--evalbench-rate-limit=2").stdout.str()
    assert "2 items, 16 calls" in shard and "time: ~8 min, bound by rate limit 2 requests/min" in shard
    assert not (pytester.path / "benchmarks" / "demo" / "shards").exists()
    assert bench_env.requests == []
    pytester.runpytest("--benchmark=demo")
    assert len(bench_env.requests) == 32


def test_the_demos_estimate_finds_every_call_in_its_cache(pytester: pytest.Pytester) -> None:
    """The committed demo replays all its calls, multi-turn judge calls included (their request
    asks for the answer with a `turn`): the estimate must build the same requests, so every call is
    found in the cache and none is priced as new."""
    from test_one_summary import copy_example

    copy_example(pytester.path, "demo")
    result = pytester.runpytest("--benchmark=demo", "--evalbench-estimate", "-p", "no:cacheprovider")
    assert result.ret == 0
    line = next(line for line in result.stdout.lines if line.startswith("estimate, not measured"))
    calls, cached = re.search(r"(\d+) calls, (\d+) of them replayed", line).groups()  # type: ignore[union-attr]
    assert calls == cached, line


def test_the_estimate_prices_hosted_models_without_pricing(pytester: pytest.Pytester,
                                                           bench_env: FakeLLMServer) -> None:
    """genai-prices knows the list price of hosted models: no `pricing:` needed; `pricing:` still wins."""
    scenario_bench(pytester.path, target={"model": "o3-mini"}, user={"model": "claude-3-5-haiku-latest"},
                   judge={"model": "o3-mini"})
    result = pytester.runpytest("--benchmark=demo", "--evalbench-estimate")
    out = result.stdout.str()
    assert result.ret == 0, out
    assert "no price" not in out and "models without a price" not in out
    costs = {m.group(1): m.group(2) for m in re.finditer(r"^  \S+(?: \S+)?\s+(o3-mini|claude-3-5-haiku-latest)\s.*~\$(\S+)$",
                                                            out, re.MULTILINE)}
    assert set(costs) == {"o3-mini", "claude-3-5-haiku-latest"} and all(float(v) > 0 for v in costs.values()), out
    assert bench_env.requests == []

    bench = pytester.path / "benchmarks" / "demo"
    spec = yaml.safe_load((bench / "benchmark.yaml").read_text())
    spec["pricing"] = {"o3-mini": {"input_per_million": 0, "output_per_million": 0}}
    (bench / "benchmark.yaml").write_text(yaml.safe_dump(spec))
    out = pytester.runpytest("--benchmark=demo", "--evalbench-estimate").stdout.str()
    assert re.search(r"judge\s+o3-mini\s.*~\$0\.0000$", out, re.MULTILINE), out
