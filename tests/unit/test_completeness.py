"""The completeness tally: exit 0/1/6 only when every selected item is a scored row."""

from __future__ import annotations

from pytest_evalbench.gate.completeness import NOT_DRAWN, NOT_RUN, WORKER_DIED, Completeness, crash_reason


def test_every_selected_item_scored_is_complete() -> None:
    tally = Completeness()
    tally.select(["a", "b"])
    tally.status("a", "passed")
    tally.status("b", "failed")
    assert (tally.reasons(interrupted=False), tally.unaccounted(), tally.missing()) == ([], {}, [])


def test_each_shortfall_is_counted_with_its_reason() -> None:
    tally = Completeness()
    tally.select(["a", "b", "c", "d", "e"])
    tally.status("a", "passed")
    tally.error("b", crash_reason(KeyError("x")))
    tally.error("b", "later error")  # the first reason wins
    tally.error("c", WORKER_DIED)
    tally.error("d", "unscored")
    tally.status("d", "unscored")
    assert tally.unaccounted() == {"b": "crashed (KeyError)", "c": WORKER_DIED, "d": "unscored", "e": NOT_RUN}
    assert tally.reasons(interrupted=True) == ["1 item crashed (KeyError)", "1 item not run", "1 item unscored",
                                               "1 item worker died", "session interrupted"]


def test_a_scored_item_with_a_later_error_is_not_scored() -> None:
    tally = Completeness()
    tally.select(["a"])
    tally.status("a", "passed")
    tally.error("a", "crashed")
    assert tally.reasons(interrupted=False) == ["1 item crashed"]


def test_a_sample_not_drawn_by_design_is_accounted_for() -> None:
    """Sequential sampling's `not drawn` samples keep the run complete; a skip of any other kind does not."""
    tally = Completeness()
    tally.select(["a", "b", "c"])
    tally.status("a", "passed")
    tally.status("b", NOT_DRAWN)
    tally.error("c", "skipped")
    assert tally.unaccounted() == {"c": "skipped"}
