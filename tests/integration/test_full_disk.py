"""A full disk while a refreshed run writes its cache and result files: whatever file the disk
refuses (a cache entry, the record spool, a run file, results.json, .sessions.json, history.jsonl,
report.html, last_run.json itself), the run ends with exit 7 (4 when it cannot even start), one line
names the file, the earlier result files are intact and last_run.json is final, never "running".

The disk is Linux's /dev/full (every write fails with ENOSPC, as a full disk's does): the tested
process's writers are handed a descriptor of it in place of the files named by EVALBENCH_FULL, so the
error comes from the kernel at the write, the flush or the close, wherever a full disk raises it. The
runs are in-process where no xdist worker is involved: the conftest gives the writers back when the
run ends."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import scenario, script, write_benchmark

from pytest_evalbench.base import files, spool
from pytest_evalbench.testing import FakeLLMServer, Reply

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")

FULL_DISK = '''
import collections, fnmatch, os, tempfile
import pytest_evalbench.base.files as files
import pytest_evalbench.base.spool as spool

WANTED = {}  # pattern -> the first write of a matching file that fails (and every later one)
for item in filter(None, os.environ.get("EVALBENCH_FULL", "").split(",")):
    pattern, _, nth = item.partition("@")
    WANTED[pattern] = int(nth or 1)
SEEN = collections.Counter()


def refused(path):
    for pattern, nth in WANTED.items():
        if fnmatch.fnmatch(str(path), "*" + pattern):
            SEEN[pattern] += 1
            return SEEN[pattern] >= nth
    return False


real_temp, real_append, real_spool = files._temp_file, getattr(files, "_open_append_fd", None), tempfile.TemporaryFile


def temp_file(path):
    if refused(path):
        return os.open("/dev/full", os.O_WRONLY), path.parent / f".{path.name}.full.tmp"
    return real_temp(path)


def append_fd(path):
    return os.open("/dev/full", os.O_RDWR) if refused(path) else real_append(path)


class SpoolFiles:
    gettempdir = staticmethod(tempfile.gettempdir)

    @staticmethod
    def TemporaryFile(**kwargs):
        if refused("spool"):
            return open("/dev/full", "w+b", buffering=kwargs.get("buffering", -1))
        return real_spool(**kwargs)


if WANTED:  # never in the complete run before
    files._temp_file, files._open_append_fd, spool.tempfile = temp_file, append_fd, SpoolFiles


import pytest


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    # the run is in-process: the package's writers are given back once everything is written
    files._temp_file, files._open_append_fd, spool.tempfile = real_temp, real_append, tempfile
'''

ROWS = [scenario("m01_s001_v01", "m01"), scenario("m01_s002_v01", "m01")]
NO_SPACE = "No space left on device"
RESULT_FILES = ("results.json", "runs/tgt/scores.json", "runs/tgt/conversations.json", "runs/tgt/cost.json",
                "runs/tgt/.usage.json", ".sessions.json", "history.jsonl", "report.html")


def refreshed_run(pytester: pytest.Pytester, server: FakeLLMServer, full: str) -> tuple[pytest.RunResult, Path,
                                                                                        dict[str, bytes]]:
    """A complete run, then a refreshed one whose writes of the files `full` names meet a full disk:
    its result, the benchmark directory and the result files of the complete run."""
    bench = write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1})
    pytester.makeconftest(FULL_DISK)
    server.set_responder(script(True))
    first = pytester.runpytest_inprocess("--benchmark=demo")
    assert first.ret == 0, first.stdout.str()[-2000:]
    before = {name: (bench / name).read_bytes() for name in RESULT_FILES}
    writers = (files._temp_file, files._open_append_fd, spool.tempfile)
    os.environ["EVALBENCH_FULL"] = full
    try:
        result = pytester.runpytest_inprocess("--benchmark=demo", "--evalbench-cache=refresh")
    finally:
        del os.environ["EVALBENCH_FULL"]
    assert (files._temp_file, files._open_append_fd, spool.tempfile) == writers  # the conftest gave them back
    return result, bench, before


@pytest.mark.parametrize(("full", "names"), [
    ("spool", ".evalbench-spool-* (the run's record spool)"),  # the controller's records, as they arrive
    ("scores.json", "runs/tgt/scores.json"),
    pytest.param("results.json", "results.json", marks=pytest.mark.slow),  # the same writers as scores.json's
    pytest.param("conversations.json", "runs/tgt/conversations.json", marks=pytest.mark.slow),
    pytest.param("cost.json", "runs/tgt/cost.json", marks=pytest.mark.slow),
    pytest.param(".usage.json", "runs/tgt/.usage.json", marks=pytest.mark.slow),
    (".sessions.json", ".sessions.json"),
    ("history.jsonl", "history.jsonl"),
    ("report.html", "report.html"),
    ("last_run.json@2", "last_run.json"),  # its final state: written over the bytes "running" reserved
    ("results.json,report.html,history.jsonl,last_run.json@2", "results.json"),  # nothing more fits
])
def test_a_full_disk_ends_the_run_incomplete_naming_the_file(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                             full: str, names: str) -> None:
    result, bench, before = refreshed_run(pytester, bench_env, full)
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 7, out[-3000:]
    assert "INTERNALERROR" not in out and "Traceback" not in out, out[-3000:]
    named = [line for line in out.splitlines() if line.startswith("ERROR: ") and NO_SPACE in line]
    assert len(named) == 1, out[-3000:]  # one line, naming the file the disk refused
    assert f"{bench / names}: could not be written ({NO_SPACE})" in named[0]
    last = json.loads((bench / "last_run.json").read_text())
    assert last["status"] == "error" and f"{names}: could not be written ({NO_SPACE})" in last["error"]
    refused = {name for name in RESULT_FILES if any(part.split("@")[0] in name for part in full.split(","))}
    for name in refused:
        assert (bench / name).read_bytes() == before[name], name  # the earlier file, whole
    if full == "spool":  # the records are incomplete: no result file is replaced
        assert all((bench / name).read_bytes() == before[name] for name in RESULT_FILES if name != "report.html")
    for path in bench.rglob("*.json"):
        json.loads(path.read_text())  # every file is whole JSON: nothing torn, no temp file left
    assert not list(bench.rglob("*.tmp"))


def test_cache_entries_the_disk_refuses_make_the_run_incomplete(pytester: pytest.Pytester,
                                                                bench_env: FakeLLMServer) -> None:
    # the answers were scored, but the cache a team commits for replay does not hold them
    result, bench, _ = refreshed_run(pytester, bench_env, ".evalbench-cache/*/*.json")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 7, out[-3000:]
    assert "INTERNALERROR" not in out and "Traceback" not in out
    result.stdout.fnmatch_lines([f"*cache entries not written: {bench / '.evalbench-cache'} ({NO_SPACE})*"])
    last = json.loads((bench / "last_run.json").read_text())
    assert last["status"] == "incomplete"
    assert any("cache entries not written" in reason for reason in last["incomplete"])


def test_a_disk_full_before_the_run_runs_nothing(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    result, bench, before = refreshed_run(pytester, bench_env, "last_run.json")
    assert result.ret == 4
    result.stderr.fnmatch_lines([f"*last_run.json: could not be written ({NO_SPACE})*nothing was run*"])
    assert json.loads((bench / "last_run.json").read_text())["status"] == "complete"  # the earlier run's, whole
    assert all((bench / name).read_bytes() == before[name] for name in RESULT_FILES)


@pytest.mark.slow  # an xdist run in a subprocess: the ledger file exists only when workers share a budget
def test_a_full_disk_under_the_shared_budget_ledger_ends_the_run_incomplete(pytester: pytest.Pytester,
                                                                           bench_env: FakeLLMServer) -> None:
    """`--evalbench-max-cost` with xdist workers keeps one ledger file; a disk that refuses it ends
    every item it stops as an error naming the file, the run exit 7 with no traceback, last_run.json final."""
    bench = write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1})
    pytester.makeconftest(FULL_DISK)
    bench_env.set_responder(script(True))
    os.environ["EVALBENCH_FULL"] = "ledger.json"
    try:
        result = pytester.runpytest_subprocess("--benchmark=demo", "-n", "2", "--evalbench-max-cost=5", timeout=120)
    finally:
        del os.environ["EVALBENCH_FULL"]
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 7, out[-3000:]
    assert "INTERNALERROR" not in out and "Traceback" not in out, out[-3000:]
    result.stdout.fnmatch_lines([f"ERROR 2 items: *ledger.json: could not be written ({NO_SPACE})*"])
    last = json.loads((bench / "last_run.json").read_text())
    assert last["status"] == "incomplete" and last["incomplete"] == ["2 items error"]


def rate_limited_run(pytester: pytest.Pytester, server: FakeLLMServer, full: str) -> tuple[pytest.RunResult, Path]:
    """A run whose endpoint sends rate-limit headers (so the machine-wide slot file `.endpoint-limits`
    is written at every answer), on a disk that refuses the files `full` names."""
    bench = write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1})
    pytester.makeconftest(FULL_DISK)
    answer = script(True)
    server.set_responder(lambda r: Reply(content=answer(r), headers={"x-ratelimit-limit-requests": "60000",
                                                                     "x-ratelimit-remaining-requests": "10"})
                         if isinstance(answer(r), str) else answer(r))
    os.environ["EVALBENCH_FULL"] = full
    try:
        result = pytester.runpytest_subprocess("--benchmark=demo", timeout=120)
    finally:
        del os.environ["EVALBENCH_FULL"]
    return result, bench


@pytest.mark.slow  # the whole disk full from the slot file on: ends like every full disk (the test above)
def test_a_full_disk_under_the_rate_limit_slot_file_ends_the_run_incomplete(pytester: pytest.Pytester,
                                                                            bench_env: FakeLLMServer) -> None:
    # the slot file is the first the disk refuses; everything written after it is refused too
    result, bench = rate_limited_run(pytester, bench_env, ".endpoint-limits,.evalbench-cache/*/*.json,spool,"
                                                          "scores.json,results.json,report.html,history.jsonl")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 7, out[-3000:]
    assert "INTERNALERROR" not in out and "Traceback" not in out, out[-3000:]
    assert json.loads((bench / "last_run.json").read_text())["status"] in ("error", "incomplete")


def test_a_rate_limit_slot_file_the_disk_refuses_is_one_warning(pytester: pytest.Pytester,
                                                                bench_env: FakeLLMServer) -> None:
    """The slot file only paces: when the disk refuses it, this process paces alone, in memory (every
    row is still scored, so the run's verdict stands), and one warning names the file."""
    result, bench = rate_limited_run(pytester, bench_env, ".endpoint-limits")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 0, out[-3000:]
    assert "INTERNALERROR" not in out and "Traceback" not in out, out[-3000:]
    named = [line for line in out.splitlines() if ".endpoint-limits: could not be written" in line]
    assert len(named) == 1, out[-3000:]
    assert NO_SPACE in named[0] and "this process paces its requests alone, in memory" in named[0], named
    assert json.loads((bench / "last_run.json").read_text())["status"] == "complete"
