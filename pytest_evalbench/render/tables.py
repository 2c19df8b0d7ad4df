"""Plain-ASCII aligned tables for the terminal: the rates summary and the baseline comparison.

The gate's comparison modules are imported where a table is drawn: the terminal summary imports
this module at collection, and an unrelated run must not load the gate (tests/unit/test_import_cost.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_evalbench.gate.stats import RateEstimate

if TYPE_CHECKING:
    from pytest_evalbench.gate.paired import Comparison
    from pytest_evalbench.gate.rows import ModelResult


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def align(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths).rstrip())
    return lines


def summary_table(results: list[ModelResult]) -> list[str]:
    """Plain-ASCII aligned lines: per target its overall rates, then per metric rate, k/n and
    95% Wilson interval."""
    from pytest_evalbench.gate.baseline import metric_counts

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


def comparison_table(comparison: Comparison, *, warnings: bool = True) -> list[str]:
    """What decided, per paired test: baseline and current on the shared cases, the change, the
    flips, the test, its raw and adjusted p. `!` marks a drop significant after correction."""
    from pytest_evalbench.gate.paired import SCORE_RANGE

    rows: list[list[str]] = [["target", "metric", "test", "n", "baseline", "now", "change", "flips -/+",
                              "p", "p adj", ""]]
    for t in comparison.tests:
        scale = SCORE_RANGE if t.kind == "scores" else 1.0
        rows.append([t.target, t.metric_id, t.method, str(t.n_shared), f"{t.baseline_mean:.3f}",
                     f"{t.current_mean:.3f}", f"{t.change * scale:+.3f}",
                     "-" if t.kind == "scores" else f"{t.b}/{t.c}", f"{t.p_value:.3g}", f"{t.p_adjusted:.3g}",
                     "!" if t.significant else ""])
    name = {"holm": "Holm", "bh": "Benjamini-Hochberg"}.get(comparison.correction, comparison.correction)
    lines = ["baseline comparison (paired on shared cases; one-sided tests for a drop):"]
    lines += align(rows) if comparison.tests else ["  (no paired comparisons)"]
    lines.append(f"! = drop significant at alpha {comparison.alpha:g} after {name} correction over "
                 f"{len(comparison.tests)} test{'s' if len(comparison.tests) != 1 else ''}")
    if any(t.kind == "scores" for t in comparison.tests):
        lines.append("scores: mean change on the 1..5 scale; drop:X and max_drop compare X with that change / 4")
    lines += [f"not compared: {n.metric} not compared ({n.why}) [{n.target}]" for n in comparison.not_compared]
    lines += [f"warning: {w}" for w in comparison.meta_warnings] if warnings else []
    return lines
