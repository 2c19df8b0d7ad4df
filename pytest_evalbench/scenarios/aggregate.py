"""results.json from scores.json rows: pure functions, no I/O.

Pass rates are row-level means over scored rows (passed not null), split by metric type; a rate
is null when no scored row of that kind exists (distinct from 0.0). `n_positive`/`n_negative`/
`n_total` at the model level count unscored rows too; `by_*` counts only scored rows (as the
original pipeline and the spec's example do). `pass_k` (pass^k, pass@k per metric, see flaky.py)
is there only when a case has more than one sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Union

from pytest_evalbench.correction import CorrectedRate, JudgeAccuracy, StrataCounter
from pytest_evalbench.gate.rows import CorrectedSummary, OutcomeRow
from pytest_evalbench.scenarios.flaky import pass_k
from pytest_evalbench.scenarios.models import ModelResult, RateSummary, ScoreRow

Row = Union[ScoreRow, OutcomeRow]


def _rate(rows: Iterable[Row]) -> float | None:
    scored = [r.passed for r in rows if r.passed is not None]
    if not scored:
        return None
    return round(sum(1 for passed in scored if passed) / len(scored), 4)


def summarize_counts(rows: Iterable[Row], key: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, results.json rate entry as JSON) per value of `key`, sorted: counted in one pass, with
    only two numbers per name kept (by_scenario has one name per scenario)."""
    counts: dict[str, list[int]] = {}
    for row in rows:
        entry = counts.get(getattr(row, key))
        if entry is None:
            entry = counts[getattr(row, key)] = [0, 0]
        if row.passed is not None:
            entry[0] += row.passed
            entry[1] += 1
    for name in sorted(counts):
        n_passed, n_total = counts[name]
        yield name, {"pass_rate": round(n_passed / n_total, 4) if n_total else None,
                     "n_passed": n_passed, "n_total": n_total}


def summarize_by(rows: Iterable[Row], key: str) -> dict[str, RateSummary]:
    return {name: RateSummary(**entry) for name, entry in summarize_counts(rows, key)}


def summarize_model(target_model: str, rows: Sequence[Row], by_scenario: bool = True) -> ModelResult:
    positive = [r for r in rows if r.metric_type == "positive"]
    negative = [r for r in rows if r.metric_type == "negative"]
    return ModelResult(target_model=target_model, positive_pass_rate=_rate(positive),
                       negative_pass_rate=_rate(negative), n_positive=len(positive), n_negative=len(negative),
                       n_total=len(rows), by_metric=summarize_by(rows, "metric_id"),
                       by_scenario=summarize_by(rows, "id") if by_scenario else {},
                       pass_k=(pass_k(rows) or None) if any(r.sample for r in rows) else None)


def aggregate(rows_by_model: Mapping[str, Sequence[Row]], by_scenario: bool = True) -> list[ModelResult]:
    """results.json: one summary per target, sorted by positive_pass_rate descending.

    Null rates sort last; ties break on the target id, so the order never depends on disk order.
    Without `by_scenario` that map is left empty (results.json has it; `store.dump_results`).
    Rows are scores.json rows or their compact pass/fail units (`OutcomeRow`).
    """
    summaries = [summarize_model(model, rows, by_scenario) for model, rows in rows_by_model.items()]
    return sorted(summaries, key=lambda s: (-(s.positive_pass_rate if s.positive_pass_rate is not None
                                              else -1.0), s.target_model))


def _summary(value: CorrectedRate | None) -> CorrectedSummary | None:
    return None if value is None else CorrectedSummary.model_validate(value.to_json())


def correct_results(results: Iterable[ModelResult], rows_by_model: Mapping[str, Sequence[Row]],
                    accuracy: Mapping[str, JudgeAccuracy]) -> None:
    """Set each summary's corrected rates (correction.py) from the rows it was counted
    from: per metric, and over the positive / negative metrics. A rate without judge-decided rows
    has nothing to correct and keeps no corrected entry."""
    counter = StrataCounter()
    for target, rows in rows_by_model.items():
        for row in rows:
            counter.add(target, (row.metric_id, f"({row.metric_type})"), row.metric_id, row.metric_type,
                        row.passed, row.decided_by)
    for result in results:  # set only where there is one: results.json then has the field only there
        target = result.target_model
        if (positive := _summary(counter.corrected(target, "(positive)", accuracy))) is not None:
            result.corrected_positive = positive
        if (negative := _summary(counter.corrected(target, "(negative)", accuracy))) is not None:
            result.corrected_negative = negative
        for mid, rate in result.by_metric.items():
            if (fixed := _summary(counter.corrected(target, mid, accuracy))) is not None:
                rate.corrected = fixed
