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
    assert report["sensitivity"] == {"m01": {"detected": 3, "compared": 4, "score": 0.75, "rows_needed": None},
                                     "m02": {"detected": 0, "compared": 4, "score": 0.0, "rows_needed": None}}
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


def test_an_incomplete_mutants_run_says_why_once(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_evalbench.testing import Reply

    def refusing(request: dict[str, Any]) -> Any:  # the endpoint refuses the mutants' prompts
        if "do the opposite" in json.dumps(request):
            return Reply(status=403, content="model not enabled for this key")
        return target(request)

    write_benchmark(pytester.path, scenarios=ROWS[:2] + ROWS[10:12])
    bench_env.set_responder(by_model({USER: lambda r: "Thought: ok\nMessage: I need help", TARGET: refusing,
                                      JUDGE: judge_says(judge)}))
    assert main(["mutate", "demo", "--root", str(pytester.path)]) == 7
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert err[0].startswith("evalbench mutate: incomplete: the mutants' pytest run ended with exit status 7: "
                             "8 items errored (its report: benchmarks/demo.mutants/report.html)")
    assert len(err) == 3 and err[1].startswith("  8 items: evalbench ") and "403" in err[1]
    assert err[2] == "  (to run the mutants on another OpenAI-compatible endpoint: evalbench mutate demo --base-url URL)"
    out = captured.out.splitlines()
    assert sum("not compared" in line for line in out) == 1  # one line for every pair without rows
    assert ("  not compared (no shared scored rows): 4 of 8 mutant x metric pairs: tgt.m-opp-m01 m01, "
            "tgt.m-opp-m01 m02, tgt.m-opp-m02 m01, tgt.m-opp-m02 m02") in out


def test_too_few_cases_to_detect_any_drop_is_a_finding(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    # 3 cases per metric: even every row flipping from pass to fail has p = 1/8 > 0.05
    bench = write_benchmark(pytester.path, scenarios=ROWS[:3] + ROWS[10:13])
    bench_env.set_responder(by_model({USER: lambda r: "Thought: ok\nMessage: I need help", TARGET: target,
                                      JUDGE: judge_says(judge)}))
    assert main(["mutate", "demo", "--root", str(pytester.path)]) == 0
    out = capsys.readouterr().out
    assert "INSENSITIVE" not in out
    for metric in ("m01", "m02"):  # both pass every row on the real target (m02 is a negative metric)
        assert (f"sensitivity {metric}: 0.00 (0 of 4 mutants detected) TOO FEW CASES: 3 shared rows per mutant "
                "cannot show any drop significant at alpha 0.05; a fall of the real target's rate to 0 needs 5 rows "
                "(cases x samples) for 80% power") in out
    report = read_json(bench / "mutants.json")
    jsonschema.validate(report, schemas.load("mutants"))
    assert {m: s["rows_needed"] for m, s in report["sensitivity"].items()} == {"m01": 5, "m02": 5}


def test_mutate_sends_every_role_to_the_base_url(pytester: pytest.Pytester, fake_llm: FakeLLMServer,
                                                 capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-mutate-0123456789")
    # benchmark.yaml names the embedded model: --base-url runs it on the endpoint instead
    local = {"provider": "local"}
    write_benchmark(pytester.path, scenarios=ROWS[:5] + ROWS[10:15], targets=[{"id": "tgt", "model": TARGET, **local}],
                    user_model={"model": USER, **local}, evaluator_model={"model": JUDGE, **local})
    fake_llm.set_responder(by_model({USER: lambda r: "Thought: ok\nMessage: I need help", TARGET: target,
                                     JUDGE: judge_says(judge)}))
    assert main(["mutate", "demo", "--root", str(pytester.path), "--base-url", fake_llm.base_url]) == 0
    assert "  tgt.m-opp-m01 m01: 1.00 -> 0.00 of 5, p_adj " in capsys.readouterr().out
    assert fake_llm.requests
