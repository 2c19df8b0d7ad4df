"""Bounded memory: a session does not keep its records (issue #19).

The run's own process traces, from the end of collection, what the test loop leaves allocated when
the session finishes (before the results are written) and counts the blocks as large as one
item's target reply (40 KB): with the records kept in memory (by the session, on the items, in
the engine's futures or on pytest's reports) there is one per item; spooled to disk, none.
Counting large blocks, not bytes, keeps the test blind to lazy imports and pytest's own state.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from helpers import scenario, script, write_benchmark

from pytest_evalbench.testing import FakeLLMServer

ITEMS = 150
REPLY = "x" * 40_000
PROBE = """
import json
import tracemalloc
from pathlib import Path

import pytest


def pytest_collection_finish(session):
    tracemalloc.start()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session):
    # a wrapper: before every finisher, the plugin's (which reads the records to write the results) too
    if tracemalloc.is_tracing():
        sizes = [trace.size for trace in tracemalloc.take_snapshot().traces]
        tracemalloc.stop()
        Path("retained.json").write_text(json.dumps([size for size in sizes if size >= 40000]))
    return (yield)
"""


@pytest.mark.slow
def test_records_are_not_held_in_memory(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario(f"m01_s{i:03d}_v01", "m01") for i in range(ITEMS)],
                            generation={"turns": 1, "num_samples": 1, "perfunctory": False, "landmarks": False})
    said = itertools.count()  # every request differs: nothing is answered once for several items
    bench_env.set_responder(script(True, user=lambda r: f"Thought: ok\nMessage: help {next(said)}",
                                   target=lambda r: f"{next(said)} {REPLY}"))
    pytester.makeconftest(PROBE)
    # a subprocess: the fake server (in this process) keeps every request it answered
    result = pytester.runpytest_subprocess("--benchmark=demo", "--evalbench-cache=off", "-p", "no:randomly")
    result.assert_outcomes(passed=ITEMS)
    conversations = json.loads((bench / "runs" / "tgt" / "conversations.json").read_text())
    assert len(conversations) == ITEMS and all(len(c["transcript"][-1]["content"]) > len(REPLY)
                                               for c in conversations)  # the records were all there
    large = json.loads(Path(pytester.path / "retained.json").read_text())
    assert len(large) < ITEMS / 10, f"{len(large)} blocks of >= 40 KB still allocated after {ITEMS} items"


PROPERTIES_PROBE = """
import json
from pathlib import Path

seen = []


def pytest_runtest_logreport(report):
    seen.append(len(report.user_properties))


def pytest_sessionfinish(session):
    if not hasattr(session.config, "workerinput"):  # the controller sees every report
        Path("properties.json").write_text(json.dumps(seen))
"""


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
@pytest.mark.parametrize("junit", [False, True])
def test_junit_properties_only_with_junitxml(pytester: pytest.Pytester, bench_env: FakeLLMServer, junit: bool,
                                             workers: int) -> None:
    """Items carry JUnit properties only for --junitxml: pytest copies them onto each of an item's
    three reports, which its terminal reporter keeps for the whole session (issue 26, memory)."""
    write_benchmark(pytester.path, scenarios=[scenario(f"m01_s{i:03d}_v01", "m01") for i in range(3)])
    bench_env.set_responder(script(True))
    pytester.makeconftest(PROPERTIES_PROBE)
    args = ["--benchmark=demo", "-p", "no:randomly", f"-n{workers}"] + (["--junitxml=junit.xml"] if junit else [])
    pytester.runpytest(*args).assert_outcomes(passed=3)
    seen = json.loads((pytester.path / "properties.json").read_text())
    assert len(seen) == 9
    assert (min(seen) > 0) if junit else (max(seen) == 0)
    if junit:
        assert (pytester.path / "junit.xml").read_text().count('name="evalbench_status" value="passed"') == 3


SHARED_PROBE = """
import json
from pathlib import Path

import pytest


@pytest.fixture
def evalbench_record(evalbench_record, evalbench_case):
    Path("overridden").joinpath(evalbench_case.name.replace("[", "_").replace("]", "")).touch()
    return evalbench_record


def pytest_collection_finish(session):
    Path("overridden").mkdir(exist_ok=True)
    Path("closures.json").write_text(json.dumps(sorted({id(item._fixtureinfo) for item in session.items})))
"""


def test_items_of_a_file_share_one_fixture_closure(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    """One fixture closure per data file, as pytest's parametrization shares one per function
    (`plugin/memory_bound.py`); a conftest override of `evalbench_record` still wraps every item."""
    write_benchmark(pytester.path, scenarios=[scenario(f"m01_s{i:03d}_v01", "m01") for i in range(4)])
    bench_env.set_responder(script(True))
    pytester.makeconftest(SHARED_PROBE)
    pytester.runpytest("--benchmark=demo", "-p", "no:randomly").assert_outcomes(passed=4)
    assert len(json.loads((pytester.path / "closures.json").read_text())) == 1
    assert len(list((pytester.path / "overridden").iterdir())) == 4


READS_PROBE = """
import json
import os
from collections import Counter
from pathlib import Path

read = Counter()
_open = os.open


def recording(path, flags, *args, **kwargs):
    if not flags & (os.O_WRONLY | os.O_RDWR):
        read[os.path.basename(os.fspath(path))] += 1
    return _open(path, flags, *args, **kwargs)


os.open = recording


def pytest_unconfigure(config):
    os.open = _open
    Path("reads.json").write_text(json.dumps(read))
"""


def test_finish_pass_reads_back_neither_results_nor_ledger(pytester: pytest.Pytester,
                                                           bench_env: FakeLLMServer) -> None:
    """The summary's pass^k comes from the per-target summaries kept when results.json was written,
    and `.sessions.json` is read once (merged under the result lock), not again for reports when no
    row is carried over: parsing either back held 100,000 entries at N = 100,000 through the rest of
    the finish pass (issue 26, memory). The numbers shown are the file's."""
    bench = write_benchmark(pytester.path, scenarios=[scenario(f"m01_s{i:03d}_v01", "m01") for i in range(3)],
                            generation={"turns": 1, "num_samples": 2, "perfunctory": False, "landmarks": False})
    bench_env.set_responder(script(True))
    pytester.makeconftest(READS_PROBE)
    result = pytester.runpytest("--benchmark=demo", "-p", "no:randomly")
    result.assert_outcomes(passed=6)
    reads = json.loads((pytester.path / "reads.json").read_text())
    assert reads.get("results.json", 0) == 0 and reads.get(".sessions.json", 0) == 1, reads
    entry = json.loads((bench / "results.json").read_text())[0]
    assert entry["pass_k"]["m01"] == {"k": 2, "n_cases": 3, "n_excluded": 0, "pass_hat_k": 1.0, "pass_at_k": 1.0}
    result.stdout.fnmatch_lines(["*pass^2 1.00, pass@2 1.00 tgt m01: over 3 cases, k = 2 samples per case*"])


FREEZE_PROBE = """
import atexit
import gc
import json
from pathlib import Path

after_unconfigure = []  # the frozen count at each full collection after pytest_unconfigure: pytest's cleanup


def collecting(phase, info):
    if phase == "start" and info["generation"] == 2 and after_unconfigure and after_unconfigure[0] is None:
        after_unconfigure.append(gc.get_freeze_count())


gc.callbacks.append(collecting)
# registered before the plugin's own handler, so it runs after it (and before the interpreter's collections)
atexit.register(lambda: Path("at_exit.json").write_text(json.dumps([gc.get_freeze_count(), after_unconfigure[1:]])))


def pytest_runtest_call(item):
    Path("in_loop.json").write_text(json.dumps(gc.get_freeze_count()))


def pytest_unconfigure(config):
    after_unconfigure.append(None)
"""


def test_what_lives_through_the_loop_is_out_of_the_collectors_way_only_for_the_session(
        pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    """During the test loop, what was alive at its start is in the collector's permanent generation,
    also during pytest's own collection at its cleanup; after the session it is not (a process that
    goes on collects it again); at the interpreter's exit everything is (`plugin/session.py`,
    `plugin/_compat.py`, docs/performance.md)."""
    import gc

    write_benchmark(pytester.path, scenarios=[scenario(f"m01_s{i:03d}_v01", "m01") for i in range(2)])
    bench_env.set_responder(script(True))
    pytester.makeconftest(FREEZE_PROBE.replace("atexit.register", "_ = "))  # in this process: no handler
    assert gc.get_freeze_count() == 0
    pytester.runpytest_inprocess("--benchmark=demo", "-p", "no:randomly").assert_outcomes(passed=2)
    assert json.loads((pytester.path / "in_loop.json").read_text()) > 10_000
    assert gc.get_freeze_count() == 0

    pytester.makeconftest(FREEZE_PROBE)
    pytester.runpytest_subprocess("--benchmark=demo", "-p", "no:randomly").assert_outcomes(passed=2)
    at_exit, cleanup_collections = json.loads((pytester.path / "at_exit.json").read_text())
    assert at_exit > 10_000
    assert all(count > 10_000 for count in cleanup_collections)  # pytest's collections walked around it
    assert cleanup_collections or pytest.version_tuple < (8, 4)  # pytest collects at its cleanup since 8.4
