"""The end-of-session verdict for CI: thresholds, baseline comparison, per-case verdicts, exit code.

Runs on the controller after the result files are written. Exit codes (documented in README):
0 ok; 1 case failures (with `gate: cases`); 6 regression (a threshold breach or a meaningful
drop against the baseline); 7 incomplete (endpoint errors, unscored judgments, budget stop,
replay misses, app errors). Incomplete wins over regression: numbers from an incomplete run
cannot clear or convict a build.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..llm.cache import atomic_write_text
from ..loading import validate_as
from ..scenarios.store import read_run_rows
from .compare import (
    CompareRule,
    Comparison,
    ThresholdRules,
    check_thresholds_report,
    compare_with_baseline,
    load_baseline,
    make_baseline,
    summary_table,
)
from .stats import case_verdict

EXIT_REGRESSION = 6
EXIT_INCOMPLETE = 7


@dataclass
class GateSettings:
    save_baseline: Path | None = None
    compare: Path | None = None
    compare_fail: CompareRule | None = None
    case_pass_rate: float = 0.5
    mode: str = "cases"  # cases | thresholds


@dataclass
class GateOutcome:
    table: list[str] = field(default_factory=list)
    breaches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)
    flips: list[str] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    mode: str = "cases"
    rules: int = 0
    comparison: Comparison | None = None
    """The baseline comparison behind `flips`/`regressions` (read by render/ for reports)."""

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
        return pytest_status

    def lines(self) -> list[str]:
        out = list(self.table)
        out += [f"  per-case: {v}" for v in self.verdicts]
        out += [f"  flipped pass->fail since baseline: {f}" for f in self.flips]
        out += [f"  no data: {n}" for n in self.notes]
        out += [f"  THRESHOLD BREACH: {b}" for b in self.breaches]
        out += [f"  REGRESSION vs baseline: {r}" for r in self.regressions]
        out += [f"  INCOMPLETE: {i}" for i in self.incomplete]
        out += [f"  wrote {w}" for w in self.written]
        if self.incomplete:
            out.append("gate: INCOMPLETE run (exit 7): the numbers above cannot pass or fail the build")
        elif self.breaches or self.regressions:
            out.append("gate: REGRESSION (exit 6)")
        elif self.mode == "thresholds":
            held = (f"{self.rules} threshold/baseline rule{'s' if self.rules != 1 else ''} held" if self.rules
                    else "no threshold rules configured")
            out.append(f"gate: passed ({held}; case failures are reported, not gating)")
        return out


def run_rows(bench_dir: Path, filename: str) -> list[dict[str, Any]]:
    """The rows of one result file over every target's run directory."""
    return [row for rows in read_run_rows(bench_dir, filename).values() for row in rows]


def case_verdicts(scores: list[dict[str, Any]], threshold: float) -> list[str]:
    """For num_samples > 1: pass rate over samples per case and a Wilson-bound verdict."""
    groups: dict[tuple[str, str], list[bool]] = defaultdict(list)
    for row in scores:
        if row.get("passed") is not None:
            groups[(row["target_model"], row["id"])].append(bool(row["passed"]))
    lines = []
    for (target, case_id), outcomes in sorted(groups.items()):
        if len(outcomes) > 1:
            k, n = sum(outcomes), len(outcomes)
            lines.append(f"{case_id}[{target}] {k}/{n} passed -> {case_verdict(k, n, threshold)}")
    return lines


def count_rules(rules: ThresholdRules) -> int:
    """How many threshold values are set (for the summary line)."""
    data = rules.model_dump(exclude_none=True)
    nested = [v for group in ("per_target", "per_metric") for entry in data.pop(group, {}).values() for v in entry.values()]
    return len(data) + len(nested)


def evaluate_gate(bench_dir: Path, thresholds: dict[str, Any] | None, results: list[dict[str, Any]],
                  settings: GateSettings, meta: dict[str, Any], incomplete: list[str]) -> GateOutcome:
    """Everything the CI gate decides, from the files on disk after this session's merge."""
    outcome = GateOutcome(incomplete=list(incomplete), mode=settings.mode)
    scores = run_rows(bench_dir, "scores.json")
    rules: ThresholdRules = validate_as(ThresholdRules, thresholds or {}, bench_dir / "benchmark.yaml",
                                        row="thresholds")
    comparison: Comparison | None = None
    baseline: dict[str, Any] | None = None
    if settings.compare is not None:
        try:
            baseline = load_baseline(json.loads(settings.compare.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise InputError(settings.compare, "baseline file not found; create it with "
                             "--evalbench-save-baseline") from None
        except ValueError as exc:
            raise InputError(settings.compare, str(exc)) from None
        comparison = compare_with_baseline(baseline, results, scores, meta)
        outcome.comparison = comparison
        for entry in comparison.entries:
            if entry.paired is not None and entry.paired.pass_to_fail:
                flipped = ", ".join(k.split("|", 1)[1] for k in entry.paired.pass_to_fail)
                outcome.flips.append(f"{entry.target} {entry.metric_id}: {flipped}")
        if settings.compare_fail is not None:
            outcome.regressions = comparison.fails(settings.compare_fail)
    report = check_thresholds_report(results, rules, baseline)
    outcome.breaches = [b.message for b in report.breaches]
    outcome.rules = count_rules(rules) + (1 if settings.compare_fail is not None else 0)
    outcome.notes = [n.message for n in report.notes]
    outcome.table = summary_table(results, comparison) if results else []
    outcome.verdicts = case_verdicts(scores, settings.case_pass_rate)
    if settings.save_baseline is not None:
        atomic_write_text(settings.save_baseline, json.dumps(make_baseline(results, scores, meta), indent=1) + "\n")
        outcome.written.append(f"baseline {settings.save_baseline}")
    return outcome
