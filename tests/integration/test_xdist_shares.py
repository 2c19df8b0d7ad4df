"""xdist that helps: fixed contiguous shares, whole-share prefetch, the concurrency split."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import JUDGE, TARGET, USER, scenario, script, write_benchmark

from pytest_evalbench.testing import FakeLLMServer

ROWS = [scenario(f"m01_s{i:03d}_v01", "m01") for i in range(1, 13)]


def distinct_user(request: dict) -> str:
    return "Message: I am " + re.search(r"persona of (\w+)", json.dumps(request)).group(1)


@pytest.mark.slow
def test_each_worker_runs_one_contiguous_share_and_prefetches_all_of_it(pytester: pytest.Pytester,
                                                                         bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1})
    bench_env.set_responder(script(True, user=distinct_user))
    bench_env.latency = 0.3
    result = pytester.runpytest("--benchmark=demo", "-n", "2", "-v", "--evalbench-cache=off",
                                "--evalbench-concurrency=8")
    result.assert_outcomes(passed=12)
    # 8 in flight in total (4 per worker): more than the 2 items per worker a next-item prefetch allows
    assert 4 < bench_env.peak_concurrency <= 8
    ran_on = {m.group(2): m.group(1) for m in re.finditer(r"\[(gw\d)\] \[\s*\d+%\] PASSED \S+::(m01_s\d+_v01)",
                                                          result.stdout.str())}
    assert len(ran_on) == 12
    assert [ran_on[r["id"]] for r in ROWS] == ["gw0"] * 6 + ["gw1"] * 6
    with_xdist = len(bench_env.requests)
    bench_env.reset()
    pytester.runpytest("--benchmark=demo", "--evalbench-cache=off").assert_outcomes(passed=12)
    assert len(bench_env.requests) == with_xdist == 12 * 3


@pytest.mark.parametrize("dist", ["loadfile", "loadscope"])
def test_whole_file_modes_keep_xdist_scheduling_and_start_the_whole_file(pytester: pytest.Pytester,
                                                                         bench_env: FakeLLMServer, dist: str) -> None:
    write_benchmark(pytester.path, scenarios=ROWS[:8], generation={"turns": 1})
    bench_env.set_responder(script(True, user=distinct_user))
    bench_env.latency = 0.3
    result = pytester.runpytest("--benchmark=demo", "-n", "2", "--dist", dist, "-v", "--evalbench-cache=off",
                                "--evalbench-concurrency=8")
    result.assert_outcomes(passed=8)
    assert len(set(re.findall(r"\[(gw\d)\] \[", result.stdout.str()))) == 1  # one file, one worker (either)
    assert bench_env.peak_concurrency == 4  # that worker's half of the concurrency, not one item at a time
    assert len(bench_env.requests) == 8 * 3  # nothing twice


def test_workers_collecting_different_items_is_a_clear_collection_error(pytester: pytest.Pytester,
                                                                        bench_env: FakeLLMServer) -> None:
    pytester.makeconftest("""
def pytest_collection_modifyitems(config, items):
    if getattr(config, "workerinput", {}).get("workerid") == "gw1":
        del items[-1]
""")
    write_benchmark(pytester.path, scenarios=ROWS[:4], generation={"turns": 1})
    bench_env.set_responder(script(True, user=distinct_user))
    result = pytester.runpytest("--benchmark=demo", "-n", "2")
    result.stdout.fnmatch_lines(["*Different tests were collected between gw0 and gw1*", "*-*m01_s004_v01*"])
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["llm: 0 requests, *"])  # no worker started its share: nothing was paid for


@pytest.mark.slow
def test_shares_also_when_xdist_is_loaded_by_module_name(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """With plugin autoload off, `-p xdist.plugin` registers xdist under another name: the glue must
    still see that xdist distributes (shares, whole-share prefetch, the workers' counters)."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1})
    bench_env.set_responder(script(True, user=distinct_user))
    bench_env.latency = 0.3
    result = pytester.runpytest_subprocess("-p", "pytest_evalbench.plugin", "-p", "xdist.plugin", "--benchmark=demo",
                                           "-n", "2", "-v", "--evalbench-cache=off", "--evalbench-concurrency=8")
    result.assert_outcomes(passed=12)
    assert 4 < bench_env.peak_concurrency <= 8
    ran_on = {row: gw for gw, row in re.findall(r"\[(gw\d)\] \[\s*\d+%\] PASSED \S+::(m01_s\d+_v01)",
                                                  result.stdout.str())}
    assert [ran_on[r["id"]] for r in ROWS] == ["gw0"] * 6 + ["gw1"] * 6
    result.stdout.fnmatch_lines(["llm: 36 requests, *"])  # the workers' counters reached the controller


def run_four_probed(pytester: pytest.Pytester, bench_env: FakeLLMServer, probe: str,
                    **bench: object) -> pytest.RunResult:
    """Four passing one-turn rows under `-n 2` (cache off) with `probe` as the conftest. Without the dev
    venv's hypothesis plugin: its terminal summary imports hypothesis in every worker after the worker
    has finished (seconds on a loaded machine), and a worker still running 5 s after the controller
    told it to stop is interrupted (execnet), before a probe in its `pytest_unconfigure` has run."""
    write_benchmark(pytester.path, scenarios=ROWS[:4], generation={"turns": 1}, **bench)
    bench_env.set_responder(script(True))
    pytester.makeconftest(probe)
    result = pytester.runpytest_subprocess("--benchmark=demo", "-n", "2", "--evalbench-cache=off",
                                           "-p", "no:hypothesispytest")
    result.assert_outcomes(passed=4)
    return result


ROW_LOADS_PROBE = """
import json

def pytest_configure(config):
    from pytest_evalbench.kinds.scenarios import kind
    real = kind.iter_scenarios
    who = config.workerinput["workerid"] if hasattr(config, "workerinput") else "controller"

    def counted(bench_dir, spec):
        with open(f"parsed-{who}.txt", "a") as out:
            out.write("parsed\\n")
        return real(bench_dir, spec)

    kind.iter_scenarios = counted
"""


def bodies(requests: list[dict]) -> set[str]:
    """The distinct request bodies (a process asks the same call once; headers name the connection)."""
    return {json.dumps({k: v for k, v in r.items() if k != "_headers"}, sort_keys=True) for r in requests}


def parses(root: Path, who: str) -> int:
    path = root / f"parsed-{who}.txt"
    return len(path.read_text().splitlines()) if path.is_file() else 0


@pytest.mark.slow
def test_workers_load_the_benchmark_themselves(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    # as xdist workers collect on their own: each process (the controller's preflight and each worker)
    # reads benchmark.yaml and scenarios.json itself, and nothing is handed from the controller
    rows = [dict(ROWS[0], note="kept"), *ROWS[1:4]]
    write_benchmark(pytester.path, scenarios=rows, generation={"turns": 1}, owner="me")
    bench_env.set_responder(script(True))
    pytester.makeconftest(ROW_LOADS_PROBE)
    result = pytester.runpytest_subprocess("--benchmark=demo", "-n", "2", "--evalbench-cache=off", "-v")
    result.assert_outcomes(passed=4)
    assert (parses(pytester.path, "controller"), parses(pytester.path, "gw0"), parses(pytester.path, "gw1")) == (1, 1, 1)
    # the loads' warnings are given, and the workers ran the rows and targets as the files have them
    result.stdout.fnmatch_lines(["*benchmark.yaml: unknown key kept and ignored: owner*"])
    result.stdout.fnmatch_lines(["*scenarios.json: unknown key kept and ignored: note (in 1 row, first row 1)*"])
    assert {r["model"] for r in bench_env.requests} == {USER, TARGET, JUDGE}
    bench = pytester.path / "benchmarks" / "demo"
    with_xdist = bodies(bench_env.requests)
    scores = json.loads((bench / "runs" / "tgt" / "scores.json").read_text())
    assert sorted(r["id"] for r in scores) == [r["id"] for r in rows]
    # the counter-check: one process parses the file once and sends the same requests
    bench_env.reset()
    pytester.runpytest_subprocess("--benchmark=demo", "--evalbench-cache=off").assert_outcomes(passed=4)
    assert parses(pytester.path, "controller") == 2
    assert bodies(bench_env.requests) == with_xdist


TEARDOWN_PROBE = '''
import json
from pathlib import Path

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_sessionstart(session):
    yield  # xdist has started its workers
    dsession = session.config.pluginmanager.get_plugin("dsession")
    if dsession is None:  # a worker
        return
    manager = dsession.nodemanager
    teardown = manager.teardown_nodes

    def probed():
        status = json.loads((Path("benchmarks/demo/last_run.json")).read_text())["status"]
        Path("at-teardown.txt").write_text(status)
        teardown()

    manager.teardown_nodes = probed
'''


def test_the_controller_finishes_the_run_before_its_workers_are_torn_down(pytester: pytest.Pytester,
                                                                          bench_env: FakeLLMServer) -> None:
    """The controller's end (result files, last_run.json, reports, the store) runs while its workers
    shut down, not after they have exited: last_run.json is final when xdist starts tearing them down."""
    write_benchmark(pytester.path, scenarios=ROWS[:4], generation={"turns": 1})
    bench_env.set_responder(script(True))
    pytester.makeconftest(TEARDOWN_PROBE)
    result = pytester.runpytest("--benchmark=demo", "-n", "2", "--evalbench-cache=off")
    result.assert_outcomes(passed=4)
    assert (pytester.path / "at-teardown.txt").read_text() == "complete"


STORE_PROBE = '''
import sys
import threading
from pathlib import Path

import pytest


@pytest.hookimpl(wrapper=True)
def pytest_sessionstart(session):
    yield
    manager = session.config.pluginmanager
    if manager.get_plugin("dsession") is None:  # a worker
        return
    reporting = manager.get_plugin("evalbench-session").reporting
    record = reporting.record

    def probed(code):
        importing = any(t.name == "evalbench-store-import" for t in threading.enumerate())
        Path("store-before-end.txt").write_text(str(importing or "pytest_evalbench.store.db" in sys.modules))
        return record(code)

    reporting.record = probed
'''


def test_the_controller_imports_the_store_once_a_worker_is_done(pytester: pytest.Pytester,
                                                                bench_env: FakeLLMServer,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's modules are being imported (or are) when the controller's end begins: the first worker
    to finish frees a core for them while the others run their last items."""
    monkeypatch.delenv("EVALBENCH_STORE", raising=False)
    write_benchmark(pytester.path, scenarios=ROWS[:4], generation={"turns": 1})
    bench_env.set_responder(script(True))
    pytester.makeconftest(STORE_PROBE)
    result = pytester.runpytest_subprocess("--benchmark=demo", "-n", "2", "--evalbench-cache=off")
    result.assert_outcomes(passed=4)
    assert (pytester.path / "store-before-end.txt").read_text() == "True"
    result.stdout.fnmatch_lines(["*recorded as run 1*"])
