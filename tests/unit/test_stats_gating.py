"""gate/stats.py, gate/baseline.py, gate/paired.py, gate/rules.py and gate/decision.py: tests against published and hand-computed
values, multiplicity corrections, threshold and compare rules, the baseline file, the gate outcome."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from pytest_evalbench.formats.results import EvalScore, ModelResult, PassFailUnit
from pytest_evalbench.formats.stats import (
    RateEstimate,
    agresti_min_interval,
    benjamini_hochberg,
    binomial_upper_tail,
    bootstrap_mean_interval,
    case_verdict,
    holm,
    mcnemar_drop_p,
    mcnemar_exact_p,
    wilcoxon_drop_p,
    wilson_interval,
)
from pytest_evalbench.gate.decision import EXIT_REGRESSION, GateDecision, GateInputs, GateSettings, evaluate_gate, gate_verdict
from pytest_evalbench.gate.paired import (
    BASELINE_SCHEMA_VERSION,
    POOLED,
    Baseline,
    compare_with_baseline,
    load_baseline,
    make_baseline,
    parse_compare_rule,
)
from pytest_evalbench.gate.rules import ThresholdRules, check_thresholds
from pytest_evalbench.kinds.scenarios.aggregate import aggregate
from pytest_evalbench.kinds.scenarios.models import ScoreRow
from pytest_evalbench.llm.engine import EngineStats
from pytest_evalbench.render.summary import build_summary
from pytest_evalbench.render.terminal import align, comparison_table, summary_lines, verdict_line

# --------------------------------------------------------------------------- stats


@pytest.mark.parametrize(("k", "n", "expected"), [
    (8, 10, (0.4902, 0.9433)),
    (81, 263, (0.2553, 0.3662)),  # Newcombe (1998a), Table I
    (15, 148, (0.0624, 0.1605)),
    (0, 10, (0.0, 0.2775)),
    (10, 10, (0.7225, 1.0)),
])
def test_wilson_known_values(k: int, n: int, expected: tuple[float, float]) -> None:
    assert wilson_interval(k, n) == pytest.approx(expected, abs=5e-5)


def test_wilson_edges() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


@given(st.integers(0, 2000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_contains_estimate_and_is_a_probability(kn: tuple[int, int]) -> None:
    k, n = kn
    low, high = wilson_interval(k, n)
    assert 0.0 <= low <= high <= 1.0
    if n:
        assert low <= k / n <= high


@pytest.mark.parametrize(("b", "c", "exact", "mid"), [
    (3, 0, 1 / 8, 1 / 16),  # the first row: 3 of 3 flip, exact one-sided p = 0.125
    (5, 0, 1 / 32, 1 / 64),
    (6, 0, 1 / 64, 1 / 128),
    (0, 6, 1.0, 1 - 1 / 128),
    (0, 0, 1.0, 1.0),
    (7, 3, (1 + 10 + 45 + 120) / 2**10, (1 + 10 + 45 + 60) / 2**10),
    (15, 3, (1 + 18 + 153 + 816) / 2**18, (1 + 18 + 153 + 408) / 2**18),
])
def test_mcnemar_one_sided_exact_and_mid_p(b: int, c: int, exact: float, mid: float) -> None:
    assert mcnemar_drop_p(b, c) == pytest.approx(exact, rel=1e-12)
    assert mcnemar_drop_p(b, c, mid=True) == pytest.approx(mid, rel=1e-12)


@pytest.mark.parametrize(("b", "c", "expected"), [
    (6, 0, 2 / 2**6), (0, 6, 2 / 2**6), (1, 0, 1.0), (0, 0, 1.0), (3, 0, 0.25),
    (3, 7, 2 * (1 + 10 + 45 + 120) / 2**10), (10, 2, 2 * (1 + 12 + 66) / 2**12),
])
def test_mcnemar_two_sided(b: int, c: int, expected: float) -> None:
    assert mcnemar_exact_p(b, c) == pytest.approx(expected, rel=1e-12)


def test_binomial_tail_large_counts_do_not_underflow() -> None:
    assert 0.0 < mcnemar_drop_p(5200, 5000) < 0.03
    assert binomial_upper_tail(2000, 2000) == 2.0**-2000 and binomial_upper_tail(0, 2000) == 1.0


@given(st.integers(0, 40).flatmap(lambda m: st.tuples(st.integers(0, m), st.just(m))))
def test_binomial_tail_matches_the_sum_of_terms(km: tuple[int, int]) -> None:
    k, m = km
    assert binomial_upper_tail(k, m) == pytest.approx(sum(math.comb(m, i) for i in range(k, m + 1)) / 2**m,
                                                      rel=1e-12)


def test_holm_and_bh_known_values() -> None:
    p = [0.01, 0.04, 0.03, 0.005]
    # Holm: sorted 0.005*4, 0.01*3, 0.03*2, 0.04*1 -> 0.02, 0.03, 0.06, max(0.06, 0.04)
    assert holm(p) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # BH: 0.04*4/4, 0.03*4/3, 0.01*4/2, 0.005*4/1, each the min with the ones above it
    assert benjamini_hochberg(p) == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0]) and holm([]) == []
    assert benjamini_hochberg([0.02, 0.5]) == pytest.approx([0.04, 0.5])


@given(st.lists(st.floats(0, 1), min_size=1, max_size=12))
def test_holm_is_between_raw_and_bonferroni_and_keeps_order(p: list[float]) -> None:
    adjusted = holm(p)
    for raw, adj in zip(p, adjusted):
        assert raw - 1e-12 <= adj <= min(1.0, raw * len(p)) + 1e-12
    bh = benjamini_hochberg(p)
    assert all(b <= h + 1e-12 for b, h in zip(bh, adjusted))  # BH never stricter than Holm
    order = sorted(range(len(p)), key=lambda i: p[i])
    assert [adjusted[i] for i in order] == sorted(adjusted)


def test_wilcoxon_published_example() -> None:
    # Fisher's (1935) height differences, as in scipy.stats.wilcoxon's documentation:
    # exact one-sided p = 0.0206298828125 for "greater"; a drop test sees the negated differences.
    d = [6, 8, 14, 16, 23, 24, 28, 29, 41, -48, 49, 56, 60, -67, 75]
    assert wilcoxon_drop_p([-x for x in d]) == (0.0206298828125, "exact")
    assert wilcoxon_drop_p(d)[0] > 0.97
    assert wilcoxon_drop_p([0, 0]) == (1.0, "no change")
    assert wilcoxon_drop_p([-1] * 5 + [0] * 3) == (1 / 32, "exact")  # zeros dropped


@given(st.lists(st.integers(-3, 3), min_size=1, max_size=10))
def test_wilcoxon_exact_equals_sign_enumeration_with_ties(diffs: list[int]) -> None:
    nonzero = [d for d in diffs if d]
    if not nonzero:
        return
    absolute = sorted(abs(d) for d in nonzero)
    rank = {v: (absolute.index(v) + len(absolute) - absolute[::-1].index(v) + 1) / 2 for v in absolute}
    observed = sum(rank[abs(d)] for d in nonzero if d < 0)
    hits = sum(1 for signs in itertools.product((0, 1), repeat=len(nonzero))
               if sum(rank[abs(d)] for d, s in zip(nonzero, signs) if s) >= observed - 1e-9)
    assert wilcoxon_drop_p(diffs) == (pytest.approx(hits / 2 ** len(nonzero)), "exact")


def test_wilcoxon_normal_approximation_with_ties(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_evalbench.formats import stats
    diffs = [-1] * 30 + [1] * 10 + [-2] * 20 + [2] * 10  # 70 pairs, two tie groups
    assert wilcoxon_drop_p(diffs)[1] == "normal"  # more than EXACT_MAX pairs
    monkeypatch.setattr(stats, "EXACT_MAX", 100)
    exact, how = wilcoxon_drop_p(diffs)
    assert how == "exact"
    # by hand: |d|=1 -> mid-rank 20.5 (40 ties), |d|=2 -> 55.5 (30 ties); T- = 30*20.5 + 20*55.5
    t_minus, mean = 30 * 20.5 + 20 * 55.5, (40 * 20.5 + 30 * 55.5) / 2
    sd = math.sqrt((40 * 20.5**2 + 30 * 55.5**2) / 4)
    expected = 0.5 * math.erfc((t_minus - mean - 0.5) / sd / math.sqrt(2))
    monkeypatch.setattr(stats, "EXACT_MAX", 10)
    approx, how = wilcoxon_drop_p(diffs)
    assert how == "normal" and approx == pytest.approx(expected, rel=1e-9)
    assert approx == pytest.approx(exact, abs=0.002)


def test_bootstrap_interval_is_deterministic_and_brackets_the_mean() -> None:
    diffs = [-1, -1, -0.5, 0, 0, 0.25, -0.75, -1, 0, -0.5]
    low, high = bootstrap_mean_interval(diffs)
    assert (low, high) == bootstrap_mean_interval(diffs)
    assert low < sum(diffs) / len(diffs) < high and high < 0
    assert bootstrap_mean_interval([0.5] * 4) == (0.5, 0.5)


def test_agresti_min_hand_computed() -> None:
    # cells + 1/2: p_b = 6.5/12, p_c = 0.5/12, d = -0.5, var = (7/12 - 0.25)/12
    half = 1.959964 * math.sqrt((7 / 12 - 0.25) / 12)
    assert agresti_min_interval(6, 0, 10) == pytest.approx((-0.5 - half, -0.5 + half))


def test_case_verdict_boundaries() -> None:
    assert case_verdict(1, 1) == "pass" and case_verdict(0, 1) == "fail"  # one sample: the raw outcome
    assert case_verdict(0, 0) == "inconclusive"
    assert case_verdict(10, 10) == "pass" and case_verdict(0, 10) == "fail" and case_verdict(5, 10) == "inconclusive"
    low, high = wilson_interval(8, 10)
    assert case_verdict(8, 10, threshold=low) == "pass"  # lower bound >= threshold
    assert case_verdict(8, 10, threshold=low + 1e-9) == "inconclusive"
    assert case_verdict(8, 10, threshold=high) == "inconclusive"  # upper bound must be strictly below
    assert case_verdict(8, 10, threshold=high + 1e-9) == "fail"



# --------------------------------------------------------------------------- rows


def score_rows(target: str, metric: str, outcomes: list[bool | None], mtype: str = "positive",
               sample: int = 0) -> list[PassFailUnit]:
    return [PassFailUnit(target, f"{metric}_s{i + 1:03d}_v01", metric, sample, passed, metric.upper(), mtype)
            for i, passed in enumerate(outcomes)]


def results_of(scores: list[PassFailUnit]) -> list[ModelResult]:
    """results.json of these rows, aggregated as the scenario kind does."""
    by_model: dict[str, list[ScoreRow]] = {}
    for r in scores:
        by_model.setdefault(r.target, []).append(ScoreRow(
            id=r.id, metric_id=r.metric_id, metric_name=r.metric_name or "", metric_type=r.metric_type or "positive",
            target_model=r.target, conv_id=f"{r.id}__{r.target}", present=r.passed, passed=r.passed,
            score=None if r.passed is None else int(r.passed), justification="", sample=r.sample))
    return aggregate(by_model)


def baseline_of(scores: list[PassFailUnit], meta: dict | None = None,
                evals: list[EvalScore] | None = None) -> Baseline:
    made = make_baseline(results_of(scores) if scores else [], scores, meta or {"judge": "j1"}, evals)
    return load_baseline(json.loads(json.dumps(made.to_json())))  # as read from disk


def metrics_rows(n_metrics: int, n_cases: int, failing: set[tuple[int, int]]) -> list[PassFailUnit]:
    """Metrics m01.. with n_cases rows each; (metric number, case index) in `failing` fail."""
    return [row for m in range(1, n_metrics + 1)
            for row in score_rows("t1", f"m{m:02d}", [(m, i) not in failing for i in range(n_cases)])]


def gate(scores: list[PassFailUnit], baseline: dict | None, rules: dict | None = None,
         evals: list[EvalScore] | None = None,
         **settings: object) -> tuple[int, list[str]]:
    """The gate's exit status for a run whose pytest status is 0 when nothing failed, else 1."""
    outcome = evaluate_gate(GateInputs(results=results_of(scores) if scores else [], units=scores,
                                       scores=evals or [], rules=ThresholdRules.model_validate(rules or {}),
                                       baseline=baseline), GateSettings(**settings))  # type: ignore[arg-type]
    failed = sum(1 for r in scores if r.passed is False)
    code = outcome.exit_code(1 if failed else 0)
    return code, rendered(outcome, code, failed)


def rendered(outcome: GateDecision, code: int, failed: int) -> list[str]:
    """The terminal summary a session prints for this outcome (the rendering production uses), and the
    verdict line it prints last."""
    summary = build_summary(kind="scenarios", written=None, gate=gate_verdict(outcome, code, failed, {}),
                            meta={"benchmark": "b"}, stats=EngineStats(), errors={}, recorded=0, failed=failed,
                            commit=None, files=[])
    return [*summary_lines(summary, Path("b"), Path("b")), verdict_line(summary.gate)]


THRESHOLDS = {"mode": "thresholds"}
SIGNIFICANT = {"mode": "thresholds", "compare_fail": parse_compare_rule("significant")}

# --------------------------------------------------------------------------- the table, unit level


def test_three_of_three_flips_are_not_significant() -> None:
    base = baseline_of(score_rows("t1", "m01", [True] * 3))
    comparison = compare_with_baseline(base, score_rows("t1", "m01", [False] * 3))
    test = comparison.get("t1", "m01")
    assert test is not None and (test.b, test.c, test.p_value) == (3, 0, 0.125) and not test.significant
    assert comparison.fails("significant") == []
    code, lines = gate(score_rows("t1", "m01", [False] * 3), base, **SIGNIFICANT)
    assert code == 0 and any("exact McNemar p=0.125, adjusted p=0.125" in line for line in
                             [t.describe() for t in comparison.tests])
    assert lines[-1] == "evalbench: PASSED (exit 0): 3 cases failed, the build gates on thresholds only"
    assert ("  rule: compare significant t1 m01: -1.00, p_adj 0.125 held (largest drop of 1 paired test, "
            "detects no drop)") in lines


def test_five_losses_among_ten_metrics_are_noise_after_holm() -> None:
    base = baseline_of(metrics_rows(10, 20, {(m, i) for m in (2, 3, 4, 5, 6) for i in (0,)}))
    now = metrics_rows(10, 20, {(1, i) for i in range(5)})  # m01 loses 5; 5 cases of m02..m06 improve
    comparison = compare_with_baseline(base, now)
    m01 = comparison.get("t1", "m01")
    assert m01 is not None and m01.p_value == pytest.approx(1 / 32)
    assert m01.p_adjusted == pytest.approx(11 / 32)  # Holm over 10 metrics + the pooled test
    pooled = comparison.get("t1", POOLED)
    assert pooled is not None and (pooled.b, pooled.c, pooled.n_shared) == (5, 5, 200)
    assert comparison.fails("significant") == [] and gate(now, base, **SIGNIFICANT)[0] == 0
    bh = compare_with_baseline(base, now, correction="bh").get("t1", "m01")
    assert bh is not None and bh.p_adjusted == pytest.approx(11 / 32) and not bh.significant


def test_one_flip_of_three_is_not_a_max_drop_breach() -> None:
    base = baseline_of(score_rows("t1", "m01", [True] * 3))
    now = score_rows("t1", "m01", [False, True, True])
    report = check_thresholds(results_of(now), ThresholdRules(max_drop=0.10), compare_with_baseline(base, now))
    assert report.breaches == [] and report.held == 1 and report.unevaluated == []
    assert gate(now, base, {"max_drop": 0.1}, **THRESHOLDS)[0] == 0


def test_dataset_thirty_passes_turned_failures_are_a_regression() -> None:
    def case_rows(passed: bool) -> list[PassFailUnit]:
        return [PassFailUnit("agent", f"case-{i:02d}", "pass_rate", 0, passed) for i in range(30)]
    results = [ModelResult(target_model="agent", positive_pass_rate=0.0, negative_pass_rate=None, n_positive=30,
                           n_negative=0, n_total=30, by_metric={}, by_scenario={})]
    base = load_baseline(json.loads(json.dumps(make_baseline(results, case_rows(True), {}).to_json())))
    outcome = evaluate_gate(GateInputs(results=results, units=case_rows(False), baseline=base),
                            GateSettings(**SIGNIFICANT))  # type: ignore[arg-type]
    assert outcome.exit_code(1) == EXIT_REGRESSION
    assert outcome.regressions == ["agent: pass_rate 1.00 -> 0.00 (-1.00; 30 pass->fail / 0 fail->pass of 30), "
                                   "exact McNemar p=9.31e-10, adjusted p=9.31e-10, detects drops >= 0.21"]
    lines = rendered(outcome, outcome.exit_code(1), 30)
    assert lines[-1] == "evalbench: REGRESSION (exit 6): 1 significant drop against the baseline"
    assert f"  REGRESSION vs baseline: {outcome.regressions[0]}" in lines


# --------------------------------------------------------------------------- comparisons and rules


def test_real_drop_is_significant_and_drop_rules_need_more_than_x() -> None:
    base = baseline_of(score_rows("t1", "m01", [True] * 10))
    comparison = compare_with_baseline(base, score_rows("t1", "m01", [False] * 6 + [True] * 4))
    test = comparison.get("t1", "m01")
    assert test is not None and test.change == pytest.approx(-0.6) and test.significant
    assert test.p_value == pytest.approx(1 / 64) and test.p_adjusted == pytest.approx(1 / 64)  # one test, no pool
    assert test.pass_to_fail == [f"t1|m01_s00{i}_v01|m01|0" for i in range(1, 7)]
    assert len(comparison.fails("significant")) == 1
    assert comparison.fails("drop:0.05")[0].startswith("t1: m01 1.00 -> 0.40 (-0.60; 6 pass->fail / 0 fail->pass")
    assert comparison.fails("drop:0.6") == []  # a drop of exactly 0.6 is not more than 0.6
    assert len(comparison.fails("any")) == 1


def test_one_flip_out_of_forty_passes_every_statistical_rule() -> None:
    base = baseline_of(score_rows("t1", "m01", [True] * 40))
    comparison = compare_with_baseline(base, score_rows("t1", "m01", [False] + [True] * 39))
    assert comparison.fails("significant") == [] and comparison.fails("drop:0.01") == []
    assert len(comparison.fails("any")) == 1


def test_pooled_test_catches_a_spread_drop_no_single_metric_shows() -> None:
    base = baseline_of(metrics_rows(5, 10, set()))
    now = metrics_rows(5, 10, {(m, i) for m in range(1, 6) for i in (0, 1)})
    comparison = compare_with_baseline(base, now)
    assert [t.significant for t in comparison.tests if t.kind == "pass/fail"] == [False] * 5
    pooled = comparison.get("t1", POOLED)
    assert pooled is not None and pooled.b == 10 and pooled.p_value == pytest.approx(2**-10) and pooled.significant
    assert [f.split(":")[1].split()[0] for f in comparison.fails("significant")] == [POOLED]
    report = check_thresholds(results_of(now), ThresholdRules(max_drop=0.1), comparison)
    assert len(report.breaches) == 1 and POOLED in report.breaches[0] and report.held == 5


def test_max_drop_per_metric_wins_over_the_target_limit() -> None:
    base = baseline_of(metrics_rows(2, 20, set()))
    now = metrics_rows(2, 20, {(1, i) for i in range(8)} | {(2, i) for i in range(8)})
    comparison = compare_with_baseline(base, now)
    rules = ThresholdRules(max_drop=0.1, per_metric={"m01": {"max_drop": 0.4}})  # type: ignore[dict-item]
    report = check_thresholds(results_of(now), rules, comparison)
    assert [(r.target, r.metric) for r in report.rules if r.status == "breached"] == [("t1", POOLED), ("t1", "m02")]
    assert report.breaches[1].startswith("max_drop 0.10 t1 m02: -0.40, p_adj ") and " breached (" in report.breaches[1]
    assert report.held == 1  # m01: drop 0.40 is not more than 0.40


def test_rules_that_cannot_be_evaluated_are_reported_never_held() -> None:
    now = score_rows("t1", "m01", [True] * 4)
    rules = ThresholdRules.model_validate({"min_negative_pass_rate": 0.5, "max_drop": 0.1,
                                           "per_target": {"ghost": {"min_positive_pass_rate": 0.2}}})
    report = check_thresholds(results_of(now), rules, None)
    assert report.held == 0 and report.breaches == []
    assert report.unevaluated == [
        "per_target ghost: not evaluated (no results for this target)",
        "min_negative_pass_rate 0.50 t1: not evaluated (this session scored no row of the negative metrics: "
        "select its cases (or run them all) and make sure they are scored)",
        "max_drop 0.10 t1: not evaluated (no baseline comparison; use --evalbench-compare)"]
    code, lines = gate(now, None, rules.model_dump(exclude_none=True), **THRESHOLDS)
    assert code == 0 and lines[-1] == "evalbench: PASSED (exit 0): every case passed"
    assert all(f"  NOT EVALUATED: {rule}" in lines for rule in report.unevaluated)
    assert "  NOT EVALUATED: max_drop 0.10 t1: not evaluated (no baseline comparison; use --evalbench-compare)" in lines


def test_no_shared_cases_means_not_compared() -> None:
    base = baseline_of(score_rows("t1", "m01", [True] * 20))
    renamed = [dataclasses.replace(r, id=r.id.replace("_v01", "_v02")) for r in score_rows("t1", "m01", [False] * 20)]
    comparison = compare_with_baseline(base, renamed)
    assert comparison.tests == [] and comparison.unevaluated == ["t1: m01 not compared (no shared cases)"]
    code, lines = gate(renamed, base, **SIGNIFICANT)
    assert code == 0 and "NOT EVALUATED: compare significant t1 m01: not evaluated (no shared cases)" in "\n".join(lines)


def test_new_and_removed_metrics_never_fail() -> None:
    base = baseline_of(score_rows("t1", "m01", [True] * 5))
    comparison = compare_with_baseline(base, score_rows("t1", "m02", [False] * 5))
    assert comparison.tests == [] and comparison.fails("any") == []
    assert comparison.unevaluated == ["t1: m01 not compared (no scored cases in this run)",
                                      "t1: m02 not compared (no scored cases in the baseline)"]


def test_dataset_scores_are_compared_by_wilcoxon_with_a_bootstrap_interval() -> None:
    def evals(scores: list[int]) -> list[EvalScore]:
        return [EvalScore("agent", f"c{i}", "RelevanceExplain", s) for i, s in enumerate(scores)]
    base = baseline_of([], evals=evals([5] * 12))
    assert base.scores["agent|c0|RelevanceExplain"] == 5
    comparison = compare_with_baseline(base, [], scores=evals([3] * 8 + [5] * 4))
    test = comparison.get("agent", "RelevanceExplain")
    assert test is not None and test.kind == "scores" and test.method == "Wilcoxon (exact)"
    assert test.p_value == pytest.approx(2**-8) and test.significant
    assert test.change == pytest.approx(-2 * 8 / 12 / 4) and test.high < 0
    assert "mean score 5.00 -> 3.67 (-1.33, bootstrap 95% CI" in test.describe()
    assert comparison.fails("drop:0.34") == [] and len(comparison.fails("drop:0.32")) == 1
    rules = ThresholdRules.model_validate({"per_metric": {"RelevanceExplain": {"max_drop": 0.2}}})
    report = check_thresholds([ModelResult(target_model="agent", positive_pass_rate=None, negative_pass_rate=None,
                                           n_positive=0, n_negative=0, n_total=0, by_metric={}, by_scenario={})],
                              rules, comparison)
    assert len(report.breaches) == 1 and report.breaches[0].startswith("max_drop 0.20 agent RelevanceExplain: -0.33, ")


# --------------------------------------------------------------------------- baseline files


def test_baseline_shape_and_round_trip() -> None:
    scores = score_rows("t1", "m01", [True, False, None]) + score_rows("t1", "m02", [False], "negative")
    base = baseline_of(scores, {"judge": "j1", "models": {"t1": "gpt-4o"}})
    assert base.schema_version == BASELINE_SCHEMA_VERSION == 2
    assert base.meta == {"judge": "j1", "models": {"t1": "gpt-4o"}}
    assert base.targets["t1"]["metrics"]["m01"] == {"n_passed": 1, "n_total": 2, "pass_rate": 0.5,
                                                     "metric_name": "M01", "metric_type": "positive"}
    assert base.cases == {"t1|m01_s001_v01|m01|0": True, "t1|m01_s002_v01|m01|0": False,
                          "t1|m02_s001_v01|m02|0": False}
    assert base.scores == {} and load_baseline(base.to_json()) == base
    assert list(base.to_json()) == ["schema_version", "meta", "targets", "cases", "scores"]
    same = compare_with_baseline(base, scores, meta={"judge": "j1", "models": {"t1": "gpt-4o"}})
    assert all(t.change == 0 for t in same.tests) and same.meta_warnings == []
    assert same.fails("any") == [] and same.fails("significant") == []
    assert json.loads(json.dumps(same.to_dict()))["entries"][0]["paired"]["n_shared"] == 2
    other = compare_with_baseline(base, scores, meta={"judge": "j2"})
    assert other.meta_warnings == ["judge differs from the baseline: j1 -> j2"]


def test_version_1_baselines_are_still_read() -> None:
    old = {"schema_version": 1, "meta": {}, "targets": {"t1": {"metrics": {}}},
           "cases": {f"t1|m01_s{i:03d}_v01|m01|0": True for i in range(1, 11)}}
    comparison = compare_with_baseline(load_baseline(old), score_rows("t1", "m01", [False] * 6 + [True] * 4))
    assert [(t.metric_id, t.b, t.significant) for t in comparison.tests] == [("m01", 6, True)]


def test_load_baseline_rejects_other_files() -> None:
    with pytest.raises(ValueError, match="schema_version 99 is not supported"):
        load_baseline({"schema_version": 99, "meta": {}, "targets": {}, "cases": {}})
    with pytest.raises(ValueError, match="not an evalbench baseline"):
        load_baseline([])
    with pytest.raises(ValueError, match="case 'x' is not"):
        load_baseline({"schema_version": 2, "meta": {}, "targets": {}, "cases": {"x": True}})
    with pytest.raises(ValueError, match=r"score 'a\|c1\|RelevanceExplain' is not"):
        load_baseline({"schema_version": 2, "meta": {}, "targets": {}, "cases": {},
                       "scores": {"a|c1|RelevanceExplain": "five"}})


def test_threshold_rules_validate() -> None:
    with pytest.raises(ValidationError):
        ThresholdRules.model_validate({"min_positive_pass_rate": 1.5})
    with pytest.raises(ValidationError):
        ThresholdRules.model_validate({"min_pass_rate_typo": 0.5})
    with pytest.raises(ValidationError):
        ThresholdRules.model_validate({"per_metric": {"m01": {"max_dorp": 0.5}}})
    rules = ThresholdRules.model_validate({"min_positive_pass_rate": 0.7, "min_negative_pass_rate": 0.6,
                                           "per_target": {"gpt-4o-mini": {"min_positive_pass_rate": 0.8}}})
    assert rules.for_target("gpt-4o-mini").min_positive_pass_rate == 0.8
    assert rules.for_target("gpt-4o-mini").min_negative_pass_rate == 0.6
    assert rules.for_target("other").min_positive_pass_rate == 0.7
    assert rules.count() == 3


def test_min_rules_breach_and_hold() -> None:
    results = results_of(score_rows("t1", "m01", [True, True, False, False]) +
                         score_rows("t1", "m02", [False] * 3 + [True], "negative"))
    rules = ThresholdRules.model_validate({"min_positive_pass_rate": 0.5, "min_negative_pass_rate": 0.6,
                                           "per_metric": {"m01": {"min_pass_rate": 0.75}}, "decision": "point"})
    report = check_thresholds(results, rules)
    assert [r.split(" (")[0] for r in report.breaches] == ["min_negative_pass_rate 0.60 t1: 0.25 breached",
                                                           "min_pass_rate 0.75 t1 m01: 0.50 breached"]
    assert report.rules[0].text().startswith("min_positive_pass_rate 0.50 t1: 0.50 held (of 4 rows, detects drops >= 0.")
    assert report.held == 1  # positive 0.50 >= 0.50


# --------------------------------------------------------------------------- per-case verdicts


@pytest.mark.parametrize(("passes", "mode", "fail_inconclusive", "code", "verdict"), [
    (9, "cases", False, 0, "pass"),        # the row: 9/10 prints pass, so the build passes
    (1, "cases", False, 1, "fail"),
    (5, "cases", False, 0, "inconclusive"),
    (5, "cases", True, 1, "inconclusive"),
    (1, "thresholds", False, 0, "fail"),
])
def test_samples_build_follows_the_per_case_verdict(passes: int, mode: str, fail_inconclusive: bool, code: int,
                                                    verdict: str) -> None:
    rows = [row for s in range(10) for row in score_rows("t1", "m01", [s < passes], sample=s)]
    rows += [row for s in range(10) for row in score_rows("t1", "m02", [True], sample=s)]
    status, lines = gate(rows, None, mode=mode, fail_inconclusive=fail_inconclusive)
    assert status == code
    assert f"  per-case: m01_s001_v01[t1] {passes}/10 passed -> {verdict}" in lines
    assert "  per-case: m02_s001_v01[t1] 10/10 passed -> pass" in lines
    if mode == "cases":
        tally = {"pass": "2 pass, 0 inconclusive, 0 fail", "fail": "1 pass, 0 inconclusive, 1 fail",
                 "inconclusive": "1 pass, 1 inconclusive, 0 fail"}[verdict]  # m02 passes
        word = "FAILED" if code else "PASSED"
        assert lines[-1] == f"evalbench: {word} (exit {code}): per-case verdicts over the samples: {tally}"


# --------------------------------------------------------------------------- compare rules and tables


@pytest.mark.parametrize(("text", "kind", "value"), [("significant", "significant", 0.0), (" ANY ", "any", 0.0),
                                                     ("drop:0.05", "drop", 0.05), ("drop:0", "drop", 0.0)])
def test_parse_compare_rule(text: str, kind: str, value: float) -> None:
    rule = parse_compare_rule(text)
    assert (rule.kind, rule.min_drop) == (kind, value)


@pytest.mark.parametrize("text", ["", "signif", "drop:", "drop:x", "drop:1.5", "drop:-0.1", "drop=0.05"])
def test_bad_compare_rule_lists_accepted_forms(text: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_compare_rule(text)
    message = str(info.value)
    assert repr(text) in message
    for form in ("'significant'", "'drop:<x>'", "'any'"):
        assert form in message


def test_tables_are_aligned_ascii() -> None:
    base = baseline_of(score_rows("t1", "m01", [True] * 10) + score_rows("target-two", "m01", [True] * 3))
    now = score_rows("t1", "m01", [False] * 6 + [True] * 4) + score_rows("target-two", "m01", [True] * 3)
    lines = summary_table(results_of(now)) + comparison_table(compare_with_baseline(base, now))
    assert all(line.isascii() for line in lines)
    row = next(line for line in lines if line.startswith("t1 ") and "exact McNemar" in line)
    assert row.split() == ["t1", "m01", "exact", "McNemar", "10", "1.000", "0.400", "-0.600", "6/0", "0.0156",
                           "0.0312", "0.58", "!"]  # detects drops >= 0.58: ten pairs without flip noise
    header = next(i for i, line in enumerate(lines) if line.startswith("target") and "p adj" in line)
    starts = [i for i, ch in enumerate(lines[header + 1]) if ch == "-" and (i == 0 or lines[header + 1][i - 1] == " ")]
    assert [row[s - 1] if s else " " for s in starts] == [" "] * len(starts)  # cells start at the columns
    assert any("after Holm correction over 2 tests" in line for line in lines)
    assert any("[0.17, 0.69]" in line for line in summary_table(results_of(now)))


def summary_table(results: list[ModelResult]) -> list[str]:
    """Plain-ASCII aligned lines: per target its overall rates, then per metric rate, k/n and
    95% Wilson interval."""
    from pytest_evalbench.gate.paired import metric_counts

    rows: list[list[str]] = [["target", "metric", "rate", "n", "95% CI"]]
    counts = metric_counts(results, [])
    for s in sorted(results, key=lambda s: s.target_model):
        target = s.target_model
        rows.append([target, "(positive)", _fmt(s.positive_pass_rate), str(s.n_positive), ""])
        rows.append([target, "(negative)", _fmt(s.negative_pass_rate), str(s.n_negative), ""])
        for mid, c in sorted(counts.get(target, {}).items()):
            est = RateEstimate.of(c.n_passed, c.n_total)
            rows.append([target, mid, _fmt(est.rate), f"{est.k}/{est.n}", f"[{est.low:.2f}, {est.high:.2f}]"])
    return align(rows)


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)
