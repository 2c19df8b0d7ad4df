"""`evalbench mutate NAME`: the suite run against weakened variants of its model target, against the
fake server (the target is scripted to drop m01's behaviour when told to do the opposite; m02's judge
never sees the behaviour, so no mutant can move that metric)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from helpers import JUDGE, TARGET, USER, judge_says, read_json, scenario, write_benchmark

from pytest_evalbench.__main__ import main
from pytest_evalbench.cli import schemas
from pytest_evalbench.testing import FakeLLMServer, by_model

ROWS = [scenario(f"m01_s{i:03d}_v01", "m01") for i in range(1, 11)] + [
    scenario(f"m02_s{i:03d}_v01", "m02") for i in range(1, 11)]


def target(request: dict[str, Any]) -> str:
    return "I will not ask you anything." if "do the opposite" in json.dumps(request) else "Sure, where are you going?"


def judge(request: dict[str, Any]) -> bool:
    text = json.dumps(request)
    if "clarifying question" in text:  # m01: present when the reply asks where to
        return "where are you going" in text
    return False  # m02: never a diagnosis, whatever the target says


def test_mutate_detects_the_scripted_mutant_and_names_an_insensitive_metric(
        pytester: pytest.Pytester, bench_env: FakeLLMServer, capsys: pytest.CaptureFixture[str]) -> None:
    bench = write_benchmark(pytester.path, scenarios=ROWS)
    bench_env.set_responder(by_model({USER: lambda r: "Thought: ok\nMessage: I need help", TARGET: target,
                                      JUDGE: judge_says(judge)}))
    assert main(["mutate", "demo", "--root", str(pytester.path), "--", "-p", "no:randomly"]) == 0
    out = capsys.readouterr().out
    report = read_json(bench / "mutants.json")
    jsonschema.validate(report, schemas.load("mutants"))
    found = {(d["mutant"], d["metric"]): d["detected"] for d in report["detections"]}
    assert found[("tgt.m-opp-m01", "m01")] is True and found[("tgt.m-canned", "m01")] is True
    assert found[("tgt.m-nosys", "m01")] is False  # the scripted target ignores its system prompt
    assert not any(found[(m, "m02")] for m in ("tgt.m-nosys", "tgt.m-opp-m01", "tgt.m-opp-m02", "tgt.m-canned"))
    assert report["sensitivity"] == {"m01": {"detected": 3, "compared": 4, "score": 0.75},
                                     "m02": {"detected": 0, "compared": 4, "score": 0.0}}
    assert "  tgt.m-opp-m01 m01: 1.00 -> 0.00 of 10, p_adj 0.00293: detected" in out
    assert "sensitivity m02: 0.00 (0 of 4 mutants detected) INSENSITIVE: no mutant moves this metric" in out
    assert (pytester.path / "benchmarks" / "demo.mutants" / "report.html").is_file()

    requests = len(bench_env.requests)  # mutants are cached like any target: a rerun replays them
    assert main(["mutate", "demo", "--root", str(pytester.path), "--", "-p", "no:randomly"]) == 0
    assert len(bench_env.requests) == requests and read_json(bench / "mutants.json") == report


def test_mutate_refuses_a_benchmark_without_a_model_target(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    write_benchmark(pytester.path, scenarios=ROWS, targets=[{"id": "app"}])
    assert main(["mutate", "demo", "--root", str(pytester.path)]) == 4
    assert "no target with a `model` to mutate" in capsys.readouterr().err


def test_mutate_never_writes_into_a_users_own_benchmark_of_that_name(
        pytester: pytest.Pytester, bench_env: FakeLLMServer, capsys: pytest.CaptureFixture[str]) -> None:
    write_benchmark(pytester.path, scenarios=ROWS)
    own = write_benchmark(pytester.path, "demo.mutants", scenarios=ROWS[:2])  # a benchmark of the user's own
    before = {p.name: p.read_bytes() for p in own.iterdir()}
    assert main(["mutate", "demo", "--root", str(pytester.path)]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{own}: exists and was not written by evalbench mutate (no .evalbench-mutants in it)" in err
    assert {p.name: p.read_bytes() for p in own.iterdir()} == before
    assert bench_env.requests == []


@pytest.mark.parametrize("planted", ["directory", "file", "mutants.json"])
def test_mutate_follows_no_link_out_of_the_benchmarks(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                      capsys: pytest.CaptureFixture[str], planted: str) -> None:
    bench = write_benchmark(pytester.path, scenarios=ROWS)
    outside = pytester.path / "outside"
    outside.mkdir()
    victim = outside / "victim.json"
    victim.write_text("canary")
    out = pytester.path / "benchmarks" / "demo.mutants"
    if planted == "directory":  # a pull request commits benchmarks/demo.mutants -> somewhere else
        out.symlink_to(outside, target_is_directory=True)
        expected = f"{out}: is a symbolic link"
    elif planted == "file":  # ... or a link inside the directory an earlier mutate wrote
        out.mkdir()
        (out / ".evalbench-mutants").write_text("ours")
        (out / "scenarios.json").symlink_to(victim)
        expected = f"{out / 'scenarios.json'}: is a symbolic link"
    else:
        (bench / "mutants.json").symlink_to(victim)
        expected = f"{bench / 'mutants.json'}: is a symbolic link"
    code = main(["mutate", "demo", "--root", str(pytester.path), "--", "-p", "no:randomly"])
    assert code in (4, 7)
    assert expected in capsys.readouterr().err
    assert victim.read_text() == "canary" and sorted(p.name for p in outside.iterdir()) == ["victim.json"]


def test_the_mutants_directory_is_marked_and_ignored_by_git(pytester: pytest.Pytester) -> None:
    import shutil
    import subprocess

    from pytest_evalbench.cli.mutate import mutants_of, prepare
    from pytest_evalbench.formats.spec import load_spec

    bench = write_benchmark(pytester.path, scenarios=ROWS)
    (bench / "calibration.json").write_text("[]")
    spec = load_spec(bench)
    out = prepare(bench, spec, mutants_of(spec))
    assert sorted(p.name for p in out.iterdir()) == [".evalbench-mutants", ".gitignore", "benchmark.yaml",
                                                     "calibration.json", "scenarios.json"]
    (bench / "calibration.json").unlink()
    prepare(bench, spec, mutants_of(spec))  # a second mutate rewrites its own directory
    assert not (out / "calibration.json").exists()  # our copy of a file the benchmark no longer has
    if shutil.which("git") is None:
        return
    subprocess.run(["git", "init", "-q", str(pytester.path)], check=True)
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=pytester.path,
                            check=True, capture_output=True, text=True).stdout
    assert "demo.mutants" not in status and "benchmarks/demo/benchmark.yaml" in status
