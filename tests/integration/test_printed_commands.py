"""Every command the plugin prints runs as printed (issue 24): each is taken from a real session's
terminal output or Markdown summary and executed in a shell, against the fake server."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import read_json, scenario, script, write_benchmark
from test_authoring import (
    generator,  # here, not in the responder: an in-process run makes the copied project's conftest the `conftest` module
)
from test_dataset import scores, write_dataset

from conftest import LEAN_ADDOPTS
from pytest_evalbench.gate.decision import EXIT_INCOMPLETE
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
        counts = rerun.stdout.splitlines()[-2]  # pytest's own, above the verdict line
        assert "2 failed" in counts and "passed" not in counts, rerun.stdout
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


# --------------------------------------------------------------------------- the docs' commands and the flows' lines

ROOT = Path(__file__).resolve().parents[2]
SHELL_LANGS = ("bash", "console", "sh", "shell", "")
NOT_RUN_HERE = {
    r"^pytest -n 2$": "the project's own test suite, of which this test is a part",
    r" -n \d": "the same run in xdist worker processes (each starts in seconds); xdist runs are the xdist tests' job",
    r"--evalbench-provider=local": "needs the [local] extra (the embedded model), which CI's local-model step installs",
    r"--evalbench-cache=refresh": "re-records the demo's cache on the embedded model (the [local] extra)",
    r"--benchmark=humanebench": "a benchmark of the reader's own (the project ships no `humanebench`)",
    r"^evalbench mutate": "mutants ask new prompts no committed cache holds: it needs an endpoint (test_mutate.py runs "
                          "it against the fake server)",
    r"^evalbench view": "serves until Ctrl-C (test_view.py runs it and stops it)",
}
"""The visible rule: a command matching a pattern is not run by this test, for the reason given."""


def doc_commands() -> list[tuple[str, str]]:
    """(page, command) for every `pytest ...` and `evalbench ...` line of a shell block of the docs and the
    README, as a reader pastes it: continuation lines joined, a `$ ` prompt, a trailing comment, a venv's
    `bin/` and any install step before the last `&&` left out (the test runs in the installed package)."""
    out = []
    for page in [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]:
        blocks, lang, lines = [], None, []
        for line in page.read_text().splitlines():
            if line.strip().startswith("```"):
                if lang is None:
                    lang, lines = line.strip().removeprefix("```"), []
                else:
                    blocks += [lines] if lang in SHELL_LANGS else []
                    lang = None
            elif lang is not None:
                lines.append(line)
        for block in blocks:
            for line in re.sub(r"\\\n\s*", " ", "\n".join(block)).splitlines():
                command = re.sub(r"\s+# .*$", "", line.strip().removeprefix("$ ").split(" && ")[-1]).strip()
                command = re.sub(r"^\.venv[\w-]*/bin/", "", command)  # a venv's own pytest is `pytest` there
                if command.startswith(("pytest ", "evalbench ")):
                    out.append((str(page.relative_to(ROOT)), command))
    return out


def any_role(request: dict[str, Any]) -> Any:
    """Every role of every benchmark and command, whatever the model is called: the authoring
    commands' drafts, the judge (present, with its log-probabilities), the simulated user, the target."""
    from pytest_evalbench.testing import Reply
    from pytest_evalbench.testing.scripts import verdict_logprobs

    form = request.get("response_format")
    if form and form.get("json_schema", {}).get("name") in ("metrics", "scenarios", "variant"):
        return generator(request)
    if form:
        answer = {"justification": "because", "present": True}
        return Reply(content=json.dumps(answer), logprobs=verdict_logprobs(answer, 0.99))
    if "Thought" in str(request["messages"][0]["content"]):
        return "Thought: ok\nMessage: I need some help"
    return "Sure, where are you going?"


def run_printed(pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], command: str,
                base_url: str) -> tuple[int, str]:
    """Run a command as printed, in-process in the project's directory; an endpoint it names is the fake server."""
    from pytest_evalbench.__main__ import main

    argv = [re.sub(r"^(--evalbench-base-url=|--base-url=).*", rf"\g<1>{base_url}", arg)
            for arg in shlex.split(re.sub(r"(--base-url) (\S+)", r"\1=\2", command), comments=True)]
    if argv[0] == "pytest":
        result = pytester.runpytest_inprocess(*argv[1:])
        return int(result.ret), result.stdout.str()
    capsys.readouterr()
    code = main(argv[1:])
    said = capsys.readouterr()
    return code, said.out + said.err


def test_every_command_the_docs_show_and_the_flows_print_runs_as_printed(
        pytester: pytest.Pytester, bench_env: FakeLLMServer, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each distinct command of the docs' shell blocks runs in a copy of the project against the fake
    server and ends with a verdict (exit 0 or 1), in the order the pages show them; so do the `next:`
    lines of the authoring flow (init, gen-metrics, gen-scenarios) and the demo's rerun line. A command
    matching `NOT_RUN_HERE` is left out for the reason it gives."""
    shutil.copytree(ROOT / "benchmarks", pytester.path / "benchmarks",
                    ignore=shutil.ignore_patterns("runs", "results.json", "report.html", "history.jsonl", "last_run.json",
                                                  "baseline.json", "shards", "mutants.json"))
    shutil.copy(ROOT / "conftest.py", pytester.path)  # the app of benchmarks/support-app (docs/guides/your-app.md)
    bench_env.set_responder(any_role)
    monkeypatch.delenv("EVALBENCH_STORE", raising=False)  # the runs are recorded, as a reader's are: `evalbench runs`
    url = bench_env.base_url
    commands = list(dict.fromkeys(command for _, command in doc_commands()))
    skipped = {pattern: [c for c in commands if re.search(pattern, c)] for pattern in NOT_RUN_HERE}
    assert all(skipped.values()), f"a rule of NOT_RUN_HERE matches no command any more: {skipped}"
    failures, ran = [], []
    queue = [c for c in commands if not any(re.search(p, c) for p in NOT_RUN_HERE)]
    queue += ["evalbench gen-metrics travel --force --base-url http://localhost:8000/v1"]  # the authoring flow
    while queue:
        command = queue.pop(0)
        if command in ran or any(re.search(p, command) for p in NOT_RUN_HERE):
            continue
        ran.append(command)
        code, out = run_printed(pytester, capsys, command, url)
        if code not in (0, 1):
            failures.append(f"{command}: exit {code}\n{out[-1500:]}")
            continue
        printed = re.findall(r"^next: .*?run: (.+)$", out, re.M)  # the authoring commands' next step
        printed += re.findall(r"^(?:\$ |  )?((?:pytest|evalbench) --benchmark=\S+.*|pytest --benchmark=\S+)$", out, re.M)
        queue += [p.strip() for p in printed if p.strip() not in ran]  # after the pages' own sequences
    assert not failures, "\n\n".join(failures)
    for flow in ("evalbench init travel", "evalbench gen-scenarios travel --force --base-url",
                 "pytest --benchmark=travel --evalbench-base-url=", "pytest --benchmark=demo --lf"):
        assert any(c.startswith(flow) for c in ran), (flow, ran)
