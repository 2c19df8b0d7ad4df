"""results.json from scores.json rows: pure functions, no I/O.

Pass rates are row-level means over scored rows (passed not null), split by metric type; a rate
is null when no scored row of that kind exists (distinct from 0.0). `n_positive`/`n_negative`/
`n_total` at the model level count unscored rows too; `by_*` counts only scored rows (as the
original pipeline and the spec's example do).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from .models import ModelResult, RateSummary, ScoreRow


def _rate(rows: list[ScoreRow]) -> float | None:
    scored = [r for r in rows if r.passed is not None]
    if not scored:
        return None
    return round(sum(1 for r in scored if r.passed) / len(scored), 4)


def summarize_by(rows: Iterable[ScoreRow], key: str) -> dict[str, RateSummary]:
    groups: dict[str, list[ScoreRow]] = defaultdict(list)
    for row in rows:
        groups[getattr(row, key)].append(row)
    out: dict[str, RateSummary] = {}
    for name in sorted(groups):
        scored = [r for r in groups[name] if r.passed is not None]
        n_passed = sum(1 for r in scored if r.passed)
        out[name] = RateSummary(pass_rate=round(n_passed / len(scored), 4) if scored else None,
                                n_passed=n_passed, n_total=len(scored))
    return out


def summarize_model(target_model: str, rows: list[ScoreRow]) -> ModelResult:
    positive = [r for r in rows if r.metric_type == "positive"]
    negative = [r for r in rows if r.metric_type == "negative"]
    return ModelResult(target_model=target_model, positive_pass_rate=_rate(positive),
                       negative_pass_rate=_rate(negative), n_positive=len(positive), n_negative=len(negative),
                       n_total=len(rows), by_metric=summarize_by(rows, "metric_id"),
                       by_scenario=summarize_by(rows, "id"))


def aggregate(rows_by_model: dict[str, list[ScoreRow]]) -> list[ModelResult]:
    """results.json: one summary per target, sorted by positive_pass_rate descending.

    Null rates sort last; ties break on the target id, so the order never depends on disk order.
    """
    summaries = [summarize_model(model, rows) for model, rows in rows_by_model.items()]
    return sorted(summaries, key=lambda s: (-(s.positive_pass_rate if s.positive_pass_rate is not None
                                              else -1.0), s.target_model))
