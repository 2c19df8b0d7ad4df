"""Every command the plugin prints runs as printed (issue 24): each is taken from a real session's
terminal output or Markdown summary and executed in a shell, against the fake server."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import read_json, scenario, script, write_benchmark
from test_dataset import scores, write_dataset

from conftest import LEAN_ADDOPTS
from pytest_evalbench.gate.outcome import EXIT_INCOMPLETE
from pytest_evalbench.testing import FakeLLMServer

XDIST = [pytest.param([], id="n0"), pytest.param(["-n", "2"], id="n2", marks=pytest.mark.slow)]
ROWS = [scenario(f"m01_s00{i}_v01", "m01") for i in (1, 2, 3, 4)]
FAILING = ("m01_s002_v01", "m01_s004_v01")
QUIET = ["--evalbench-max-attempts=1", "-p", "no:randomly"]


def persona_says_id(request: dict[str, Any]) -> str:
    return "Message: I am " + re.search(r"persona of (\w+)", json.dumps(request)).group(1)


def judge_fails(*failing: str) -> Any:
    return script(lambda r: not any(f"I am {f}" in json.dumps(r) for f in failing), user=persona_says_id)


def terminal_command(output: str, label: str) -> str:
    """The command printed on the line after the one containing `label` (terminal summary)."""
    lines = output.splitlines()
    at = next(i for i, line in enumerate(lines) if label in line)
    assert lines[at + 1].startswith("  pytest "), lines[at + 1]
    return lines[at + 1].strip()


def markdown_command(markdown: str, label: str) -> str:
    """The command in the fenced block after the paragraph containing `label` (Markdown summary)."""
    after = markdown[markdown.index(label):]
    return re.search(r"```\n(.*?)\n```", after, re.S).group(1)


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a printed command as a user pastes it into a POSIX shell (the venv's `pytest` first on PATH;
    PYTEST_ADDOPTS only keeps the dev tools' pytest plugins out, which the command does not use)."""
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
           "PYTEST_ADDOPTS": LEAN_ADDOPTS}
    return subprocess.run(["bash", "-c", command], check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=240)


def selected(bench: Path) -> tuple[int, int]:
    status = read_json(bench / "last_run.json")
    return status["selected"], status["scored"]


@pytest.mark.parametrize("xdist", XDIST)
def test_scenario_flipped_and_failed_commands_run_as_printed(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                             xdist: list[str]) -> None:
    bench = write_benchmark(pytester.path, scenarios=ROWS, spec={"gate": {"mode": "thresholds"}})
    bench_env.set_responder(judge_fails())
    base = pytester.runpytest("--benchmark=demo", "--evalbench-cache=off", "--evalbench-save-baseline", *QUIET, *xdist)
    assert base.ret == 0
    bench_env.set_responder(judge_fails(*FAILING))
    md = pytester.path / "summary.md"
    result = pytester.runpytest("--benchmark=demo", "--evalbench-cache=off", "--evalbench-compare",
                                f"--evalbench-markdown={md}", *QUIET, *xdist)
    result.assert_outcomes(passed=2, failed=2)
    out = result.stdout.str()
    flipped = terminal_command(out, "flipped pass->fail since the baseline (2)")
    assert flipped == markdown_command(md.read_text(), "Flipped pass → fail")
    assert flipped.startswith("pytest --benchmark=demo --evalbench-cache=off ")
    failed = terminal_command(out, "rerun the failed and errored cases with:")
    assert failed == markdown_command(md.read_text(), "Rerun the failed and errored cases")

    for command in (flipped, failed):
        rerun = shell(command, pytester.path)
        assert rerun.returncode == 0, rerun.stdout + rerun.stderr  # gate: thresholds, no rule configured
        assert "2 failed" in rerun.stdout and "passed" not in rerun.stdout.splitlines()[-1]
        assert selected(bench) == (2, 2)
        rows = {r["id"] for r in read_json(bench / "runs" / "tgt" / "scores.json") if r["passed"] is False}
        assert rows == set(FAILING)


@pytest.mark.parametrize("xdist", XDIST)
def test_dataset_flipped_and_failed_commands_run_as_printed(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                            xdist: list[str]) -> None:
    bench = write_dataset(pytester.path, gate={"mode": "thresholds"})
    bench_env.set_responder(scores({}))
    base = pytester.runpytest("--benchmark=agents", "--evalbench-cache=off", "--evalbench-save-baseline", *QUIET, *xdist)
    assert base.ret == 0
    bench_env.set_responder(scores({"CoherenceExplain": 2}))
    md = pytester.path / "summary.md"
    result = pytester.runpytest("--benchmark=agents", "--evalbench-cache=off", "--evalbench-compare",
                                f"--evalbench-markdown={md}", *QUIET, *xdist)
    result.assert_outcomes(passed=2, failed=2)
    out = result.stdout.str()
    flipped = terminal_command(out, "flipped pass->fail since the baseline (2)")
    assert flipped == markdown_command(md.read_text(), "Flipped pass → fail")
    assert "benchmarks/agents/cases.jsonl::" in flipped
    failed = terminal_command(out, "rerun the failed and errored cases with:")
    for command in (flipped, failed):
        rerun = shell(command, pytester.path)
        assert "2 failed" in rerun.stdout, rerun.stdout + rerun.stderr
        assert rerun.returncode == 0  # gate: thresholds, no rule configured
        assert selected(bench) == (2, 2)


def test_flipped_command_of_a_shard_keeps_its_shard_and_cwd(pytester: pytest.Pytester,
                                                           bench_env: FakeLLMServer) -> None:
    rows = [scenario(f"m01_s{i:03d}_v01", "m01") for i in range(1, 9)]
    write_benchmark(pytester.path, scenarios=rows)
    bench_env.set_responder(judge_fails())
    shard = ["--evalbench-shard=2/2", "--evalbench-cache=off"]
    assert pytester.runpytest("--benchmark=demo", *shard, "--evalbench-save-baseline", *QUIET).ret == 0
    shard_dir = pytester.path / "benchmarks" / "demo" / "shards" / "2-of-2"
    ids = [r["id"] for r in read_json(shard_dir / "runs" / "tgt" / "scores.json")]
    bench_env.set_responder(judge_fails(*ids))
    result = pytester.runpytest("--benchmark=demo", *shard, "--evalbench-compare", *QUIET)
    flipped = terminal_command(result.stdout.str(), "flipped pass->fail since the baseline")
    assert "--evalbench-shard=2/2" in flipped
    # pasted in another directory: node ids are printed relative to where pytest was started,
    # so a command printed in the benchmark directory runs there too
    sub = pytester.path / "benchmarks"
    result = subprocess.run([sys.executable, "-m", "pytest", f"--rootdir={pytester.path}", "--benchmark=demo", *shard,
                             "--evalbench-compare", *QUIET], check=False, cwd=sub,
                            capture_output=True, text=True, env={**os.environ}, timeout=240)
    from_sub = terminal_command(result.stdout, "flipped pass->fail since the baseline")
    assert "'demo/scenarios.json::" in from_sub
    for command, cwd in ((flipped, pytester.path), (from_sub.replace("pytest ", f"pytest --rootdir={pytester.path} ", 1),
                                                    sub)):
        rerun = shell(command, cwd)
        assert f"{len(ids)} failed" in rerun.stdout, rerun.stdout + rerun.stderr
        assert selected(shard_dir) == (len(ids), len(ids))


@pytest.mark.parametrize("xdist", XDIST)
def test_record_command_after_replay_misses_runs_as_printed(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                             xdist: list[str]) -> None:
    bench = write_benchmark(pytester.path, scenarios=ROWS)
    bench_env.set_responder(judge_fails())
    result = pytester.runpytest("--benchmark=demo", "--evalbench-cache=replay", *QUIET, *xdist)
    assert result.ret == EXIT_INCOMPLETE
    record = terminal_command(result.stdout.str(), "record the missing or corrupt cache entries with:")
    assert "--evalbench-cache" not in record  # the default mode, on, records them
    rerun = shell(record, pytester.path)
    assert rerun.returncode == 0 and "4 passed" in rerun.stdout, rerun.stdout + rerun.stderr
    bench_env.reset()
    replay = pytester.runpytest("--benchmark=demo", "--evalbench-cache=replay", *QUIET, *xdist)
    assert replay.ret == 0 and bench_env.requests == []
    assert selected(bench) == (4, 4)


def test_install_hint_of_the_local_extra_runs_as_printed(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    pytest.importorskip("pip")
    if __import__("importlib").util.find_spec("llama_cpp") is not None:
        pytest.skip("the [local] extra is installed: no hint is printed")
    write_benchmark(pytester.path, scenarios=ROWS[:1])
    result = pytester.runpytest("--benchmark=demo", "--evalbench-provider=local", "--evalbench-cache=off", *QUIET)
    assert result.ret == EXIT_INCOMPLETE
    hint = re.search(r"needs the \[local\] extra: (.+?) \(llama-cpp-python", result.stdout.str()).group(1)
    # executed for real it compiles llama.cpp for minutes: pip resolves the same target without installing
    done = shell(hint + " --dry-run --no-deps", pytester.path / "benchmarks")
    assert done.returncode == 0 and "Would install pytest-evalbench" in done.stdout, done.stdout + done.stderr


def test_benchmark_hint_runs_as_printed(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=ROWS[:1])
    bench_env.set_responder(judge_fails())
    result = pytester.runpytest("benchmarks/demo")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    hint = re.search(r"its cases run only with `(.+?)`", result.stdout.str()).group(1)
    rerun = shell(hint, pytester.path)
    assert rerun.returncode == 0 and "1 passed" in rerun.stdout, rerun.stdout + rerun.stderr


def test_generate_scenarios_hint_runs_as_printed_from_another_directory(pytester: pytest.Pytester,
                                                                       bench_env: FakeLLMServer) -> None:
    from test_authoring import TWO_METRICS, generator, write_spec

    bench = write_spec(pytester.path, metrics=TWO_METRICS)
    bench_env.set_responder(generator)
    sub = pytester.path / "benchmarks"
    result = subprocess.run([sys.executable, "-m", "pytest", f"--rootdir={pytester.path}", "--benchmark=demo",
                             *QUIET], check=False, cwd=sub, capture_output=True, text=True, timeout=240)
    assert result.returncode == pytest.ExitCode.INTERRUPTED, result.stdout + result.stderr
    hint = re.search(r"generate it with `(.+?)`", result.stdout).group(1)
    assert f"--root {pytester.path}" in hint
    done = shell(hint, sub)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(json.loads((bench / "scenarios.json").read_text())) == 4
