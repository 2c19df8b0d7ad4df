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
