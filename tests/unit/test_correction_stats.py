"""Rogan-Gladen corrected pass rates (correction.py) against hand-computed values, and the
gate's min rules with `judge: {correct_rates: true}` and without."""

from __future__ import annotations

import pytest

from pytest_evalbench.formats.agreement import UNDEFINED, CorrectedRate, JudgeAccuracy, Stratum, correct
from pytest_evalbench.formats.results import CorrectedSummary, PassFailUnit
from pytest_evalbench.formats.spec import MetricRule, ThresholdRules
from pytest_evalbench.gate.rules import check_thresholds
from pytest_evalbench.kinds.scenarios.aggregate import aggregate, correct_results

# labels present: 9 called present, 1 absent; labels absent: 2 called present, 8 absent
CONFUSION = {"present": {"present": 9, "absent": 1}, "absent": {"present": 2, "absent": 8}}
ACC = JudgeAccuracy.from_confusion(CONFUSION)


def test_sensitivity_and_specificity_from_the_confusion_matrix() -> None:
    assert (ACC.sensitivity, ACC.specificity) == (0.9, 0.8)
    assert JudgeAccuracy.from_confusion({"present": {"present": 3}}).specificity is None


def test_positive_metric_hand_computed() -> None:
    # p = 0.6, se = 0.9, sp = 0.8, J = 0.7: pi = (0.6 + 0.8 - 1) / 0.7 = 0.571429
    # Var = [ (62/104)(42/104)/104 + pi^2 (11/14)(3/14)/14 + (1-pi)^2 (10/14)(4/14)/14 ] / 0.49
    #     = [0.0023149 + 0.0039269 + 0.0026775] / 0.49 = 0.0182027, sd 0.134918, 1.96 sd = 0.264435
    got = correct([Stratum("m01", "positive", 60, 100)], {"m01": ACC})
    assert got == CorrectedRate(0.5714, 0.307, 0.8359, None, 100)
    assert got.text() == "corrected 0.57 [0.31, 0.84]"


def test_negative_metric_corrects_the_prevalence_of_present() -> None:
    # 30 of 100 passed = 70 present: pi = (0.7 + 0.8 - 1) / 0.7 = 0.714286, pass rate 1 - pi = 0.285714
    got = correct([Stratum("m02", "negative", 30, 100)], {"m02": ACC})
    assert got is not None and got.rate == 0.2857 and (got.low, got.high) == (0.0146, 0.5568)


def test_check_decided_rows_are_taken_as_they_are() -> None:
    # 10/10 passed by checks + judge rows corrected to 0.571429: (10 + 57.1429) / 110 = 0.61039;
    # sd = (100/110) * 0.134918 = 0.122653
    got = correct([Stratum("m01", "positive", 60, 100, check_passed=10, check_n=10)], {"m01": ACC})
    assert got is not None and (got.rate, got.low, got.high) == (0.6104, 0.37, 0.8508)
    assert correct([Stratum("m01", "positive", 0, 0, 5, 5)], {"m01": ACC}) is None  # nothing judge-decided


def test_clipped_to_zero_one() -> None:
    # p = 0.1 < 1 - sp = 0.2: (0.1 - 0.2) / 0.7 < 0, clipped to 0; the interval's low end clipped too
    got = correct([Stratum("m01", "positive", 10, 100)], {"m01": ACC})
    assert got is not None and got.rate == 0.0 and got.low == 0.0 and 0 < (got.high or 0) < 1
    high = correct([Stratum("m01", "positive", 100, 100)], {"m01": JudgeAccuracy(8, 2, 0, 10)})
    assert high is not None and high.rate == 1.0 and high.high == 1.0


@pytest.mark.parametrize(("acc", "why"), [
    (JudgeAccuracy(5, 5, 5, 5), UNDEFINED),  # 0.5 + 0.5 = 1: a coin
    (JudgeAccuracy(2, 8, 6, 4), UNDEFINED),  # 0.2 + 0.4 < 1
    (JudgeAccuracy(0, 0, 1, 9), "sensitivity not estimable: no calibration example labelled present"),
])
def test_undefined(acc: JudgeAccuracy, why: str) -> None:
    got = correct([Stratum("m01", "positive", 60, 100)], {"m01": acc})
    assert got == CorrectedRate(None, None, None, why, 100)
    assert got.text() == f"corrected: undefined ({why})"
    missing = correct([Stratum("m01", "positive", 6, 10)], {})
    assert missing is not None and missing.undefined == "no calibration for m01"


def rows(passed: int, n: int, mid: str = "m01", mtype: str = "positive") -> list[PassFailUnit]:
    return [PassFailUnit("t", f"s{i}", mid, 0, i < passed, mid, mtype, "judge") for i in range(n)]


@pytest.mark.parametrize(("corrected", "acc", "text"), [
    (False, ACC, "min_pass_rate 0.55 t m01: 0.60 held (of 100 rows, detects drops >= 0.05)"),
    (True, ACC, "min_pass_rate 0.55 t m01: 0.57 held (corrected rate)"),
    (False, JudgeAccuracy(5, 5, 5, 5), "min_pass_rate 0.55 t m01: 0.60 held (of 100 rows, detects drops >= 0.05)"),
    (True, JudgeAccuracy(5, 5, 5, 5),
     "min_pass_rate 0.55 t m01: not evaluated (corrected rate undefined: sensitivity + specificity ≤ 1)"),
])
def test_gate_reads_corrected_rates_only_when_asked(corrected: bool, acc: JudgeAccuracy, text: str) -> None:
    by_target = {"t": rows(60, 100)}
    results = aggregate(by_target, by_scenario=False)
    correct_results(results, by_target, {"m01": acc})
    report = check_thresholds(results, ThresholdRules(per_metric={"m01": MetricRule(min_pass_rate=0.55)},
                                                      decision="point"), corrected=corrected)
    assert [r.text() for r in report.rules] == [text]


def test_gate_breaches_on_the_corrected_rate() -> None:
    by_target = {"t": rows(60, 100)}
    results = aggregate(by_target, by_scenario=False)
    correct_results(results, by_target, {"m01": ACC})
    assert results[0].by_metric["m01"].corrected == CorrectedSummary(pass_rate=0.5714, ci=[0.307, 0.8359],
                                                                     undefined=None, judge_rows=100)
    rules = ThresholdRules(min_positive_pass_rate=0.58, decision="point")
    assert check_thresholds(results, rules).breaches == []
    assert check_thresholds(results, rules, corrected=True).breaches == [
        "min_positive_pass_rate 0.58 t: 0.57 breached (corrected rate)"]
    interval = ThresholdRules(min_positive_pass_rate=0.58)  # [0.31, 0.84] straddles 0.58
    assert check_thresholds(results, interval, corrected=True).inconclusive == [
        "min_positive_pass_rate 0.58 t: 0.57 inconclusive (corrected rate, 95% interval [0.31, 0.84])"]
