"""The run's collector settings are undone at unconfigure (in-process pytest runs must not leak)."""

from __future__ import annotations

import gc
import importlib
import json

import pytest
from helpers import write_benchmark

from pytest_evalbench.plugin import gc_tuning


def test_tuning_is_undone_by_restore() -> None:
    before = gc.get_threshold()
    gc.collect()
    frozen_before = gc.get_freeze_count()
    gc_tuning.tune_for_run()
    try:
        assert gc.get_threshold()[0] >= gc_tuning.YOUNG_THRESHOLD
        assert gc.get_freeze_count() > frozen_before
        gc_tuning.tune_for_run()  # idempotent: still one saved state
    finally:
        gc_tuning.restore()
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
    gc_tuning.restore()  # a second restore is harmless
    assert gc.get_threshold() == before


def test_the_startup_freeze_is_undone_by_restore() -> None:
    before = gc.get_threshold()
    gc.collect()
    frozen_before = gc.get_freeze_count()
    gc_tuning.freeze_startup()
    try:
        assert gc.get_freeze_count() > frozen_before
        assert gc.get_threshold()[0] >= gc_tuning.YOUNG_THRESHOLD  # the configure's imports: few young collections
        gc_tuning.tune_for_run()  # the loop keeps the enlarged generation and freezes again
        assert gc.get_threshold()[0] >= gc_tuning.YOUNG_THRESHOLD
    finally:
        gc_tuning.restore()
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before


def test_an_inline_benchmark_run_leaves_nothing_frozen(pytester: pytest.Pytester) -> None:
    # --collect-only never tunes for the loop: the plugin's own unconfigure undoes the startup freeze
    write_benchmark(pytester.path)
    gc.collect()
    assert gc.get_freeze_count() == 0
    frozen: list[int] = []

    class Probe:
        @pytest.hookimpl(trylast=True)
        def pytest_collection_finish(self) -> None:
            frozen.append(gc.get_freeze_count())

    result = pytester.inline_run("--benchmark=demo", "--collect-only", plugins=[Probe()])
    assert result.ret == 0
    assert frozen and frozen[0] > 0  # the counter-check: the run did freeze during collection
    assert gc.get_freeze_count() == 0


GC_PROBE = """
import atexit, gc, json, sys
seen = []
collect = gc.collect

def counting_collect(*args):
    if sys._getframe(1).f_globals.get("__name__") == "_pytest.unraisableexception":
        seen.append(gc.get_freeze_count())
    return collect(*args)

gc.collect = counting_collect
atexit.register(lambda: print("GC-PROBE " + json.dumps(seen)))
"""


@pytest.mark.skipif(not hasattr(importlib.import_module("_pytest.unraisableexception"), "gc_collect_harder"),
                    reason="this pytest makes no full collections at the end of a run (newer ones do, in their "
                           "unraisable-exception check)")
def test_pytests_final_collections_skip_the_frozen_heap(pytester: pytest.Pytester) -> None:
    # pytest's unraisable-exception check makes full collections at unconfigure and in a cleanup
    # (not in inline runs: pytester turns them off); the heap the run froze stays frozen through
    # both, so they walk only what is not (~50 ms less at N = 200 in every process)
    write_benchmark(pytester.path)
    pytester.makeconftest(GC_PROBE)
    result = pytester.runpytest_subprocess("--benchmark=demo", "--collect-only", "-p", "no:cacheprovider")
    assert result.ret == 0
    line = next(line for line in result.outlines if line.startswith("GC-PROBE "))
    seen = json.loads(line.removeprefix("GC-PROBE "))
    assert len(seen) >= 2  # the counter-check: pytest's own collections were seen (unconfigure, cleanup)
    assert all(count > 0 for count in seen), seen
