"""Cohen's kappa: always-present judge 0, perfect judge 1, quadratic weights for 1-5 scores."""

from __future__ import annotations

import pytest

from pytest_evalbench.formats.agreement import agreement_entry, kappa

LABELS = [True, False, True, True, False, False, True, False]
SCALE = [1, 2, 3, 4, 5]


def test_always_present_is_zero_and_perfect_is_one() -> None:
    assert kappa(LABELS, [True] * len(LABELS), [True, False]) == 0.0
    assert kappa(LABELS, LABELS, [True, False]) == 1.0
    assert kappa([True, True], [True, True], [True, False]) is None  # one category: undefined


def test_quadratic_weights_punish_far_misses_more() -> None:
    labels = [1, 2, 3, 4, 5, 5, 3, 2]
    near = [2, 2, 3, 4, 4, 5, 3, 2]
    far = [5, 2, 3, 4, 1, 5, 3, 2]
    assert kappa(labels, labels, SCALE, weighted=True) == 1.0
    assert kappa(labels, near, SCALE, weighted=True) > kappa(labels, far, SCALE, weighted=True)
    assert kappa(labels, [3] * len(labels), SCALE, weighted=True) == pytest.approx(0.0)


def test_entry_counts_confusion_and_unscored() -> None:
    entry = agreement_entry(LABELS, [True, None, True, False, False, True, True, False], [True, False], weighted=False)
    assert entry["n"] == 7 and entry["unscored"] == 1 and entry["agreement"] == pytest.approx(5 / 7, abs=1e-4)
    assert entry["confusion"] == {"present": {"present": 3, "absent": 1}, "absent": {"present": 1, "absent": 2}}
    low, high = entry["kappa_ci"]
    assert low <= entry["kappa"] <= high
    assert agreement_entry(LABELS, LABELS, [True, False], weighted=False)["kappa_ci"] == [1.0, 1.0]
