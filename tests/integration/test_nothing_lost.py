"""Nothing lost, nothing silently wrong: every selected item ends scored or counted (exit 7 and
last_run.json say why), result files are the configured benchmark, concurrent sessions lose no
rows, the cache verifies what it replays and app code cannot stop or flood the run."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import JUDGE, TARGET, read_json, scenario, script, write_benchmark

from pytest_evalbench.base.files import unversioned
from pytest_evalbench.gate.decision import EXIT_INCOMPLETE
from pytest_evalbench.kinds.scenarios.models import ScenarioRecord
from pytest_evalbench.kinds.scenarios.store import write_results
from pytest_evalbench.testing import FakeLLMServer

pytestmark = pytest.mark.usefixtures("quick_backoff")  # in-process runs retry after short backoffs

THRESHOLDS = {"gate": {"mode": "thresholds"}}
"""The gate mode in which a lost row used to exit 0."""
NODE = "benchmarks/demo/scenarios.json::{}[{}-s0]"


def rows(n: int, metric: str = "m01") -> list[dict[str, Any]]:
    return [scenario(f"{metric}_s{i:03d}_v01", metric) for i in range(1, n + 1)]


def user_names_row(request: dict[str, Any]) -> str:
    """The simulated user says which scenario it plays (apps and judges can key on it)."""
    text = json.dumps(request)
    for i in range(1, 10):
        for metric in ("m01", "m02"):
            if f"{metric}_s00{i}_v01" in text:
                return f"Message: I am {metric}_s00{i}_v01"
    return "Message: hello"


def last_run(bench: Path) -> dict[str, Any]:
    status = read_json(bench / "last_run.json")
    assert isinstance(status, dict)
    return status


# ---------------------------------------------------------------------------- the invariant
def test_item_crashing_in_user_code_is_incomplete_not_lost(pytester: pytest.Pytester,
                                                           bench_env: FakeLLMServer) -> None:
    pytester.makeconftest("""
def pytest_evalbench_judged_row(config, row, record):
    if row["id"] == "m01_s002_v01":
        raise ValueError("a bug in the team's hook")
""")
    bench = write_benchmark(pytester.path, scenarios=rows(3), spec=THRESHOLDS, generation={"turns": 1})
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(passed=2, errors=1)
    assert result.ret == EXIT_INCOMPLETE
    result.stdout.fnmatch_lines(["*INCOMPLETE: 1 item crashed (ValueError)*", "evalbench: INCOMPLETE (exit 7)*"])
    status = last_run(bench)
    assert status["status"] == "incomplete"
    assert status["not_scored"] == {NODE.format("m01_s002_v01", "tgt"): "crashed (ValueError)"}
    assert (status["selected"], status["scored"]) == (3, 2)


@pytest.mark.parametrize("where", ["hook", "fixture"])
def test_a_row_skipped_by_the_teams_code_is_incomplete_not_an_internal_error(
        pytester: pytest.Pytester, bench_env: FakeLLMServer, where: str) -> None:
    """pytest reports a skip raised while an item gets its fixture value at the item's own location:
    a case item has one (the data file, line 1), so the skip is an item of the run, never a crash."""
    if where == "hook":
        pytester.makeconftest("""
import pytest

def pytest_evalbench_judged_row(config, row, record):
    if row["id"] == "m01_s002_v01":
        pytest.skip("the team skips this row")
""")
    else:
        pytester.makeconftest("""
import pytest

@pytest.fixture
def evalbench_record(evalbench_record, request):
    if "m01_s002_v01" in request.node.nodeid:
        pytest.skip("the team skips this row")
    return evalbench_record
""")
    bench = write_benchmark(pytester.path, scenarios=rows(3), spec=THRESHOLDS, generation={"turns": 1})
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo", "-rs")
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert result.ret == EXIT_INCOMPLETE
    result.stdout.fnmatch_lines(["*SKIPPED*scenarios.json:1: the team skips this row*"])
    status = last_run(bench)
    assert status["status"] == "incomplete"
    assert status["not_scored"] == {NODE.format("m01_s002_v01", "tgt"): "skipped"}


def test_app_returning_malformed_tool_calls_is_an_item_error(pytester: pytest.Pytester,
                                                             bench_env: FakeLLMServer) -> None:
    pytester.makeconftest("""
def pytest_evalbench_make_target(config, target):
    def app(messages):
        if "m01_s001" in messages[0]["content"]:
            return {"content": "done", "tool_calls": ["not a call", 42]}
        return "fine"
    return app
""")
    bench = write_benchmark(pytester.path, scenarios=rows(2), spec=THRESHOLDS, targets=[{"id": "app"}],
                            generation={"turns": 1})
    bench_env.set_responder(script(True, user=user_names_row))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(passed=1, errors=1)
    assert result.ret == EXIT_INCOMPLETE
    result.stdout.fnmatch_lines(["*target 'app' raised:", "returned malformed tool_calls (AttributeError*"])
    assert last_run(bench)["not_scored"] == {NODE.format("m01_s001_v01", "app"): "target error"}


def test_killed_xdist_worker_is_counted_and_named(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    pytester.makeconftest("""
import os, signal
def pytest_evalbench_make_target(config, target):
    def app(messages):
        if "m01_s003_v01" in messages[0]["content"]:
            os.kill(os.getpid(), signal.SIGKILL)
        return "fine"
    return app
""")
    bench = write_benchmark(pytester.path, scenarios=rows(6), spec=THRESHOLDS, targets=[{"id": "app"}],
                            generation={"turns": 1})
    bench_env.set_responder(script(True, user=user_names_row))
    result = pytester.runpytest("--benchmark=demo", "-n", "2")
    # Each worker prefetches its whole share, so the worker that runs the killer dies with the item it
    # was running (maybe not the killer itself); the killer then kills the worker it is handed to.
    result.stdout.fnmatch_lines(["*worker*crashed while running*", "*INCOMPLETE: * worker died*"])
    assert result.ret == EXIT_INCOMPLETE
    status = last_run(bench)
    assert status["status"] == "incomplete"
    lost = status["not_scored"]
    assert NODE.format("m01_s003_v01", "app") in lost and set(lost.values()) == {"worker died"}
    assert (status["selected"], status["scored"]) == (6, 6 - len(lost))
    ids = [r["id"] for r in read_json(bench / "runs" / "app" / "scores.json")]
    assert len(ids) == 6 - len(lost) and "m01_s003_v01" not in ids


def test_xdist_deselection_is_not_incompleteness(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=rows(4), spec=THRESHOLDS, generation={"turns": 1})
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo", "-n", "2", "-k", "s001 or s002")
    result.assert_outcomes(passed=2)
    assert result.ret == 0
    status = last_run(bench)
    assert (status["status"], status["selected"], status["scored"], status["not_scored"]) == ("complete", 2, 2, {})


INTERRUPT_AFTER_TWO = """
import pytest
calls = {"n": 0}
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    calls["n"] += 1
    if calls["n"] == 3:
        raise KeyboardInterrupt
"""


def test_keyboard_interrupt_names_every_unscored_item(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    pytester.makeconftest(INTERRUPT_AFTER_TWO)
    bench = write_benchmark(pytester.path, scenarios=rows(4), spec=THRESHOLDS, generation={"turns": 1})
    bench_env.set_responder(script(True))
    result = pytester.runpytest_subprocess("--benchmark=demo", "--evalbench-concurrency=1")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    status = last_run(bench)
    assert status["status"] == "incomplete"
    assert status["incomplete"] == ["2 items not run", "session interrupted"]
    assert sorted(status["not_scored"]) == [NODE.format(f"m01_s00{i}_v01", "tgt") for i in (3, 4)]


def test_killed_session_never_leaves_complete(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=rows(1), generation={"turns": 1})
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1)
    assert last_run(bench)["status"] == "complete"
    pytester.makeconftest("""
import os, signal
def pytest_evalbench_make_target(config, target):
    def app(messages):
        os.kill(os.getpid(), signal.SIGKILL)
    return app
""")
    write_benchmark(pytester.path, scenarios=rows(1), generation={"turns": 1}, targets=[{"id": "app"}])
    result = pytester.runpytest_subprocess("--benchmark=demo")
    assert result.ret == -signal.SIGKILL
    assert last_run(bench)["status"] == "running"


def test_collection_error_replaces_complete(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=rows(1), generation={"turns": 1})
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1)
    pytester.runpytest("--benchmark=demo", "--collect-only")
    assert last_run(bench)["status"] == "complete"  # listing cases is not a run
    (bench / "scenarios.json").write_text("[{]")
    assert pytester.runpytest("--benchmark=demo").ret == pytest.ExitCode.INTERRUPTED
    assert (last_run(bench)["status"], last_run(bench)["selected"]) == ("not run", 0)


# ---------------------------------------------------------------------------- configured rows only
def test_rows_no_longer_configured_are_dropped_once(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    targets = [{"id": "a", "model": TARGET}, {"id": "b", "model": TARGET}]
    bench = write_benchmark(pytester.path, scenarios=rows(3), targets=targets,
                            generation={"turns": 1, "num_samples": 2})
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=12)
    assert [r["n_total"] for r in read_json(bench / "results.json")] == [6, 6]

    write_benchmark(pytester.path, scenarios=rows(2), targets=targets[:1], generation={"turns": 1, "num_samples": 1})
    result = pytester.runpytest("--benchmark=demo", "-k", "s001")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["dropped 2 rows of scenarios no longer in scenarios.json from runs/a/",
                                 "dropped 2 rows of samples beyond num_samples=1 from runs/a/",
                                 "dropped 6 rows of runs/b/: target 'b' is no longer configured"])
    assert [(r["target_model"], r["n_total"]) for r in read_json(bench / "results.json")] == [("a", 2)]
    assert [(r["id"], r["sample"]) for r in read_json(bench / "runs" / "a" / "scores.json")] == [
        ("m01_s001_v01", 0), ("m01_s002_v01", 0)]
    assert len(read_json(bench / "runs" / "a" / "conversations.json")) == 2
    assert not (bench / "runs" / "b").exists()
    assert len(last_run(bench)["dropped"]) == 3

    again = pytester.runpytest("--benchmark=demo", "-k", "s001")
    again.stdout.no_fnmatch_line("dropped *")


def test_dataset_cases_no_longer_in_the_files_are_dropped_once(pytester: pytest.Pytester,
                                                               bench_env: FakeLLMServer) -> None:
    from test_dataset import example_rows, scores, write_dataset

    bench = write_dataset(pytester.path)
    bench_env.set_responder(scores({}))
    pytester.runpytest("--benchmark=agents").assert_outcomes(passed=4)
    write_dataset(pytester.path, cases=example_rows()[:2])
    result = pytester.runpytest("--benchmark=agents")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["dropped 2 rows of cases no longer in the data files, from case_results.json"])
    assert len(read_json(bench / "case_results.json")) == 2
    assert last_run(bench)["dropped"] == ["2 rows of cases no longer in the data files, from case_results.json"]
    pytester.runpytest("--benchmark=agents").stdout.no_fnmatch_line("dropped *")


# ---------------------------------------------------------------------------- concurrent sessions
def _write_own_row(bench: str, record: dict[str, Any], order: dict[str, int], trials: int, barrier: Any) -> None:
    for trial in range(trials):
        barrier.wait()
        write_results(Path(bench) / f"t{trial}", [ScenarioRecord.from_json(record)], order)


def test_concurrent_writers_lose_no_rows(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    """Writers released together by a barrier, one fresh benchmark per trial: without the result
    lock the read-merge-write races and rows vanish (measured: most trials lose some)."""
    writers, trials = 4, 15
    bench = write_benchmark(pytester.path, scenarios=rows(writers), generation={"turns": 1})
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=writers)
    conversations = read_json(bench / "runs" / "tgt" / "conversations.json")
    scores = read_json(bench / "runs" / "tgt" / "scores.json")
    order = {r["id"]: i for i, r in enumerate(rows(writers))}
    records = [{"benchmark": "demo", "target_id": "tgt", "conversation": unversioned("c", c), "score": unversioned("s", s),
                "usage": {}} for c, s in zip(conversations, scores)]  # a record's rows, not the files' rows
    context = multiprocessing.get_context("fork" if sys.platform.startswith("linux") else "spawn")
    barrier = context.Barrier(writers)
    procs = [context.Process(target=_write_own_row, args=(str(pytester.path / "race"), r, order, trials, barrier))
             for r in records]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    counts = [len(read_json(pytester.path / "race" / f"t{t}" / "runs" / "tgt" / "scores.json"))
              for t in range(trials)]
    assert counts == [writers] * trials


def test_two_subset_sessions_at_once_keep_every_row(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=rows(3) + rows(3, "m02"), generation={"turns": 1})
    bench_env.set_responder(script(True))
    command = [sys.executable, "-m", "pytest", "--benchmark=demo", "-p", "no:cacheprovider", "-q"]
    procs = [subprocess.Popen([*command, "-k", k], cwd=pytester.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for k in ("m01", "m02")]
    for proc in procs:
        proc.communicate(timeout=120)
    assert len(read_json(bench / "runs" / "tgt" / "scores.json")) == 6
    assert read_json(bench / "results.json")[0]["n_total"] == 6


# ---------------------------------------------------------------------------- the cache verifies
def _entries(bench: Path) -> list[Path]:
    return sorted((bench / ".evalbench-cache").glob("*/*.json"))


def _judge_entries(bench: Path) -> list[Path]:
    return [p for p in _entries(bench) if json.loads(p.read_text())["request"]["body"]["model"] == JUDGE]


@pytest.mark.parametrize("tamper", ["content-number", "tokens-string", "swapped", "not-json"])
def test_tampered_cache_entry_is_a_miss_or_a_named_replay_error(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                                tamper: str) -> None:
    bench = write_benchmark(pytester.path, scenarios=rows(2), generation={"turns": 1})
    bench_env.set_responder(script(lambda r: "m01_s001" in json.dumps(r), user=user_names_row))
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1, failed=1)
    first, second = _judge_entries(bench)
    entry = json.loads(first.read_text())
    if tamper == "content-number":
        entry["response"]["content"] = 42
        first.write_text(json.dumps(entry))
    elif tamper == "tokens-string":
        entry["response"]["input_tokens"] = "many"
        first.write_text(json.dumps(entry))
    elif tamper == "swapped":  # another valid entry copied over this one: the verdicts would swap
        other = json.loads(second.read_text())
        first.write_text(json.dumps({**other, "key": entry["key"]}))
    else:
        first.write_text('{"key": ')

    replay = pytester.runpytest("--benchmark=demo", "--evalbench-cache=replay")
    outcomes = replay.parseoutcomes()
    assert (outcomes.get("errors"), outcomes.get("passed", 0) + outcomes.get("failed", 0)) == (1, 1)
    assert replay.ret == EXIT_INCOMPLETE
    replay.stdout.fnmatch_lines([f"*corrupt cache entry: {first}: *re-record it with --evalbench-cache=on*"])
    assert len(bench_env.requests) == 6  # replay made no call

    repaired = pytester.runpytest("--benchmark=demo")
    repaired.assert_outcomes(passed=1, failed=1)
    assert len(bench_env.requests) == 7  # the one bad entry was fetched again, and rewritten
    pytester.runpytest("--benchmark=demo", "--evalbench-cache=replay").assert_outcomes(passed=1, failed=1)


def test_empty_target_reply_is_never_cached(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=rows(1), generation={"turns": 1})
    replies = iter(["", "Sure, where are you going?"])
    bench_env.set_responder(script(True, target=lambda r: next(replies)))
    first = pytester.runpytest("--benchmark=demo")
    first.assert_outcomes(errors=1)
    first.stdout.fnmatch_lines(["*returned an empty reply*"])
    assert all(json.loads(p.read_text())["request"]["body"]["model"] != TARGET for p in _entries(bench))
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1)
    assert [r["model"] for r in bench_env.requests].count(TARGET) == 2


# ---------------------------------------------------------------------------- app code is contained
@pytest.mark.parametrize("escape", ["sys.exit(3)", "raise KeyboardInterrupt", "raise BaseException('odd')",
                                    "await_exit"])
def test_app_escapes_are_item_errors(pytester: pytest.Pytester, bench_env: FakeLLMServer, escape: str) -> None:
    if escape == "await_exit":
        app = """
async def app(messages):
    if "m01_s001" in messages[0]["content"]:
        sys.exit(4)
    return "fine"
"""
    else:
        app = f"""
def app(messages):
    if "m01_s001" in messages[0]["content"]:
        {escape}
    return "fine"
"""
    pytester.makeconftest("import sys\n" + app + """
def pytest_evalbench_make_target(config, target):
    return app
""")
    bench = write_benchmark(pytester.path, scenarios=rows(3), targets=[{"id": "app"}], generation={"turns": 1})
    bench_env.set_responder(script(True, user=user_names_row))
    started = time.monotonic()
    result = pytester.runpytest_subprocess("--benchmark=demo", timeout=120)
    assert time.monotonic() - started < 60
    result.assert_outcomes(passed=2, errors=1)
    assert result.ret == EXIT_INCOMPLETE
    result.stdout.fnmatch_lines(["*evalbench target error: target 'app' raised:*"])
    assert last_run(bench)["not_scored"] == {NODE.format("m01_s001_v01", "app"): "target error"}


def test_app_calls_time_out(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    pytester.makeconftest("""
import time
def pytest_evalbench_make_target(config, target):
    def app(messages):
        if "m01_s001" in messages[0]["content"]:
            time.sleep(120)
        return "fine"
    return app
""")
    write_benchmark(pytester.path, scenarios=rows(2), targets=[{"id": "app"}], generation={"turns": 1})
    bench_env.set_responder(script(True, user=user_names_row))
    started = time.monotonic()
    result = pytester.runpytest_subprocess("--benchmark=demo", "--evalbench-timeout=1", timeout=120)
    assert time.monotonic() - started < 60  # the hung daemon thread does not hold the process either
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*target 'app' raised:", "no reply within 1s (--evalbench-timeout)*"])


def test_huge_replies_are_cut_with_a_note(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    pytester.makeconftest("""
def pytest_evalbench_make_target(config, target):
    return lambda messages: "x" * 5_000_000
""")
    bench = write_benchmark(pytester.path, scenarios=rows(2), targets=[{"id": "app"}], generation={"turns": 1})
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo", "--evalbench-max-reply-chars=1000").assert_outcomes(passed=2)
    conversations = bench / "runs" / "app" / "conversations.json"
    assert conversations.stat().st_size < 20_000
    reply = read_json(conversations)[0]["transcript"][1]["content"]
    assert reply == "x" * 1000 + ("\n[evalbench: reply truncated from 5000000 to 1000 characters; "
                                  "see --evalbench-max-reply-chars]")


# ---------------------------------------------------------------------------- orphaned workers
def _alive(pid: int) -> bool:
    """Running and not a zombie (a container's init may not reap re-parented processes)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find the workers")
def test_workers_stop_when_the_controller_dies(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    pytester.makeconftest("""
import os, time
from pathlib import Path
def pytest_evalbench_make_target(config, target):
    def app(messages):
        Path(f"worker-{os.getpid()}.pid").write_text("")
        time.sleep(60)
        return "fine"
    return app
""")
    write_benchmark(pytester.path, scenarios=rows(4), targets=[{"id": "app"}], generation={"turns": 1})
    bench_env.set_responder(script(True))
    controller = subprocess.Popen([sys.executable, "-m", "pytest", "--benchmark=demo", "-n", "2", "-p",
                                   "no:cacheprovider"], cwd=pytester.path, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while len(list(pytester.path.glob("worker-*.pid"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        workers = [int(p.stem.split("-")[1]) for p in pytester.path.glob("worker-*.pid")]
        assert len(workers) == 2 and all(_alive(pid) for pid in workers)
        os.kill(controller.pid, signal.SIGKILL)
        controller.wait(10)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in workers)
    finally:
        controller.kill()
        controller.wait(10)
        for pid in [int(p.stem.split("-")[1]) for p in pytester.path.glob("worker-*.pid")]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
