"""The threshold rules of benchmark.yaml, evaluated: each one held, breached or not evaluated (and why).

Pure functions; no I/O, no pytest. `RuleResult.text()` is the one wording every surface shows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from pytest_evalbench.formats.results import CorrectedSummary, ModelResult
from pytest_evalbench.formats.spec import MetricRule, TargetRule, ThresholdRules
from pytest_evalbench.formats.stats import (
    rows_to_detect_a_fall,
    threshold_decision,
    threshold_detectable_drop,
    wilson_interval,
)
from pytest_evalbench.gate.paired import EPS, Comparison, detects_text

__all__ = ["MetricRule", "TargetRule", "ThresholdRules"]


# --------------------------------------------------------------------------- threshold rules


TOO_FEW = "too few rows"
"""How a min rule a selection has too few rows for says why it is not evaluated."""

RuleStatus = Literal["held", "breached", "inconclusive", "not evaluated"]


@dataclass
class RuleResult:
    """One gate rule as evaluated: its name and limit, whom it applies to, the number it read and
    the outcome; renderers show `text()` (the same words on every surface) and never parse it."""

    rule: str
    """`min_positive_pass_rate`, `min_negative_pass_rate`, `min_pass_rate`, `max_drop` or `compare`."""
    limit: float | str | None
    target: str | None
    metric: str | None
    status: RuleStatus
    value: float | None = None
    """The number the rule compared with its limit (a rate, or for max_drop the change)."""
    p_adjusted: float | None = None
    why: str | None = None
    """With status "not evaluated": why; otherwise an optional detail (a breached test's description)."""
    low: float | None = None
    """A min rule deciding on the interval: the rate's 95% Wilson interval, low end."""
    high: float | None = None
    n: int | None = None
    """A min rule: the scored rows it read."""
    detectable: float | None = None
    """The smallest drop the rule detects with 80% power at the run's alpha (a min rule: below its
    minimum; max_drop/compare: the paired test's); None with `detects` set means none can be."""
    detects: bool = False
    """Whether the rule states a smallest detectable change (`detectable` None then means no drop)."""
    rows_needed: int | None = None
    """A min rule that detects no drop: the fewest rows that could breach its minimum at all."""

    def text(self) -> str:
        """`min_negative_pass_rate 0.60 t: 1.00 held (95% interval [0.72, 1.00] of 10 rows, detects drops >= 0.38)`,
        `max_drop 0.10 t m01: -0.25, p_adj 0.03 breached (<the paired test>, detects drops >= 0.21)`,
        `max_drop 0.10 t m01: not evaluated (no paired cases)`."""
        limit = f"{self.limit:.2f}" if isinstance(self.limit, float) else (self.limit or "")
        head = " ".join(p for p in (self.rule, limit, self.target, self.metric) if p)
        if self.status == "not evaluated":
            return f"{head}: not evaluated ({self.why})"
        nums = [] if self.value is None else [f"{self.value:+.2f}" if self.rule in ("max_drop", "compare")
                                              else f"{self.value:.2f}"]
        if self.p_adjusted is not None:
            nums.append(f"p_adj {self.p_adjusted:.3g}")
        details = [self.why] if self.why else []
        rows = "" if self.n is None else f" of {self.n} row{'s' if self.n != 1 else ''}"
        if self.low is not None and self.high is not None:
            details.append(f"95% interval [{self.low:.2f}, {self.high:.2f}]{rows}")
        elif rows:
            details.append(rows.strip())
        said = detects_text(self.detectable)
        if self.detects and not any(said in d for d in details):
            details.append(said + (f"; {self.rows_needed} rows would detect a fall to 0" if self.detectable is None
                                   and self.rows_needed is not None else ""))
        return f"{head}: {', '.join(nums) + ' ' if nums else ''}{self.status}" + (
            f" ({', '.join(details)})" if details else "")


@dataclass
class RuleReport:
    rules: list[RuleResult] = field(default_factory=list)
    """Every configured rule, evaluated or not, in the order checked."""
    too_few: bool = False
    """Some min rule read fewer rows than `min_rows` and was not evaluated."""

    @property
    def breaches(self) -> list[str]:
        return [r.text() for r in self.rules if r.status == "breached"]

    @property
    def unevaluated(self) -> list[str]:
        return [r.text() for r in self.rules if r.status == "not evaluated"]

    @property
    def inconclusive(self) -> list[str]:
        return [r.text() for r in self.rules if r.status == "inconclusive"]

    @property
    def held(self) -> int:
        return sum(1 for r in self.rules if r.status == "held")


def no_rows_why(unreliable: Mapping[str, str], types: Mapping[str, str], polarity: str | None,
                metric: str | None) -> str:
    """Why a min rule read no row, in words a user can act on: the rows it would read were all decided
    by a judge calibration found unreliable (shown, never gated), or this session scored none."""
    doubtful = sorted(m for m in unreliable if m == metric or (metric is None and types.get(m) == polarity))
    what = metric if metric else f"the {polarity} metrics"
    if not doubtful:
        return (f"this session scored no row of {what}: select its cases (or run them all) and make sure "
                "they are scored")
    return (f"every row of {what} this session measured was decided by a judge calibration found unreliable "
            f"({', '.join(doubtful)}): such rows are shown, never gated; improve the judge or its prompt until its "
            "kappa reaches judge.min_kappa (--evalbench-calibrate), or add a check that decides without it")


def check_thresholds(results: list[ModelResult], rules: ThresholdRules | None,
                     comparison: Comparison | None = None, *, corrected: bool = False, alpha: float = 0.05,
                     min_rows: int = 1, unreliable: Mapping[str, str] | None = None,
                     types: Mapping[str, str] | None = None) -> RuleReport:
    """Every configured rule: breached, held, inconclusive or not evaluated (a null rate, fewer than
    `min_rows` rows, a target without results, or a max_drop without a baseline comparison).

    min rules read the results.json-shaped summaries. With `thresholds.decision: interval` (the
    default) a rule is breached when the rate's 95% Wilson interval lies below the minimum (and the
    exact one-sided binomial test at the minimum agrees at alpha), held when its low end is at or above
    it, else inconclusive; `point` compares the rate itself. max_drop reads the comparison's paired
    tests: observed drop > max_drop AND significant after the run's correction. With `corrected`
    (`judge: {correct_rates: true}`) min rules read the rates corrected for the judge's errors (as
    points); an undefined one leaves the rule not evaluated.
    `unreliable` (metric -> why its judge is unreliable) and `types` (metric -> positive/negative) say
    why a rule read no row."""
    rules = rules or ThresholdRules()
    report = RuleReport()
    decision = rules.decision

    def minimum(target: str, name: str, metric: str | None, value: float | None, threshold: float | None,
                fixed: CorrectedSummary | None = None, n: int = 0) -> None:
        if threshold is None:
            return
        if value is not None and n < min_rows:
            report.rules.append(RuleResult(name, threshold, target, metric, "not evaluated",
                                           why=f"{TOO_FEW}: {n} < gate.min_rows {min_rows}"))
            report.too_few = True
            return
        if corrected and fixed is not None:
            if fixed.pass_rate is None:
                report.rules.append(RuleResult(name, threshold, target, metric, "not evaluated",
                                               why=f"corrected rate undefined: {fixed.undefined}"))
            else:
                low, high = fixed.ci if decision == "interval" and fixed.ci else (None, None)
                report.rules.append(RuleResult(name, threshold, target, metric,
                                               _corrected_status(fixed.pass_rate, low, high, threshold),
                                               fixed.pass_rate, why="corrected rate", low=low, high=high))
            return
        if value is None:
            polarity = None if metric else name.split("_")[1]  # min_positive_pass_rate -> positive
            report.rules.append(RuleResult(name, threshold, target, metric, "not evaluated",
                                           why=no_rows_why(unreliable or {}, types or {}, polarity, metric)))
            return
        k = round(value * n)
        low, high = wilson_interval(k, n) if decision == "interval" else (None, None)
        report.rules.append(RuleResult(name, threshold, target, metric, threshold_decision(k, n, threshold, alpha, decision),
                                       value, low=low, high=high, n=n, detects=True,
                                       detectable=(drop := threshold_detectable_drop(n, threshold, alpha, decision)),
                                       rows_needed=rows_to_detect_a_fall(threshold, alpha, decision) if drop is None else None))

    seen = {s.target_model for s in results}
    for name in sorted(set(rules.per_target) - seen):
        report.rules.append(RuleResult("per_target", None, name, None, "not evaluated",
                                       why="no results for this target"))
    for summary in sorted(results, key=lambda s: s.target_model):
        target = summary.target_model
        rule = rules.for_target(target)
        minimum(target, "min_positive_pass_rate", None, summary.positive_pass_rate, rule.min_positive_pass_rate,
                summary.corrected_positive, _scored(summary, "positive"))
        minimum(target, "min_negative_pass_rate", None, summary.negative_pass_rate, rule.min_negative_pass_rate,
                summary.corrected_negative, _scored(summary, "negative"))
        for mid, mrule in sorted(rules.per_metric.items()):
            rate = summary.by_metric.get(mid)
            minimum(target, "min_pass_rate", mid, rate.pass_rate if rate else None, mrule.min_pass_rate,
                    rate.corrected if rate else None, rate.n_total if rate else 0)
        _max_drops(target, rules, rule, summary, comparison, report)
    return report


def _corrected_status(rate: float, low: float | None, high: float | None, threshold: float) -> RuleStatus:
    """A corrected rate against a minimum: on its delta-method interval when given, else as a point."""
    if low is None or high is None:
        return "breached" if rate < threshold - EPS else "held"
    return "breached" if high < threshold - EPS else ("held" if low >= threshold - EPS else "inconclusive")


def _scored(summary: ModelResult, metric_type: str) -> int:
    """The rows behind a target's positive or negative pass rate: every one is scored whenever the gate's
    decision counts (a run with an unscored row exits 7 whatever its rules say)."""
    return summary.n_positive if metric_type == "positive" else summary.n_negative


def _max_drops(target: str, rules: ThresholdRules, rule: TargetRule, summary: ModelResult,
               comparison: Comparison | None, report: RuleReport) -> None:
    """The max_drop rules of one target: per metric (its own limit or the target's) and pooled."""
    per_metric = {mid: m.max_drop for mid, m in rules.per_metric.items() if m.max_drop is not None}
    if rule.max_drop is None and not per_metric:
        return
    if comparison is None:
        report.rules.append(RuleResult("max_drop", rule.max_drop, target, None, "not evaluated",
                                       why="no baseline comparison; use --evalbench-compare"))
        return
    wanted: dict[str, float] = {}
    if rule.max_drop is not None:
        wanted.update(dict.fromkeys(summary.by_metric, rule.max_drop))
        wanted.update({t.metric_id: rule.max_drop for t in comparison.tests
                       if t.target == target and t.kind != "scores"})
    wanted.update(per_metric)
    for mid, limit in sorted(wanted.items()):
        test = comparison.get(target, mid)
        if test is None:
            why = next((n.why for n in comparison.not_compared if n.target == target and n.metric == mid),
                       "no paired cases")
            report.rules.append(RuleResult("max_drop", limit, target, mid, "not evaluated", why=why))
        else:
            breached = test.significant and test.exceeds(limit)
            report.rules.append(RuleResult("max_drop", limit, target, mid, "breached" if breached else "held",
                                           test.change, test.p_adjusted, test.describe() if breached else None,
                                           detects=test.kind != "scores", detectable=test.detectable))
