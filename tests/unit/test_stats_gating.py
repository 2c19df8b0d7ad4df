"""stats.py and gating.py: intervals against published values, tests against hand-computed
binomials, threshold rules, compare rules and the baseline file."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from pytest_evalbench.gate.compare import (
    BASELINE_SCHEMA_VERSION,
    ThresholdRules,
    check_thresholds,
    check_thresholds_report,
    compare_with_baseline,
    load_baseline,
    make_baseline,
    parse_compare_rule,
    summary_table,
)
from pytest_evalbench.gate.stats import (
    agresti_min_interval,
    case_verdict,
    mcnemar_exact_p,
    newcombe_diff_interval,
    paired_comparison,
    wilson_interval,
)
from pytest_evalbench.scenarios.aggregate import aggregate

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


@pytest.mark.parametrize(("k1", "n1", "k2", "n2", "expected"), [
    (48, 80, 56, 70, (0.0524, 0.3339)),  # Newcombe (1998b), Table II, method 10
    (3, 10, 9, 10, (0.1705, 0.8090)),
    (0, 20, 0, 10, (-0.1611, 0.2775)),
])
def test_newcombe_known_values(k1: int, n1: int, k2: int, n2: int, expected: tuple[float, float]) -> None:
    assert newcombe_diff_interval(k1, n1, k2, n2) == pytest.approx(expected, abs=5e-5)


@given(st.integers(1, 300).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))),
       st.integers(1, 300).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_newcombe_contains_difference(a: tuple[int, int], b: tuple[int, int]) -> None:
    low, high = newcombe_diff_interval(*a, *b)
    assert -1.0 <= low <= b[0] / b[1] - a[0] / a[1] + 1e-12 and b[0] / b[1] - a[0] / a[1] - 1e-12 <= high <= 1.0


@pytest.mark.parametrize(("b", "c", "expected"), [
    (6, 0, 2 / 2**6),
    (0, 6, 2 / 2**6),
    (1, 0, 1.0),
    (0, 0, 1.0),
    (3, 7, 2 * (1 + 10 + 45 + 120) / 2**10),
    (10, 2, 2 * (1 + 12 + 66) / 2**12),
])
def test_mcnemar_exact(b: int, c: int, expected: float) -> None:
    assert mcnemar_exact_p(b, c) == pytest.approx(expected, rel=1e-12)


def test_mcnemar_large_counts_do_not_underflow() -> None:
    p = mcnemar_exact_p(5000, 5200)
    assert 0.0 < p < 0.06


def test_agresti_min_hand_computed() -> None:
    # cells + 1/2: p_b = 6.5/12, p_c = 0.5/12, d = -0.5, var = (7/12 - 0.25)/12
    half = 1.959964 * math.sqrt((7 / 12 - 0.25) / 12)
    assert agresti_min_interval(6, 0, 10) == pytest.approx((-0.5 - half, -0.5 + half))


def test_paired_comparison_flips() -> None:
    baseline = {"a": True, "b": True, "c": False, "d": False, "only-base": True}
    current = {"b": False, "a": False, "c": True, "d": False, "only-now": False}
    result = paired_comparison(baseline, current)
    assert (result.n_shared, result.b, result.c) == (4, 2, 1)
    assert result.diff == pytest.approx(-0.25)
    assert result.pass_to_fail == ["a", "b"] and result.fail_to_pass == ["c"]
    assert result.p_value == pytest.approx(1.0)
    assert not result.significant_drop
    assert json.loads(json.dumps(result.to_dict()))["pass_to_fail"] == ["a", "b"]


def test_paired_comparison_significance() -> None:
    ten = {f"k{i}": True for i in range(10)}
    dropped = paired_comparison(ten, {k: i >= 6 for i, k in enumerate(ten)})
    assert dropped.b == 6 and dropped.significant_drop and dropped.p_value == pytest.approx(0.03125)
    forty = {f"k{i:02d}": True for i in range(40)}
    one = paired_comparison(forty, {k: k != "k00" for k in forty})
    assert one.b == 1 and not one.significant_drop and one.p_value == 1.0
    empty = paired_comparison({"a": True}, {"b": False})
    assert empty.n_shared == 0 and not empty.significant_drop and (empty.low, empty.high) == (-1.0, 1.0)


def test_case_verdict_boundaries() -> None:
    assert case_verdict(1, 1) == "pass" and case_verdict(0, 1) == "fail"  # one sample: the raw outcome
    assert case_verdict(0, 0) == "inconclusive"
    assert case_verdict(10, 10) == "pass" and case_verdict(0, 10) == "fail" and case_verdict(5, 10) == "inconclusive"
    low, high = wilson_interval(8, 10)
    assert case_verdict(8, 10, threshold=low) == "pass"  # lower bound >= threshold
    assert case_verdict(8, 10, threshold=low + 1e-9) == "inconclusive"
    assert case_verdict(8, 10, threshold=high) == "inconclusive"  # upper bound must be strictly below
    assert case_verdict(8, 10, threshold=high + 1e-9) == "fail"


# --------------------------------------------------------------------------- thresholds


def summary(target: str, pos: float | None, neg: float | None, by_metric: dict[str, float | None]) -> dict:
    return {"target_model": target, "positive_pass_rate": pos, "negative_pass_rate": neg, "n_positive": 10,
            "n_negative": 10, "n_total": 20,
            "by_metric": {m: {"pass_rate": r, "n_passed": 0 if r is None else round(r * 10),
                              "n_total": 0 if r is None else 10} for m, r in by_metric.items()},
            "by_scenario": {}}


RULES = {"min_positive_pass_rate": 0.7, "min_negative_pass_rate": 0.6, "max_drop": 0.10,
         "per_target": {"gpt-4o-mini": {"min_positive_pass_rate": 0.8}}, "per_metric": {"m01": {"min_pass_rate": 0.5}}}


def test_threshold_breaches_and_messages() -> None:
    results = [summary("gpt-4o", 0.75, 0.55, {"m01": 0.4, "m02": 0.55}),
               summary("gpt-4o-mini", 0.62, 0.9, {"m01": 0.6, "m02": 0.9})]
    messages = [b.message for b in check_thresholds(results, RULES)]
    assert messages == ["gpt-4o: negative_pass_rate 0.55 < 0.60", "gpt-4o: m01 pass_rate 0.40 < 0.50",
                        "gpt-4o-mini: positive_pass_rate 0.62 < 0.80"]
    breach = check_thresholds(results, RULES)[2]
    assert (breach.target, breach.metric, breach.value, breach.threshold) == ("gpt-4o-mini", "positive_pass_rate",
                                                                              0.62, 0.8)
    assert check_thresholds([summary("x", 0.7, 0.6, {"m01": 0.5})], RULES) == []  # equal is not a breach
    assert check_thresholds(results, None) == []


def test_null_rates_are_no_data_notes_not_breaches() -> None:
    results = [summary("gpt-4o", 0.9, None, {"m02": 0.9})]
    report = check_thresholds_report(results, {**RULES, "per_target": {"ghost": {"max_drop": 0.2}}})
    assert report.breaches == []
    assert [n.message for n in report.notes] == ["ghost: per_target no data (per_target rule for a target without "
                                                 "results not checked)",
                                                 "gpt-4o: negative_pass_rate no data (min 0.60 not checked)",
                                                 "gpt-4o: m01 no data (min 0.50 not checked)"]
    assert all(n.kind == "no_data" for n in report.notes)


def test_max_drop_against_baseline_results() -> None:
    base = [summary("gpt-4o", 0.9, 0.9, {"m01": 0.9, "m02": 0.80, "m03": 0.5})]
    now = [summary("gpt-4o", 0.9, 0.9, {"m01": 0.75, "m02": 0.70})]
    rules = {"max_drop": 0.10, "per_metric": {"m01": {"max_drop": 0.2}}}
    report = check_thresholds_report(now, rules, base)
    assert [b.message for b in report.breaches] == []  # m01 allows 0.2; m02 dropped exactly 0.10
    now[0]["by_metric"]["m02"]["pass_rate"] = 0.6
    breaches = check_thresholds(now, rules, base)
    assert [b.message for b in breaches] == ["gpt-4o: m02 drop 0.20 > 0.10 (0.80 -> 0.60)"]
    assert breaches[0].kind == "max_drop"
    assert [n.metric for n in check_thresholds_report(now, rules, base).notes] == ["m03"]


def test_threshold_rules_validate() -> None:
    with pytest.raises(ValidationError):
        ThresholdRules.from_config({"min_positive_pass_rate": 1.5})
    with pytest.raises(ValidationError):
        ThresholdRules.from_config({"min_pass_rate_typo": 0.5})
    rules = ThresholdRules.from_config(RULES)
    assert rules.for_target("gpt-4o-mini").min_positive_pass_rate == 0.8
    assert rules.for_target("gpt-4o-mini").min_negative_pass_rate == 0.6
    assert rules.for_target("other").min_positive_pass_rate == 0.7


# --------------------------------------------------------------------------- baseline and compare rules


def score_rows(target: str, metric: str, outcomes: list[bool | None], mtype: str = "positive") -> list[dict]:
    return [{"id": f"{metric}_s{i + 1:03d}_v01", "metric_id": metric, "metric_name": metric.upper(),
             "metric_type": mtype, "target_model": target, "conv_id": f"{metric}_s{i + 1:03d}_v01__{target}",
             "present": passed, "passed": passed, "score": None if passed is None else int(passed),
             "justification": "", "sample": 0} for i, passed in enumerate(outcomes)]


def run(scores: list[dict]) -> tuple[list[dict], list[dict]]:
    by_model: dict[str, list[dict]] = {}
    for row in scores:
        by_model.setdefault(row["target_model"], []).append(row)
    return aggregate(by_model), scores


def baseline_of(scores: list[dict], meta: dict | None = None) -> dict:
    results, scores = run(scores)
    return json.loads(json.dumps(make_baseline(results, scores, meta or {"judge": "j1"})))  # as read from disk


def test_baseline_shape_and_round_trip() -> None:
    scores = score_rows("t1", "m01", [True, False, None]) + score_rows("t1", "m02", [False], "negative")
    base = baseline_of(scores, {"judge": "j1", "models": {"t1": "gpt-4o"}})
    assert base["schema_version"] == BASELINE_SCHEMA_VERSION
    assert base["meta"] == {"judge": "j1", "models": {"t1": "gpt-4o"}}
    assert base["targets"]["t1"]["metrics"]["m01"] == {"n_passed": 1, "n_total": 2, "pass_rate": 0.5,
                                                        "metric_name": "M01", "metric_type": "positive"}
    assert base["targets"]["t1"]["positive_pass_rate"] == 0.5
    assert base["cases"] == {"t1|m01_s001_v01|m01|0": True, "t1|m01_s002_v01|m01|0": False,
                             "t1|m02_s001_v01|m02|0": False}
    assert load_baseline(base) is base
    results, _ = run(scores)
    same = compare_with_baseline(base, results, scores, meta={"judge": "j1", "models": {"t1": "gpt-4o"}})
    assert all(e.change == 0 for e in same.entries) and same.meta_warnings == []
    assert same.fails("any") == [] and same.fails("significant") == []
    assert json.loads(json.dumps(same.to_dict()))["entries"][0]["paired"]["n_shared"] == 2
    other = compare_with_baseline(base, results, scores, meta={"judge": "j2"})
    assert other.meta_warnings == ["judge differs from the baseline: 'j1' -> 'j2'"]


def test_load_baseline_rejects_other_versions() -> None:
    with pytest.raises(ValueError, match="schema_version 99 is not supported"):
        load_baseline({"schema_version": 99, "meta": {}, "targets": {}, "cases": {}})
    with pytest.raises(ValueError, match="not an evalbench baseline"):
        load_baseline([])


def test_ten_case_drop_of_six_is_significant() -> None:
    base = baseline_of(score_rows("t1", "m01", [True] * 10))
    results, scores = run(score_rows("t1", "m01", [False] * 6 + [True] * 4))
    comparison = compare_with_baseline(base, results, scores)
    entry = comparison.get("t1", "m01")
    assert entry is not None and entry.change == pytest.approx(-0.6)
    assert entry.paired is not None and entry.paired.b == 6 and entry.significant_drop
    assert entry.paired.pass_to_fail == [f"t1|m01_s00{i}_v01|m01|0" for i in range(1, 7)]
    assert len(comparison.fails("significant")) == 1
    assert "t1: m01 1.00 -> 0.40 (-0.60" in comparison.fails("drop:0.05")[0]
    assert comparison.fails("drop:0.6") == []  # a drop of exactly 0.6 is not more than 0.6
    assert len(comparison.fails("any")) == 1


def test_one_flip_out_of_forty_is_not_significant() -> None:
    base = baseline_of(score_rows("t1", "m01", [True] * 40))
    results, scores = run(score_rows("t1", "m01", [False] + [True] * 39))
    comparison = compare_with_baseline(base, results, scores)
    assert not comparison.get("t1", "m01").significant_drop
    assert comparison.fails("significant") == [] and comparison.fails("drop:0.01") == []
    assert len(comparison.fails("any")) == 1


def test_unpaired_fallback_when_no_cases_are_shared() -> None:
    base = baseline_of(score_rows("t1", "m01", [True] * 20))
    results, scores = run([dict(r, id=r["id"].replace("_v01", "_v02")) for r in score_rows("t1", "m01", [False] * 20)])
    entry = compare_with_baseline(base, results, scores).get("t1", "m01")
    assert entry.paired is None and entry.change_high < 0 and entry.significant_drop


def test_new_and_removed_metrics_never_fail() -> None:
    base = baseline_of(score_rows("t1", "m01", [True] * 5))
    results, scores = run(score_rows("t1", "m02", [False] * 5))
    comparison = compare_with_baseline(base, results, scores)
    assert [(e.metric_id, e.baseline is None, e.current is None) for e in comparison.entries] == [
        ("m01", False, True), ("m02", True, False)]
    assert comparison.fails("any") == []


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


def test_summary_table_is_aligned_ascii() -> None:
    base = baseline_of(score_rows("t1", "m01", [True] * 10) + score_rows("target-two", "m01", [True] * 3)
                       + score_rows("target-two", "m05", [True]))
    results, scores = run(score_rows("t1", "m01", [False] * 6 + [True] * 4) + score_rows("target-two", "m01", [True] * 3)
                          + score_rows("target-two", "m09", [True]))
    comparison = compare_with_baseline(base, results, scores)
    lines = summary_table(results, comparison)
    assert all(line.isascii() for line in lines)
    header, rule = lines[0], lines[1]
    assert header.split()[:3] == ["target", "metric", "rate"]
    starts = [i for i, ch in enumerate(rule) if ch == "-" and (i == 0 or rule[i - 1] == " ")]
    row = next(line for line in lines if line.startswith("t1 ") and " m01 " in line)
    assert [row[s - 1] if s else " " for s in starts] == [" "] * len(starts)  # cells start at the columns
    assert "0.400" in row and "4/10" in row and "-0.600 !" in row and "6/0" in row
    assert any("m09" in line and "new" in line for line in lines)
    assert any("m05" in line and "removed" in line for line in lines)
    assert lines[-1].startswith("!")
    plain = summary_table(results, None)
    assert "baseline" not in plain[0] and any("[0.17, 0.69]" in line for line in plain)
