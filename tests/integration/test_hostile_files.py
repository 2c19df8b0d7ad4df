"""Hostile files (issue 25, rows 1, 9 and 10): shard artifacts naming paths, symbolic links out of the
benchmark directory, non-regular or unwritable paths on the command line, a corrupted result file
before a subset run. Each attack goes in; the expected behaviour comes out: one line naming the
file, exit 4 before any LLM call (or nothing written at all), nothing outside the benchmark touched."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import read_json, scenario, script, write_benchmark

from pytest_evalbench.__main__ import main
from pytest_evalbench.testing import FakeLLMServer

ROWS = [scenario("m01_s001_v01", "m01"), scenario("m01_s002_v01", "m01"),
        scenario("m02_s001_v01", "m02"), scenario("m02_s002_v01", "m02")]
XDIST = pytest.mark.parametrize("xdist", [[], pytest.param(["-n", "2"], marks=pytest.mark.slow)], ids=["n0", "n2"])
CANARY = "canary: must stay as it is\n"


def make_benchmark(pytester: pytest.Pytester) -> Path:
    """Four rows, one turn; failed cases do not fail the build (a clean run exits 0)."""
    return write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1}, gate={"mode": "thresholds"})


def outside_dir(pytester: pytest.Pytester) -> Path:
    """A directory next to the project (not under benchmarks/NAME/), empty."""
    path = pytester.path.parent / f"{pytester.path.name}-outside"
    path.mkdir()
    return path


def outside_file(pytester: pytest.Pytester) -> Path:
    path = outside_dir(pytester) / "victim.txt"
    path.write_text(CANARY)
    return path


def untouched(path: Path) -> bool:
    """An outside file still holds the canary, or an outside directory is still empty."""
    return path.read_text() == CANARY if path.is_file() else not any(path.iterdir())


def output(result: pytest.RunResult) -> str:
    return "\n".join(result.outlines + result.errlines)


# ---------------------------------------------------------------------------- evalbench merge
def shard_records(pytester: pytest.Pytester, bench_env: FakeLLMServer, xdist: list[str]) -> Path:
    bench = write_benchmark(pytester.path, scenarios=ROWS[:2], generation={"turns": 1})
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo", "--evalbench-shard=1/1", *xdist).assert_outcomes(passed=2)
    return bench / "shards" / "1-of-1" / "records.json"


def set_target(record: dict[str, Any], target: str) -> None:
    """Every place a scenario record names its target (a consistent forgery)."""
    record["target_id"] = record["score"]["target_model"] = record["conversation"]["target"]["id"] = target


def set_scenario(record: dict[str, Any], sid: str) -> None:
    record["conversation"]["id"] = record["score"]["id"] = sid


FORGERIES = {  # how a record is forged (given a directory outside the project), the field named
    "target-dotdot": (lambda r, out: set_target(r, "../../../../escaped"), "target_id"),
    "target-absolute": (lambda r, out: set_target(r, str(out / "escaped")), "target_id"),
    "target-newline": (lambda r, out: set_target(r, "tgt\n"), "target_id"),
    "scenario-newline": (lambda r, out: set_scenario(r, "m01_s001_v01\n"), "conversation.id"),
    "scenario-dotdot": (lambda r, out: set_scenario(r, "../m01"), "conversation.id"),
    "target-mismatch": (lambda r, out: r.update(target_id="other"), "conversation.target.id"),
    "other-benchmark": (lambda r, out: r.update(benchmark="elsewhere"), "benchmark"),
    "not-a-record": (lambda r, out: r["conversation"].pop("transcript"), None),
}


@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_merge_refuses_forged_ids(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                  capsys: pytest.CaptureFixture[str], forgery: str) -> None:
    """Row 1: a shard whose record names `../../x` (or any id the loaders would refuse) wrote anywhere."""
    records_file = shard_records(pytester, bench_env, ["-n", "1"] if forgery == "target-dotdot" else [])
    bench = records_file.parents[2]
    records = read_json(records_file)
    node_id = sorted(records)[0]
    change, field = FORGERIES[forgery]
    outside = outside_dir(pytester)
    change(records[node_id], outside)
    records_file.write_text(json.dumps(records))
    capsys.readouterr()

    assert main(["merge", "demo", str(records_file.parent), "--root", str(pytester.path)]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{records_file}, row {node_id}" in err, err
    if field:
        assert f"field '{field}'" in err
    assert not (bench / "results.json").exists() and not (bench / "runs").exists()  # nothing written
    assert not list(pytester.path.parent.glob("escaped*")) and untouched(outside)


def test_merge_never_writes_through_a_linked_runs_directory(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    records_file = shard_records(pytester, bench_env, [])
    bench = records_file.parents[2]
    outside = outside_dir(pytester)
    (bench / "runs").symlink_to(outside, target_is_directory=True)
    assert main(["merge", "demo", str(records_file.parent), "--root", str(pytester.path)]) == 4
    assert "outside the benchmark directory" in capsys.readouterr().err
    assert untouched(outside)


def test_merge_of_sound_shards_still_writes(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    records_file = shard_records(pytester, bench_env, [])
    assert main(["merge", "demo", str(records_file.parent), "--root", str(pytester.path)]) == 0
    assert len(read_json(records_file.parents[2] / "runs" / "tgt" / "scores.json")) == 2


# ---------------------------------------------------------------------------- links out of the benchmark
LINKS = {  # what is replaced by a link out of the benchmark, whether the link is to a directory, extra args
    "history.jsonl": (False, []),
    "last_run.json": (False, []),
    "report.html": (False, []),
    ".results.lock": (False, []),
    "results.json": (False, []),
    "runs": (True, []),
    "runs/tgt": (True, []),
    "runs/tgt/scores.json": (False, []),
    "shards": (True, ["--evalbench-shard=1/1"]),
    ".evalbench-cache": (True, []),
    ".evalbench-cache/ab": (True, []),
    ".evalbench-cache/.rate-limit": (False, ["--evalbench-rate-limit=6000"]),
    ".evalbench-cache/.rate-limit.lock": (False, ["--evalbench-rate-limit=6000"]),
}


@XDIST
@pytest.mark.parametrize("name", list(LINKS))
def test_no_write_follows_a_link_out_of_the_benchmark(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                      name: str, xdist: list[str]) -> None:
    """Rows 9 and 10: history.jsonl, runs/, the lock... a symbolic link out of the benchmark was
    followed (the lock truncated its target). Now: exit 4 before any call, nothing outside touched."""
    bench = make_benchmark(pytester)
    bench_env.set_responder(script(True))
    is_dir, args = LINKS[name]
    victim = outside_dir(pytester) if is_dir else outside_file(pytester)
    link = bench / name
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim, target_is_directory=is_dir)

    result = pytester.runpytest("--benchmark=demo", *args, *xdist)
    assert result.ret == 4, output(result)
    assert str(link) in output(result)
    assert "symbolic link" in output(result) or "outside the benchmark directory" in output(result)
    assert bench_env.requests == []
    assert untouched(victim) and link.is_symlink()
    if name != "last_run.json":
        assert not (bench / "last_run.json").exists()  # refused before the session wrote anything


def test_a_link_inside_the_benchmark_is_fine(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    """Only links *out* are refused: runs/ may point at another directory of the benchmark."""
    bench = make_benchmark(pytester)
    bench_env.set_responder(script(True))
    (bench / "all-runs").mkdir()
    (bench / "runs").symlink_to(bench / "all-runs", target_is_directory=True)
    result = pytester.runpytest("--benchmark=demo")
    assert result.ret == 0, output(result)
    assert len(read_json(bench / "all-runs" / "tgt" / "scores.json")) == 4


# ---------------------------------------------------------------------------- paths on the command line
def fifo(pytester: pytest.Pytester) -> Path:
    path = pytester.path / "baseline.fifo"
    os.mkfifo(path)
    return path


GUARDED = ("import resource, sys, pytest; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
           "sys.exit(pytest.main(sys.argv[1:]))")


def run_guarded(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """pytest in a child process with at most 3 GiB of address space and a minute: should the check
    regress, reading /dev/zero fails there instead of eating the machine's memory, a fifo times out."""
    return pytester.run(sys.executable, "-c", GUARDED, *args, timeout=60)


COMPARE = {
    "dev-zero": lambda p: Path("/dev/zero"),
    "fifo": fifo,
    "directory": lambda p: p.path,
}


@XDIST
@pytest.mark.parametrize("what", list(COMPARE))
def test_non_regular_compare_file_is_a_usage_error(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                   what: str, xdist: list[str]) -> None:
    """Row 10: `--evalbench-compare=/dev/zero` read forever (a fifo blocks forever)."""
    make_benchmark(pytester)
    bench_env.set_responder(script(True))
    path = COMPARE[what](pytester)
    result = run_guarded(pytester, "--benchmark=demo", f"--evalbench-compare={path}", *xdist)
    assert result.ret == 4, output(result)
    assert f"{path}: the baseline to compare with is a" in output(result) and "not a regular file" in output(result)
    assert bench_env.requests == []


OUTPUTS = {
    "save-baseline-proc": ("--evalbench-save-baseline", lambda p: "/proc/version", "no file can be written in /proc"),
    "save-baseline-dir": ("--evalbench-save-baseline", lambda p: str(p.path), "is a directory"),
    "html-dir": ("--evalbench-html", lambda p: str(p.path), "is a directory"),
    "markdown-fifo": ("--evalbench-markdown", lambda p: str(fifo(p)), "is a fifo"),
    "junitxml-fifo": ("--junitxml", lambda p: str(fifo(p)), "is a fifo"),
    "baseline-no-dir": ("--evalbench-save-baseline", lambda p: str(p.path / "missing" / "b.json"), "does not exist"),
    "html-under-a-file": ("--evalbench-html", lambda p: str(p.path / "benchmarks" / "demo" / "benchmark.yaml" / "r.html"),
                          "(Not a directory)"),
}


@XDIST
@pytest.mark.parametrize("what", list(OUTPUTS))
def test_unwritable_output_path_is_a_usage_error(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                 what: str, xdist: list[str]) -> None:
    """Row 9: `--evalbench-save-baseline=/proc/version` was a traceback after the run. Explicit output
    paths may be anywhere, but must be a regular file or new, in a directory that takes new files."""
    bench = make_benchmark(pytester)
    bench_env.set_responder(script(True))
    option, value, message = OUTPUTS[what]
    path = value(pytester)
    result = pytester.runpytest("--benchmark=demo", f"{option}={path}", *xdist)
    assert result.ret == 4, output(result)
    assert f"{option}={path}" in output(result) and message in output(result)
    assert "Traceback" not in output(result)
    assert bench_env.requests == [] and not (bench / "last_run.json").exists()


def test_explicit_output_paths_anywhere_are_written(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                    tmp_path_factory: pytest.TempPathFactory) -> None:
    make_benchmark(pytester)
    bench_env.set_responder(script(True))
    elsewhere = tmp_path_factory.mktemp("reports")
    result = pytester.runpytest("--benchmark=demo", f"--evalbench-html={elsewhere / 'new' / 'r.html'}",
                                f"--evalbench-markdown={elsewhere / 's.md'}", f"--junitxml={elsewhere / 'j.xml'}",
                                f"--evalbench-save-baseline={elsewhere / 'b.json'}")
    assert result.ret == 0, output(result)
    assert all((elsewhere / name).is_file() for name in ("new/r.html", "s.md", "j.xml", "b.json"))


CACHE_DIRS = {
    "under-a-file": lambda p: p.path / "a-file" / "cache",
    "proc": lambda p: Path("/proc/evalbench-cache"),
}


@XDIST
@pytest.mark.parametrize("where", list(CACHE_DIRS))
def test_unwritable_cache_directory_is_a_usage_error(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                     where: str, xdist: list[str]) -> None:
    """Row 10: an unwritable cache directory was silent (every answer paid for, none kept)."""
    make_benchmark(pytester)
    (pytester.path / "a-file").write_text("in the way\n")
    bench_env.set_responder(script(True))
    cache = CACHE_DIRS[where](pytester)
    result = pytester.runpytest("--benchmark=demo", f"--evalbench-cache-dir={cache}", *xdist)
    assert result.ret == 4, output(result)
    assert f"{cache}: the response cache directory (--evalbench-cache-dir) is not writable" in output(result)
    assert bench_env.requests == []
    # replay and off never write the cache: nothing to check, the run goes on
    assert pytester.runpytest("--benchmark=demo", f"--evalbench-cache-dir={cache}", "--evalbench-cache=off",
                              *xdist).ret == 0


def test_unwritable_default_cache_directory_is_a_usage_error(pytester: pytest.Pytester,
                                                             bench_env: FakeLLMServer) -> None:
    bench = make_benchmark(pytester)
    (bench / ".evalbench-cache").write_text("a file where the cache directory goes\n")
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo")
    assert result.ret == 4, output(result)
    assert f"{bench / '.evalbench-cache'}: is not a directory" in output(result)
    assert bench_env.requests == []


# ---------------------------------------------------------------------------- corrupted result files
CORRUPTIONS = {
    "truncated": lambda text: text[: len(text) // 2],
    "not-json": lambda text: "this is not JSON\n",
    "object": lambda text: '{"rows": []}\n',
}


@pytest.mark.parametrize(("filename", "how", "xdist"), [
    *[("scores.json", how, []) for how in CORRUPTIONS],
    ("scores.json", "truncated", ["-n", "1"]),  # under xdist each corruption is read as without it: the slow stage's
    *[pytest.param("scores.json", how, ["-n", "2"], marks=pytest.mark.slow) for how in ("not-json", "object")],
    ("conversations.json", "truncated", []), ("conversations.json", "not-json", ["-n", "1"]),
    (".usage.json", "truncated", []), (".usage.json", "list", [])])
def test_corrupted_result_file_before_a_subset_run_is_an_error(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                               filename: str, how: str, xdist: list[str]) -> None:
    """Row 10: a truncated scores.json before a `-k` run: the 3 rows not run were silently dropped,
    exit 0. Now: exit 4 naming the file, nothing written over it, last_run.json says why."""
    bench = make_benchmark(pytester)
    bench_env.set_responder(script(True))
    assert pytester.runpytest("--benchmark=demo").ret == 0
    path = bench / "runs" / "tgt" / filename
    path.write_text("[]\n" if how == "list" else CORRUPTIONS[how](path.read_text()))  # the ledger is an object
    corrupted = path.read_bytes()
    others = {p: p.read_bytes() for p in (bench / "runs" / "tgt").iterdir() if p != path}

    result = pytester.runpytest("--benchmark=demo", "-k", "m01_s001_v01", *xdist)
    assert result.ret == 4, output(result)
    assert f"{path}: result file" in output(result)
    assert path.read_bytes() == corrupted and all(p.read_bytes() == data for p, data in others.items())
    status = read_json(bench / "last_run.json")
    assert status["status"] == "error" and str(path) in status["error"]


def test_rows_of_another_version_are_still_replaced_not_an_error(pytester: pytest.Pytester,
                                                                 bench_env: FakeLLMServer) -> None:
    """A readable file with a row this version cannot use keeps the documented behaviour: a warning,
    the row replaced, the other rows kept."""
    bench = make_benchmark(pytester)
    bench_env.set_responder(script(True))
    assert pytester.runpytest("--benchmark=demo").ret == 0
    path = bench / "runs" / "tgt" / "scores.json"
    rows = read_json(path)
    rows[0]["present"] = "maybe"
    path.write_text(json.dumps(rows))
    result = pytester.runpytest("--benchmark=demo", "-k", "m01_s001_v01")
    assert result.ret == 0, output(result)
    assert len(read_json(path)) == 4


@XDIST
@pytest.mark.parametrize("filename", ["case_results.json", "cost.json"])
def test_corrupted_dataset_result_file_before_a_subset_run_is_an_error(pytester: pytest.Pytester,
                                                                       bench_env: FakeLLMServer, filename: str,
                                                                       xdist: list[str]) -> None:
    """The dataset kind's files: case_results.json cut short lost every case not run; an unreadable
    cost.json silently lost the phases other commands wrote there."""
    from test_dataset import scores, write_dataset

    bench = write_dataset(pytester.path)
    bench_env.set_responder(scores({}))
    assert pytester.runpytest("--benchmark=agents").ret == 0
    path = bench / filename
    path.write_text(path.read_text()[:40])
    result = pytester.runpytest("--benchmark=agents", "-k", "curator-001", *xdist)
    assert result.ret == 4, output(result)
    assert f"{path}: result file is not valid JSON" in output(result)
    assert len(path.read_text()) == 40
