"""CI shards: balanced deterministic selection, own output directories, merge == unsharded run."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import scenario, script, write_benchmark

from pytest_evalbench.__main__ import main
from pytest_evalbench.plugin.session import shard_of
from pytest_evalbench.testing import FakeLLMServer

ROWS = [scenario(f"m0{m}_s{s:03d}_v01", f"m0{m}") for m in (1, 2) for s in range(1, 6)]


def result_files(directory: Path) -> dict[str, bytes]:
    files = [directory / "results.json", *sorted((directory / "runs").glob("*/*.json"))]
    return {str(p.relative_to(directory)): p.read_bytes() for p in files}


def test_shards_are_balanced_and_stable() -> None:
    ids = [f"benchmarks/b/scenarios.json::row{i}[t]" for i in range(103)]
    shards = shard_of(ids, 4)
    sizes = [sum(1 for s in shards.values() if s == k) for k in (1, 2, 3, 4)]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 103
    assert shard_of(list(reversed(ids)), 4) == shards


def test_merged_shards_equal_an_unsharded_run(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1})
    bench_env.set_responder(script(lambda r: "s002" in json.dumps(r) or "s004" in json.dumps(r),
                                   user=lambda r: "Message: " + re.search(r"persona of (\w+)", json.dumps(r)).group(1)))
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=5, failed=5)
    unsharded = result_files(bench)
    (bench / "results.json").unlink()
    for path in (bench / "runs").glob("*/*.json"):
        path.unlink()

    counts = []
    for k, xdist in ((1, []), (2, ["-n", "2"]), (3, [])):
        result = pytester.runpytest("--benchmark=demo", f"--evalbench-shard={k}/3", *xdist)
        outcomes = result.parseoutcomes()
        counts.append(outcomes.get("passed", 0) + outcomes.get("failed", 0))
    assert sorted(counts) == [3, 3, 4]
    assert not (bench / "results.json").exists()  # shards write under their own names only
    shards = [bench / "shards" / f"{k}-of-3" for k in (1, 2, 3)]
    assert all((d / "results.json").is_file() and (d / "records.json").is_file() for d in shards)

    assert main(["merge", "demo", *map(str, shards), "--root", str(pytester.path)]) == 0
    assert result_files(bench) == unsharded


def test_merge_refuses_overlapping_or_missing_shards(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    bench = write_benchmark(pytester.path, scenarios=ROWS[:2], generation={"turns": 1})
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo", "--evalbench-shard=1/1").assert_outcomes(passed=2)
    shard = bench / "shards" / "1-of-1"
    assert main(["merge", "demo", str(shard), str(shard), "--root", str(pytester.path)]) == 4
    assert "more than one shard" in capsys.readouterr().err
    assert main(["merge", "demo", str(bench), "--root", str(pytester.path)]) == 4
    assert "no shard records" in capsys.readouterr().err
    result = pytester.runpytest("--benchmark=demo", "--evalbench-shard=3/2")
    assert result.ret == 4
