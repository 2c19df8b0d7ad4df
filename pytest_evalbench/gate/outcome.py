"""The end-of-session verdict for CI: thresholds, baseline comparison, per-case verdicts, exit code.

`evaluate_gate` is a pure function of in-memory rows and returns one `GateOutcome`, which both
prints the summary and decides the exit status, so the two cannot disagree. Exit codes
(documented in docs/reference/exit-codes.md): 0 ok; 1 case failures (with `gate: cases`; with
num_samples > 1 a case fails by its per-case verdict, not by one failed sample); 6 regression (a threshold breach or a
significant drop against the baseline); 7 incomplete (endpoint errors, unscored judgments, budget
stop, replay misses, app errors). Incomplete wins over regression: numbers from an incomplete run
cannot clear or convict a build. Baseline and HTML file I/O are the two small functions at the end.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_evalbench.errors import InputError
from pytest_evalbench.gate.baseline import Baseline, load_baseline, make_baseline
from pytest_evalbench.gate.paired import CompareRule, Comparison, compare_with_baseline
from pytest_evalbench.gate.rows import EvalScore, ModelResult, OutcomeRow
from pytest_evalbench.gate.rules import RuleResult, check_thresholds
from pytest_evalbench.gate.stats import case_verdict
from pytest_evalbench.kinds import KindResults
from pytest_evalbench.spec_rules import ThresholdRules
from pytest_evalbench.store import atomic_write_text

EXIT_REGRESSION = 6
EXIT_INCOMPLETE = 7


@dataclass
class GateSettings:
    save_baseline: Path | None = None
    compare: Path | None = None
    compare_fail: CompareRule | None = None
    case_pass_rate: float = 0.5
    mode: str = "cases"  # cases | thresholds
    fail_inconclusive: bool = False
    correction: str = "holm"
    alpha: float = 0.05


@dataclass
class GateInputs:
    """Everything the gate reads, in memory (the kind's `KindResults` plus the run's context)."""

    results: list[ModelResult]
    """Per-target rate summaries (min rules, the rates table)."""
    outcomes: list[OutcomeRow] = field(default_factory=list)
    """Pass/fail units paired with the baseline (and grouped into per-case verdicts)."""
    scores: list[EvalScore] = field(default_factory=list)
    """Per-eval numeric score rows (dataset) paired with the baseline."""
    rules: ThresholdRules | None = None
    baseline: Baseline | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    incomplete: list[str] = field(default_factory=list)
    corrected: bool = False
    """`judge: {correct_rates: true}`: min rules read the rates corrected for the judge's errors."""


@dataclass
class CaseVerdict:
    target: str
    case: str
    passed: int
    total: int
    verdict: str

    def line(self) -> str:
        return f"{self.case}[{self.target}] {self.passed}/{self.total} passed -> {self.verdict}"


@dataclass
class GateOutcome:
    breaches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Rules that could not be evaluated (never counted as held)."""
    regressions: list[str] = field(default_factory=list)
    cases: list[CaseVerdict] = field(default_factory=list)
    """Per-case verdicts over samples (num_samples > 1 only)."""
    incomplete: list[str] = field(default_factory=list)
    baseline_files: list[Path] = field(default_factory=list)
    """Baseline files this session wrote (`--evalbench-save-baseline`)."""
    mode: str = "cases"
    fail_inconclusive: bool = False
    comparison: Comparison | None = None
    rules: list[RuleResult] = field(default_factory=list)
    """Every rule the gate read, typed: held, breached or not evaluated (and why), with its numbers."""

    @property
    def verdicts(self) -> list[str]:
        return [c.line() for c in self.cases]

    @property
    def failed_cases(self) -> list[CaseVerdict]:
        bad = ("fail", "inconclusive") if self.fail_inconclusive else ("fail",)
        return [c for c in self.cases if c.verdict in bad]

    def exit_code(self, pytest_status: int) -> int:
        """Combine pytest's own status with the gate; usage/internal errors are left alone."""
        if pytest_status not in (0, 1):
            return pytest_status
        if self.incomplete:
            return EXIT_INCOMPLETE
        if self.breaches or self.regressions:
            return EXIT_REGRESSION
        if self.mode == "thresholds":
            return 0
        if self.cases:  # num_samples > 1: the per-case verdicts decide, not single samples
            return 1 if self.failed_cases else 0
        return pytest_status


def case_verdicts(outcomes: list[OutcomeRow], threshold: float) -> list[CaseVerdict]:
    """For num_samples > 1: per (target, case) the pass count over its scored samples and a
    Wilson-bound verdict; empty when no case has more than one sample."""
    groups: dict[tuple[str, str], list[bool]] = defaultdict(list)
    samples: dict[tuple[str, str], int] = defaultdict(int)
    for row in outcomes:
        key = (row.target, row.id)
        samples[key] += 1
        if row.passed is not None:
            groups[key].append(row.passed)
    if not any(n > 1 for n in samples.values()):
        return []
    out = []
    for (target, case_id) in sorted(samples):
        results = groups.get((target, case_id), [])
        k, n = sum(results), len(results)
        out.append(CaseVerdict(target, case_id, k, n, case_verdict(k, n, threshold)))
    return out


def compare_rule_results(rule: CompareRule, comparison: Comparison) -> list[RuleResult]:
    """The `--evalbench-compare-fail` rule as typed results: one per paired test it could convict
    (breached ones with their numbers), one "held" line for the rest, or "not evaluated"."""
    name = rule.kind if rule.kind != "drop" else f"drop:{rule.min_drop:g}"
    if not comparison.tests:
        return [RuleResult("compare", name, None, None, "not evaluated",
                           why="no paired comparisons with the baseline")]
    out = []
    for test in comparison.tests:
        hit = (test.kind != "pooled" and test.exceeds(0.0)) if rule.kind == "any" else (
            test.significant and test.exceeds(rule.min_drop))
        if hit:
            out.append(RuleResult("compare", name, test.target, test.metric_id, "breached", test.change,
                                  test.p_adjusted))
    if not out:
        worst = min(comparison.tests, key=lambda t: t.change)
        out.append(RuleResult("compare", name, worst.target, worst.metric_id, "held", worst.change,
                              worst.p_adjusted, why=f"largest drop of {len(comparison.tests)} paired test"
                              + ("s" if len(comparison.tests) != 1 else "")))
    for skipped in comparison.not_compared:
        out.append(RuleResult("compare", name, skipped.target, skipped.metric, "not evaluated", why=skipped.why))
    return out


def evaluate_gate(inputs: GateInputs, settings: GateSettings) -> GateOutcome:
    """Everything the CI gate decides, from the rows this session measured (no I/O; rows carried over
    from earlier sessions stay in the result files but never reach the gate: see docs/guides/gating.md)."""
    outcome = GateOutcome(incomplete=list(inputs.incomplete), mode=settings.mode,
                          fail_inconclusive=settings.fail_inconclusive)
    comparison = None
    if inputs.baseline is not None:
        comparison = compare_with_baseline(inputs.baseline, inputs.outcomes, inputs.meta, scores=inputs.scores,
                                           correction=settings.correction, alpha=settings.alpha)
        outcome.comparison = comparison
        if settings.compare_fail is not None:
            outcome.regressions = comparison.fails(settings.compare_fail)
            outcome.rules += compare_rule_results(settings.compare_fail, comparison)
    report = check_thresholds(inputs.results, inputs.rules, comparison, corrected=inputs.corrected)
    outcome.breaches = report.breaches
    outcome.rules += report.rules
    outcome.notes = [r.text() for r in outcome.rules if r.status == "not evaluated"]
    if not inputs.results and inputs.rules is not None and inputs.rules.count():
        # no row of this session reached the gate: none was measured, or every one was judged by a
        # judge its calibration found unreliable (those rows are shown, never gated)
        outcome.notes.append("threshold rules not evaluated (no row this session measured reached the gate: none "
                             "was measured, or each rests on a judge found unreliable)")
    outcome.cases = case_verdicts(inputs.outcomes, settings.case_pass_rate)
    return outcome


# --------------------------------------------------------------------------- files


def read_baseline(path: Path) -> Baseline:
    """A baseline file, validated; InputError names the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(path, "baseline file not found; create it with --evalbench-save-baseline") from None
    except (OSError, ValueError) as exc:
        raise InputError(path, f"baseline file unreadable: {exc}") from None
    try:
        return load_baseline(data)
    except ValueError as exc:
        raise InputError(path, str(exc)) from None


def write_gate_files(settings: GateSettings, inputs: GateInputs, outcome: GateOutcome, written: KindResults,
                     title: str) -> None:
    """The baseline to save and the HTML report (from the kind's scores.json rows and
    conversations), when asked for."""
    if settings.save_baseline is not None:
        baseline = make_baseline(inputs.results, inputs.outcomes, inputs.meta, inputs.scores)
        atomic_write_text(settings.save_baseline, json.dumps(baseline.to_json(), indent=1) + "\n", None)
        outcome.baseline_files.append(settings.save_baseline)
