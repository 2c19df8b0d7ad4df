"""The run store as a pytest run writes it: one run per session (xdist workers never write), a merge of
shards one run, an unreachable store one warning and the run's files, never another exit status."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import scenario, script, write_benchmark

from pytest_evalbench.__main__ import main
from pytest_evalbench.store.db import open_store, sqlite_url
from pytest_evalbench.testing import FakeLLMServer

ROWS = [scenario(f"m0{m}_s{s:03d}_v01", f"m0{m}") for m in (1, 2) for s in range(1, 4)]


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite records nothing by default (tests/conftest.py); these tests record."""
    monkeypatch.delenv("EVALBENCH_STORE", raising=False)


def default_store(root: Path) -> str:
    return sqlite_url(root / ".evalbench" / "runs.sqlite")


def test_a_run_is_recorded_in_the_default_store(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                recording: None) -> None:
    write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1})
    bench_env.set_responder(script(True))  # m01 (positive) present: passed; m02 (negative) present: failed
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(passed=3, failed=3)
    assert (pytester.path / ".evalbench" / ".gitignore").read_text() == "*\n"
    with open_store(default_store(pytester.path)) as store:
        runs = store.runs("demo")
        assert len(runs) == 1
        run = store.run(runs[0].id or 0)
    assert run is not None
    assert (run.benchmark, run.kind, run.exit_status, run.scope) == ("demo", "scenarios", 1, "full")
    assert run.verdict == "failed" and run.targets == {"tgt": "sim-target"} and run.judge == "sim-judge"
    assert run.plugin_version and run.created.endswith("Z")
    assert len(run.cases) == 6 and run.case_count == 6
    by_unit = {c.unit: c for c in run.cases}
    kept = by_unit["m01_s002_v01"]
    assert (kept.target, kept.metric, kept.sample, kept.present, kept.passed, kept.status) == (
        "tgt", "m01", 0, True, True, "passed")
    assert (by_unit["m02_s002_v01"].status, by_unit["m02_s002_v01"].passed) == ("failed", False)
    assert all(c.node_id.startswith("benchmarks/demo/scenarios.json::") for c in run.cases)
    assert all(c.transcript and c.transcript[0]["role"] == "user" for c in run.cases)
    assert all(c.justification == "because" and c.decided_by == "judge" for c in run.cases)
    result.stdout.fnmatch_lines(["*recorded as run 1*"])


def test_an_unreachable_store_is_one_warning_and_the_same_exit_status(
        pytester: pytest.Pytester, bench_env: FakeLLMServer, recording: None) -> None:
    bench = write_benchmark(pytester.path, scenarios=ROWS[:2], generation={"turns": 1})
    bench_env.set_responder(script(True))
    url = f"sqlite:///{pytester.path / 'missing-dir' / 'runs.sqlite'}"
    result = pytester.runpytest("--benchmark=demo", f"--evalbench-store={url}")
    assert result.ret == 0
    warnings = [line for line in result.outlines if "not recorded" in line]
    assert len(warnings) == 1, result.outlines
    assert (bench / "results.json").is_file() and (bench / "report.html").is_file()


def test_a_password_in_the_store_url_is_never_shown(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                    recording: None) -> None:
    write_benchmark(pytester.path, scenarios=ROWS[:1], generation={"turns": 1})
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo",
                                "--evalbench-store=postgresql+psycopg://u:hunter2-secret@127.0.0.1:1/db?password=p4ss")
    assert result.ret == 0
    text = "\n".join(result.outlines + result.errlines)
    assert "not recorded" in text and "hunter2-secret" not in text and "p4ss" not in text


@pytest.mark.slow  # the xdist twin of the first test
def test_an_xdist_run_is_recorded_once_by_the_controller(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                         recording: None) -> None:
    write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1})
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo", "-n", "2").assert_outcomes(passed=3, failed=3)
    with open_store(default_store(pytester.path)) as store:
        [run] = store.runs()
        assert run.case_count == 6
        assert len({c.node_id for c in (store.run(run.id or 0) or run).cases}) == 6


def test_merged_shards_are_one_run(pytester: pytest.Pytester, bench_env: FakeLLMServer, recording: None,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    bench = write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1})
    bench_env.set_responder(script(True))
    for k in (1, 2):
        pytester.runpytest("--benchmark=demo", f"--evalbench-shard={k}/2")
    assert not (pytester.path / ".evalbench" / "runs.sqlite").exists()  # a shard is not a run
    shards = [str(bench / "shards" / f"{k}-of-2") for k in (1, 2)]
    assert main(["merge", "demo", *shards, "--root", str(pytester.path)]) == 0
    assert "recorded as run 1" in capsys.readouterr().out
    with open_store(default_store(pytester.path)) as store:
        [listed] = store.runs("demo")
        run = store.run(listed.id or 0)
    assert run is not None and run.case_count == 6 and run.verdict == "failed" and run.exit_status == 0
    assert sorted(c.status for c in run.cases) == ["failed"] * 3 + ["passed"] * 3
    assert run.targets == {"tgt": "sim-target"} and run.judge == "sim-judge"


def test_a_run_in_a_git_work_tree_asks_git_once_for_each_fact(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                              recording: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The commit (with its dirty mark) the result rows, the summary and the store share is asked once,
    and the branch once: three git processes at the session's end, not five."""
    import subprocess

    git = ("git", "-c", "user.name=t", "-c", "user.email=t@example.com")
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=pytester.path, check=True)
    write_benchmark(pytester.path, scenarios=ROWS[:2], generation={"turns": 1})
    subprocess.run([*git, "add", "-A"], cwd=pytester.path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], cwd=pytester.path, check=True)
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=pytester.path, check=True,
                          capture_output=True, text=True).stdout.strip()
    asked: list[list[str]] = []
    real = subprocess.run

    def counting(args: list[str], *a: object, **k: object) -> subprocess.CompletedProcess[str]:
        if args and args[0] == "git":
            asked.append(list(args[1:]))
        return real(args, *a, **k)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(subprocess, "run", counting)
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo")
    monkeypatch.undo()
    result.assert_outcomes(passed=2)
    assert sorted(asked) == sorted([["rev-parse", "--short", "HEAD"], ["status", "--porcelain", "--untracked-files=no"],
                                    ["rev-parse", "--abbrev-ref", "HEAD"]])
    with open_store(default_store(pytester.path)) as store:
        run = store.run(store.runs("demo")[0].id or 0)
    assert run is not None and run.commit == head and run.branch == "main"
