"""Baseline files: this run's per-unit outcomes and scores saved for later runs, and their validation.

Pure functions over in-memory rows; no I/O, no pytest. The gate reads two kinds of rows:

* outcome rows (`rows.OutcomeRow`: target, id, metric_id, sample, passed; passed None =
  unscored): one pass/fail unit each, keyed `<target>|<id>|<metric_id>|<sample>`;
* score rows (`rows.EvalScore`): numeric per-eval scores of dataset cases on a 1..5 scale,
  keyed `<target>|<id>|<metric_id>`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from pytest_evalbench.gate.rows import EvalScore, ModelResult, OutcomeRow

BASELINE_SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)


# --------------------------------------------------------------------------- rows and keys


def case_outcomes(rows: Iterable[OutcomeRow]) -> dict[str, bool]:
    """Pass/fail per scored unit (`OutcomeRow.key`); unscored rows have no outcome."""
    return {r.key: r.passed for r in rows if r.passed is not None}


def case_scores(rows: Iterable[EvalScore]) -> dict[str, float]:
    """Numeric score per scored (target, case, eval) (`EvalScore.key`)."""
    return {r.key: r.score for r in rows}


@dataclass
class MetricCount:
    """One target x metric: scored rows, passes and the rate, with the metric's label."""

    n_passed: int
    n_total: int
    pass_rate: float | None = None
    metric_name: str | None = None
    metric_type: str | None = None


def metric_counts(results: list[ModelResult], outcomes: list[OutcomeRow]) -> dict[str, dict[str, MetricCount]]:
    """{target: {metric_id: counts}}: from the scored outcome rows, falling back to the
    results.json `by_metric` of targets without rows."""
    out: dict[str, dict[str, MetricCount]] = {}
    labels: dict[str, tuple[str | None, str | None]] = {}
    from_rows: dict[str, dict[str, list[int]]] = {}
    for row in outcomes:
        labels.setdefault(row.metric_id, (row.metric_name, row.metric_type))
        if row.passed is not None:
            counts = from_rows.setdefault(row.target, {}).setdefault(row.metric_id, [0, 0])
            counts[0] += row.passed
            counts[1] += 1
    for target, metrics in from_rows.items():
        for mid, (k, n) in metrics.items():
            out.setdefault(target, {})[mid] = MetricCount(k, n)
    for summary in results:
        if summary.target_model in from_rows:
            continue
        for mid, rate in summary.by_metric.items():
            out.setdefault(summary.target_model, {})[mid] = MetricCount(rate.n_passed, rate.n_total)
    for entries in out.values():
        for mid, entry in entries.items():
            entry.pass_rate = round(entry.n_passed / entry.n_total, 4) if entry.n_total else None
            entry.metric_name, entry.metric_type = labels.get(mid, (None, None))
    return out


# --------------------------------------------------------------------------- baseline files


@dataclass(frozen=True)
class Baseline:
    """A baseline in memory: the run's metadata, per-target rates (for people reading the file) and
    the paired units a later run is compared with, case by case."""

    meta: dict[str, Any]
    targets: dict[str, Any]
    """Per target: its rates and per-metric counts; informative only, never compared."""
    cases: dict[str, bool]
    """`OutcomeRow.key` -> passed, for every scored pass/fail unit."""
    scores: dict[str, float]
    """`EvalScore.key` -> score (1..5), for every scored eval of a dataset case."""
    schema_version: int = BASELINE_SCHEMA_VERSION

    def to_json(self) -> dict[str, Any]:
        """The baseline file's content (`--evalbench-save-baseline`)."""
        return {"schema_version": self.schema_version, "meta": self.meta, "targets": self.targets,
                "cases": self.cases, "scores": self.scores}


def make_baseline(results: list[ModelResult], outcomes: list[OutcomeRow], meta: dict[str, Any],
                  scores: list[EvalScore] | None = None) -> Baseline:
    """This run as a baseline: per target its rates plus the per-case outcome of every scored unit
    and every per-eval score, so a later run can be compared case by case (paired)."""
    counts = metric_counts(results, outcomes)
    rates = {s.target_model: s for s in results}
    targets = {}
    for target in sorted(set(counts) | set(rates)):
        summary = rates.get(target)
        targets[target] = {"positive_pass_rate": summary.positive_pass_rate if summary else None,
                           "negative_pass_rate": summary.negative_pass_rate if summary else None,
                           "metrics": {mid: asdict(c) for mid, c in sorted(counts.get(target, {}).items())}}
    return Baseline(dict(meta), targets, dict(sorted(case_outcomes(outcomes).items())),
                    dict(sorted(case_scores(scores or []).items())))


def load_baseline(data: Any) -> Baseline:
    """Validate a parsed baseline file (versions 1 and 2; version 1 has no `scores`); ValueError
    says what is wrong (the caller adds the file name)."""
    if not isinstance(data, dict) or "schema_version" not in data:
        raise ValueError("not an evalbench baseline file (no schema_version)")
    if data["schema_version"] not in READABLE_VERSIONS:
        raise ValueError(f"baseline schema_version {data['schema_version']!r} is not supported "
                         f"(this version reads {', '.join(map(str, READABLE_VERSIONS))}); re-create the baseline "
                         "with --evalbench-save-baseline")
    for key in ("meta", "targets", "cases"):
        if not isinstance(data.get(key), dict):
            raise ValueError(f"baseline file: {key!r} missing or not an object")
    if not isinstance(data.get("scores", {}), dict):
        raise ValueError("baseline file: 'scores' is not an object")
    bad = [k for k, v in data["cases"].items() if len(k.split("|")) != 4 or not isinstance(v, bool)]
    if bad:
        raise ValueError(f"baseline file: case {bad[0]!r} is not '<target>|<id>|<metric>|<sample>': true/false")
    scores = data.get("scores", {})
    bad = [k for k, v in scores.items()
           if len(k.split("|")) != 3 or isinstance(v, bool) or not isinstance(v, (int, float))]
    if bad:
        raise ValueError(f"baseline file: score {bad[0]!r} is not '<target>|<id>|<eval>': <number>")
    return Baseline(data["meta"], data["targets"], data["cases"], {k: float(v) for k, v in scores.items()},
                    data["schema_version"])
