"""Judge panels: majority, tie, median, agreement."""

from __future__ import annotations

import pytest

from pytest_evalbench.kinds.judges import Vote, agreement_lines, majority, median_vote, vote_sample


def votes(*values: object) -> list[Vote]:
    return [Vote(f"j{i}", 0, value, f"why {i}") for i, value in enumerate(values)]  # type: ignore[arg-type]


def test_majority_and_agreement() -> None:
    verdict = majority(votes(True, False, True))
    assert verdict.value is True and verdict.agreement == pytest.approx(0.6667)
    assert verdict.justification == "panel 2/3 present: why 0"


def test_tie_is_unscored_with_its_reason() -> None:
    verdict = majority(votes(True, False))
    assert verdict.value is None and "tied 1-1" in verdict.justification


def test_unusable_votes_do_not_count_and_none_usable_is_unscored() -> None:
    assert majority(votes(None, False, False)).value is False
    nothing = majority(votes(None, None))
    assert nothing.value is None and "no judge gave a usable answer" in nothing.justification


def test_single_judge_is_passed_through_without_agreement() -> None:
    verdict = majority(votes(True))
    assert verdict.value is True and verdict.agreement is None and verdict.justification == "why 0"


def test_median_of_scores_takes_the_lower_middle() -> None:
    assert median_vote(votes(5, 1, 4)).value == 4
    verdict = median_vote(votes(3, 4))
    assert verdict.value == 3 and verdict.agreement == 0.5 and verdict.justification.startswith("panel median of [3, 4]")
    assert median_vote(votes(None, 2, 5, 2)).value == 2


def test_vote_zero_keeps_the_sample_and_agreement_lines() -> None:
    assert vote_sample(3, 0) == 3 and vote_sample(3, 2) != vote_sample(4, 1)
    assert agreement_lines([("m01", 1.0), ("m01", 0.5), ("m02", None)]) == ["judge agreement m01: 0.75 mean over 2 rows"]
