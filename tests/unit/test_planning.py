"""Verdicts you can plan: threshold rules on intervals, their error rates on a seeded grid, and the
smallest detectable change against simulated power. Every simulated decision goes through the real gate
(`check_thresholds`, `compare_with_baseline`)."""

from __future__ import annotations

import json
import random

import pytest

from pytest_evalbench.formats.results import ModelResult, PassFailUnit, RateSummary
from pytest_evalbench.formats.spec import ThresholdRules
from pytest_evalbench.formats.stats import (
    binomial_cdf,
    breaching_count,
    mcnemar_detectable_drop,
    mcnemar_power,
    threshold_decision,
    threshold_detectable_drop,
    wilson_interval,
)
from pytest_evalbench.gate.decision import GateInputs, GateSettings, evaluate_gate
from pytest_evalbench.gate.paired import compare_with_baseline, load_baseline, make_baseline
from pytest_evalbench.gate.rules import check_thresholds

ALPHA = 0.05


def summary(k: int, n: int) -> list[ModelResult]:
    """One target whose n positive rows (one metric) passed k times."""
    return [ModelResult(target_model="t", positive_pass_rate=round(k / n, 4), negative_pass_rate=None,
                        n_positive=n, n_negative=0, n_total=n,
                        by_metric={"m01": RateSummary(pass_rate=round(k / n, 4), n_passed=k, n_total=n)},
                        by_scenario={})]


def status(k: int, n: int, minimum: float, decision: str = "interval") -> str:
    rules = ThresholdRules.model_validate({"min_positive_pass_rate": minimum, "decision": decision})
    return check_thresholds(summary(k, n), rules, alpha=ALPHA).rules[0].status


def test_an_interval_that_straddles_the_minimum_is_inconclusive_not_breached() -> None:
    assert wilson_interval(0, 1) == pytest.approx((0.0, 0.7935), abs=1e-4)
    assert status(0, 1, 0.5) == "inconclusive"  # one failing row: [0.00, 0.79] straddles 0.50
    assert status(0, 1, 0.5, "point") == "breached"  # the point rule convicts on one row
    assert status(5, 10, 0.6) == "inconclusive"
    assert status(1, 20, 0.5) == "breached"  # [0.01, 0.24] lies below 0.50
    assert status(20, 20, 0.8) == "held"  # [0.84, 1.00] lies above 0.80
    text = check_thresholds(summary(0, 1), ThresholdRules(min_positive_pass_rate=0.5)).rules[0].text()
    assert text == ("min_positive_pass_rate 0.50 t: 0.00 inconclusive "
                    "(95% interval [0.00, 0.79] of 1 row, detects no drop; 5 rows would detect a fall to 0)")


def test_an_inconclusive_rule_fails_the_build_only_when_asked() -> None:
    inputs = GateInputs(results=summary(5, 10), rules=ThresholdRules(min_positive_pass_rate=0.6))
    relaxed = evaluate_gate(inputs, GateSettings(mode="thresholds"))
    assert [r.status for r in relaxed.rules] == ["inconclusive"] and relaxed.exit_code(0) == 0
    strict = evaluate_gate(inputs, GateSettings(mode="thresholds", fail_inconclusive=True))
    assert strict.exit_code(0) == 6 and strict.breaches == [strict.rules[0].text()]


def test_a_small_selection_leaves_the_rule_not_evaluated_and_its_cases_decide() -> None:
    inputs = GateInputs(results=summary(0, 1), rules=ThresholdRules(min_positive_pass_rate=0.5, decision="point"))
    small = evaluate_gate(inputs, GateSettings(mode="thresholds", selection=True, min_rows=10))
    assert [r.text() for r in small.rules] == [
        "min_positive_pass_rate 0.50 t: not evaluated (too few rows: 1 < gate.min_rows 10)"]
    assert small.exit_code(1) == 1 and small.exit_code(0) == 0  # by its cases, even in thresholds mode
    full = evaluate_gate(inputs, GateSettings(mode="thresholds", selection=False, min_rows=10))
    assert full.exit_code(1) == 6  # a full run of one row is still gated by the rule


GRID_N = (5, 10, 20, 50, 100)
GRID_MIN = (0.5, 0.7, 0.8, 0.9)
REPS = 2000


def false_alarms(decision: str, rng: random.Random) -> dict[tuple[int, float], float]:
    """Per (n, minimum): how often the rule breaches when the true rate is exactly the minimum."""
    out = {}
    for n in GRID_N:
        for minimum in GRID_MIN:
            outcome = {k: status(k, n, minimum, decision) for k in range(n + 1)}  # the real gate, per count
            hits = sum(outcome[sum(rng.random() < minimum for _ in range(n))] == "breached" for _ in range(REPS))
            out[(n, minimum)] = hits / REPS
    return out


def test_the_interval_rules_false_alarm_rate_is_at_most_alpha_on_a_seeded_grid(
        record_property: pytest.RecordProperty) -> None:
    interval = false_alarms("interval", random.Random(45))
    point = false_alarms("point", random.Random(45))
    se = (ALPHA * (1 - ALPHA) / REPS) ** 0.5
    for cell, rate in interval.items():
        n, minimum = cell
        exact = binomial_cdf(breaching_count(n, minimum, ALPHA), n, minimum)
        assert exact < ALPHA  # the rule's own guarantee at the worst true rate (the minimum itself)
        assert rate <= ALPHA + 3 * se, (cell, rate)
    pooled = sum(interval.values()) / len(interval)
    assert pooled <= ALPHA
    point_pooled = sum(point.values()) / len(point)
    record_property("false_alarm_interval", round(pooled, 4))
    record_property("false_alarm_point", round(point_pooled, 4))
    print(f"false alarms at the minimum: interval {pooled:.3f}, point {point_pooled:.3f}")
    assert point_pooled > 0.3  # the point rule breaches about half the time a target sits at its minimum


@pytest.mark.parametrize(("n", "minimum", "decision"), [
    (12, 0.8, "interval"), (30, 0.7, "interval"), (100, 0.9, "interval"), (40, 0.6, "point")])
def test_the_threshold_rules_detectable_drop_agrees_with_simulated_power(n: int, minimum: float, decision: str) -> None:
    drop = threshold_detectable_drop(n, minimum, ALPHA, decision)
    assert drop is not None and 0 < drop <= minimum
    rng = random.Random(n)
    outcome = {k: status(k, n, minimum, decision) for k in range(n + 1)}
    hits = sum(outcome[sum(rng.random() < minimum - drop for _ in range(n))] == "breached" for _ in range(REPS))
    assert abs(hits / REPS - 0.8) <= 0.05, hits / REPS


def test_a_rule_that_no_count_can_breach_detects_no_drop() -> None:
    assert breaching_count(3, 0.5, ALPHA) == -1 and threshold_detectable_drop(3, 0.5, ALPHA) is None
    assert threshold_decision(0, 3, 0.5, ALPHA) == "inconclusive"


def paired_runs(n: int, noise: float, drop: float, rng: random.Random) -> tuple[list[PassFailUnit], list[PassFailUnit]]:
    """n pairs: fail->pass with probability noise/2, pass->fail noise/2 + drop, else the same outcome."""
    old, new = [], []
    for i in range(n):
        u = rng.random()
        before, after = ((False, True) if u < noise / 2 else (True, False) if u < noise + drop
                         else (rng.random() < 0.5,) * 2)
        old.append(PassFailUnit("t", f"c{i}", "m01", 0, before))
        new.append(PassFailUnit("t", f"c{i}", "m01", 0, after))
    return old, new


@pytest.mark.parametrize(("n", "noise"), [(40, 0.1), (80, 0.2)])
def test_the_paired_detectable_drop_agrees_with_simulated_power(n: int, noise: float) -> None:
    drop = mcnemar_detectable_drop(n, noise, ALPHA)
    assert drop is not None and mcnemar_power(n, noise, drop, ALPHA) == pytest.approx(0.8, abs=0.01)
    rng, reps, hits = random.Random(n), 600, 0
    for _ in range(reps):
        old, new = paired_runs(n, noise, drop, rng)
        comparison = compare_with_baseline(make_baseline([], old, {}), new, alpha=ALPHA)
        hits += comparison.tests[0].significant
    assert abs(hits / reps - 0.8) <= 0.05, hits / reps


def test_every_paired_test_states_what_it_could_detect() -> None:
    old, new = paired_runs(60, 0.1, 0.0, random.Random(3))
    test = compare_with_baseline(make_baseline([], old, {}), new, alpha=ALPHA).tests[0]
    assert test.detectable is not None and test.describe().endswith(f"detects drops >= {test.detectable:.2f}")
    rules = check_thresholds(summary(50, 60), ThresholdRules(max_drop=0.1),
                             compare_with_baseline(make_baseline([], old, {}), new, alpha=ALPHA))
    assert rules.rules[-1].text().endswith(f"held (detects drops >= {test.detectable:.2f})")


IDS = {"judge_model": "sim-judge", "judge_prompt": "examples", "user_model": "sim-user",
       "user_prompt": "sha256:aaaaaaaaaaaa", "check_rules": "none", "plugin_version": "0.1.0"}


def test_a_baseline_with_another_judge_model_is_not_comparable() -> None:
    old = [PassFailUnit("t", f"c{i}", "m01", 0, True) for i in range(30)]
    new = [PassFailUnit("t", f"c{i}", "m01", 0, False) for i in range(30)]
    base = load_baseline(json.loads(json.dumps(make_baseline([], old, {}, identities={"t": IDS}).to_json())))
    assert base.identities == {"t": IDS}
    other = {"t": {**IDS, "judge_model": "other-judge"}}
    comparison = compare_with_baseline(base, new, {}, alpha=ALPHA, identities=other)
    assert comparison.tests == [] and comparison.unevaluated == [
        "t: m01 not compared (not comparable: changed since the baseline: judge_model sim-judge -> other-judge; "
        "--evalbench-compare-anyway compares it)"]
    rules = check_thresholds(summary(0, 30), ThresholdRules(max_drop=0.1), comparison)
    assert [r.status for r in rules.rules] == ["not evaluated"] and "judge_model sim-judge -> other-judge" in (
        rules.rules[0].why or "")
    anyway = compare_with_baseline(base, new, {}, alpha=ALPHA, identities=other, compare_anyway=True)
    assert anyway.tests[0].significant and anyway.meta_warnings == [
        "t: compared anyway (--evalbench-compare-anyway) although changed since the baseline: "
        "judge_model sim-judge -> other-judge"]
    same = compare_with_baseline(base, new, {}, alpha=ALPHA, identities={"t": dict(IDS)})
    assert same.tests[0].significant and same.meta_warnings == []


def test_a_baseline_without_identities_is_compared_with_a_note() -> None:
    old = [PassFailUnit("t", f"c{i}", "m01", 0, True) for i in range(30)]
    data = make_baseline([], old, {}).to_json()
    assert "identities" not in data
    comparison = compare_with_baseline(load_baseline(data), old, {}, alpha=ALPHA, identities={"t": IDS})
    assert len(comparison.tests) == 1 and comparison.meta_warnings[0].startswith(
        "the baseline records no identities")
    with pytest.raises(ValueError, match="'identities' is not"):
        load_baseline({**data, "identities": {"t": {"judge_model": 3}}})


def test_a_rule_that_detects_no_drop_says_how_many_rows_would() -> None:
    """The number printed is the fewest rows that can breach the minimum at all: one row fewer cannot."""
    from pytest_evalbench.formats.stats import breaching_count, rows_to_detect_a_fall

    for minimum, alpha, decision in [(0.5, 0.05, "interval"), (0.8, 0.05, "interval"), (0.01, 0.05, "interval"),
                                     (0.9, 0.01, "interval"), (0.5, 0.05, "point")]:
        rows = rows_to_detect_a_fall(minimum, alpha, decision)
        assert rows is not None and breaching_count(rows, minimum, alpha, decision) >= 0
        assert breaching_count(rows - 1, minimum, alpha, decision) < 0, (minimum, alpha, decision)
    assert rows_to_detect_a_fall(0.0, 0.05) is None  # a minimum of 0 can never be breached
    text = check_thresholds(summary(1, 2), ThresholdRules(min_positive_pass_rate=0.5)).rules[0].text()
    assert text.endswith("of 2 rows, detects no drop; 5 rows would detect a fall to 0)")
