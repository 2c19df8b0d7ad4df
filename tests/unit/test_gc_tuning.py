"""The run's collector settings are undone at unconfigure (in-process pytest runs must not leak)."""

from __future__ import annotations

import gc

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
