"""The paired, multiplicity-corrected comparison of a run with its baseline, and the compare rule.

Every comparison pairs the cases both runs scored; the tests of one run form one family whose
p-values are adjusted together (Holm by default). Pure functions; no I/O, no pytest.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pytest_evalbench.gate.baseline import Baseline, case_outcomes, case_scores
from pytest_evalbench.gate.rows import EvalScore, OutcomeRow
from pytest_evalbench.gate.stats import adjust, agresti_min_interval, bootstrap_mean_interval, mcnemar_drop_p, wilcoxon_drop_p

EPS = 1e-9  # a 1/n step must not count as more than an equal max_drop through float noise
POOLED = "(pooled)"
SCORE_RANGE = 4.0  # scores run 1..5: drops of scores are compared with drop:X / max_drop on (score-1)/4


# --------------------------------------------------------------------------- compare rules


@dataclass(frozen=True)
class CompareRule:
    kind: Literal["significant", "drop", "any"]
    min_drop: float = 0.0


RULE_FORMS = ("'significant' (fail on a drop that is significant after the run's multiplicity correction), "
              "'drop:<x>' with 0 <= x < 1 (fail when the observed drop exceeds x and is significant after "
              "correction), 'any' (fail on any observed drop)")


def parse_compare_rule(text: str) -> CompareRule:
    """`--evalbench-compare-fail` value -> CompareRule; ValueError lists the accepted forms."""
    raw = (text or "").strip().lower()
    if raw in ("significant", "any"):
        return CompareRule(raw)  # type: ignore[arg-type]
    if raw.startswith("drop:"):
        try:
            value = float(raw[5:])
        except ValueError:
            value = -1.0
        if 0 <= value < 1:
            return CompareRule("drop", value)
    raise ValueError(f"invalid compare rule {text!r}; accepted forms: {RULE_FORMS}")


# --------------------------------------------------------------------------- the comparison


@dataclass
class PairedTest:
    """One comparison of the family: a target x metric (pass/fail, exact one-sided McNemar), a
    target's pooled pass/fail over all its metrics, or a target x eval score (Wilcoxon).

    `change` is current minus baseline on the shared pairs (a pass rate, or for scores the mean
    difference divided by SCORE_RANGE); `drop` = -change. `low`/`high`: a descriptive 95% interval
    of the change (Agresti-Min for pass/fail, paired bootstrap for scores); the decision is
    `p_adjusted < alpha` with change < 0, nothing else.
    """

    target: str
    metric_id: str
    kind: Literal["pass/fail", "pooled", "scores"]
    n_shared: int
    baseline_mean: float
    current_mean: float
    change: float
    low: float
    high: float
    p_value: float
    method: str
    b: int = 0
    c: int = 0
    p_adjusted: float = 1.0
    significant: bool = False
    pass_to_fail: list[str] = field(default_factory=list)

    @property
    def drop(self) -> float:
        return -self.change

    def exceeds(self, limit: float) -> bool:
        """Observed drop > limit (a pass rate moves in steps of 1/n_shared)."""
        return self.drop > limit + EPS

    def describe(self) -> str:
        if self.kind == "scores":
            scale = SCORE_RANGE
            what = (f"mean score {self.baseline_mean:.2f} -> {self.current_mean:.2f} "
                    f"({self.change * scale:+.2f}, bootstrap 95% CI [{self.low * scale:+.2f}, {self.high * scale:+.2f}])")
        else:
            what = (f"{self.baseline_mean:.2f} -> {self.current_mean:.2f} ({self.change:+.2f}; "
                    f"{self.b} pass->fail / {self.c} fail->pass of {self.n_shared})")
        return (f"{self.target}: {self.metric_id} {what}, {self.method} p={self.p_value:.3g}, "
                f"adjusted p={self.p_adjusted:.3g}")


@dataclass(frozen=True)
class NotCompared:
    """A target x metric the comparison could not pair (no shared cases, no scored cases on one side)."""

    target: str
    metric: str
    why: str

    def text(self) -> str:
        return f"{self.target}: {self.metric} not compared ({self.why})"


@dataclass
class Comparison:
    tests: list[PairedTest]
    correction: str
    alpha: float
    not_compared: list[NotCompared] = field(default_factory=list)
    """Comparisons that could not be made (no shared cases, metric missing on one side)."""
    baseline_meta: dict[str, Any] = field(default_factory=dict)
    meta_warnings: list[str] = field(default_factory=list)

    @property
    def unevaluated(self) -> list[str]:
        """`not_compared` in words: `<target>: <metric> not compared (<why>)`."""
        return [n.text() for n in self.not_compared]

    def get(self, target: str, metric_id: str) -> PairedTest | None:
        return next((t for t in self.tests if t.target == target and t.metric_id == metric_id), None)

    def fails(self, rule: str | CompareRule) -> list[str]:
        """Reasons the compare rule fails the build (empty list = passes)."""
        rule = parse_compare_rule(rule) if isinstance(rule, str) else rule
        hits = []
        for t in self.tests:
            if rule.kind == "any":
                hit = t.kind != "pooled" and t.exceeds(0.0)
            else:
                hit = t.significant and t.exceeds(rule.min_drop)
            if hit:
                hits.append(t.describe())
        return hits

    def to_dict(self) -> dict[str, Any]:
        """The HTML report's view: one entry per target x metric pass/fail test."""
        entries = []
        for t in self.tests:
            if t.kind != "pass/fail":
                continue
            entries.append({"target": t.target, "metric_id": t.metric_id, "baseline": {"rate": t.baseline_mean},
                            "change": t.change, "significant_drop": t.significant,
                            "paired": {"low": t.low, "high": t.high, "b": t.b, "c": t.c, "p_value": t.p_value,
                                       "p_adjusted": t.p_adjusted, "n_shared": t.n_shared}})
        return {"entries": entries, "tests": [asdict(t) for t in self.tests], "correction": self.correction,
                "alpha": self.alpha, "unevaluated": self.unevaluated, "baseline_meta": self.baseline_meta,
                "meta_warnings": self.meta_warnings}


def _group(values: dict[str, Any], parts: int) -> dict[tuple[str, str], dict[str, Any]]:
    """Keyed values split by (target, metric) from `t|id|metric[|sample]` keys."""
    out: dict[tuple[str, str], dict[str, Any]] = defaultdict(dict)
    for key, value in values.items():
        split = key.split("|")
        if len(split) == parts:
            out[(split[0], split[2])][key] = value
    return out


def _pass_fail_test(target: str, metric: str, kind: Literal["pass/fail", "pooled"],
                    old: dict[str, bool], new: dict[str, bool]) -> PairedTest | None:
    shared = sorted(set(old) & set(new))
    if not shared:
        return None
    pass_to_fail = [k for k in shared if old[k] and not new[k]]
    b, c, n = len(pass_to_fail), sum(1 for k in shared if new[k] and not old[k]), len(shared)
    low, high = agresti_min_interval(b, c, n)
    return PairedTest(target, metric, kind, n, sum(old[k] for k in shared) / n, sum(new[k] for k in shared) / n,
                      (c - b) / n, low, high, mcnemar_drop_p(b, c), "exact McNemar", b=b, c=c,
                      pass_to_fail=pass_to_fail)


def _score_test(target: str, metric: str, old: dict[str, float], new: dict[str, float]) -> PairedTest | None:
    shared = sorted(set(old) & set(new))
    if not shared:
        return None
    diffs = [(new[k] - old[k]) / SCORE_RANGE for k in shared]
    p, how = wilcoxon_drop_p(diffs)
    low, high = bootstrap_mean_interval(diffs)
    n = len(shared)
    return PairedTest(target, metric, "scores", n, sum(old[k] for k in shared) / n, sum(new[k] for k in shared) / n,
                      sum(diffs) / n, low, high, p, f"Wilcoxon ({how})")


def compare_with_baseline(baseline: Baseline, outcomes: list[OutcomeRow], meta: dict[str, Any] | None = None,
                          *, scores: list[EvalScore] | None = None, correction: str = "holm",
                          alpha: float = 0.05) -> Comparison:
    """Current run vs a baseline: every paired test, with p-values adjusted over the whole family.
    `meta` (the current run's, same shape as the baseline's) yields warnings for keys whose values
    differ, e.g. the judge model."""
    old_cases, new_cases = _group(baseline.cases, 4), _group(case_outcomes(outcomes), 4)
    old_scores, new_scores = _group(baseline.scores, 3), _group(case_scores(scores or []), 3)
    tests: list[PairedTest] = []
    unevaluated: list[NotCompared] = []

    def missing(target: str, metric: str, old: dict[str, Any], new: dict[str, Any]) -> None:
        side = "this run" if old and not new else ("the baseline" if new and not old else "both")
        why = "no shared cases" if old and new else f"no scored cases in {side}"
        unevaluated.append(NotCompared(target, metric, why))

    by_target: dict[str, list[PairedTest]] = defaultdict(list)
    for key in sorted(set(old_cases) | set(new_cases)):
        test = _pass_fail_test(key[0], key[1], "pass/fail", old_cases.get(key, {}), new_cases.get(key, {}))
        if test is None:
            missing(*key, old_cases.get(key, {}), new_cases.get(key, {}))
        else:
            tests.append(test)
            by_target[key[0]].append(test)
    for target, target_tests in sorted(by_target.items()):
        if len(target_tests) > 1:
            old = {k: v for (t, _), cases in old_cases.items() if t == target for k, v in cases.items()}
            new = {k: v for (t, _), cases in new_cases.items() if t == target for k, v in cases.items()}
            pooled = _pass_fail_test(target, POOLED, "pooled", old, new)
            if pooled is not None:
                tests.append(pooled)
    for key in sorted(set(old_scores) | set(new_scores)):
        test = _score_test(key[0], key[1], old_scores.get(key, {}), new_scores.get(key, {}))
        if test is None:
            missing(*key, old_scores.get(key, {}), new_scores.get(key, {}))
        else:
            tests.append(test)
    for test, p_adj in zip(tests, adjust([t.p_value for t in tests], correction)):
        test.p_adjusted = p_adj
        test.significant = test.change < 0 and p_adj < alpha
    warnings = meta_warnings(baseline.meta, meta) if meta is not None else []
    return Comparison(tests, correction, alpha, unevaluated, dict(baseline.meta), warnings)


def _short(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def meta_warnings(baseline: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What differs between the baseline's run and this one, in words: changed, added and removed
    entries of mappings (e.g. targets) instead of two raw dicts."""
    out = []
    for key in sorted(set(baseline) & set(current)):
        old, new = baseline[key], current[key]
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            parts = [f"{k}: {_short(old[k])} -> {_short(new[k])}" for k in sorted(set(old) & set(new)) if old[k] != new[k]]
            parts += [f"added {k} ({_short(new[k])})" for k in sorted(set(new) - set(old))]
            parts += [f"removed {k} ({_short(old[k])})" for k in sorted(set(old) - set(new))]
            out.append(f"{key} differ from the baseline: " + "; ".join(parts))
        else:
            out.append(f"{key} differs from the baseline: {_short(old)} -> {_short(new)}")
    return out
