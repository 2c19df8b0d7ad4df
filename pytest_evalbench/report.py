"""Terminal summary lines: pure rendering of what the session gathered."""

from __future__ import annotations

from collections import Counter
from typing import Any


def _rate(value: float | None) -> str:
    return "  -  " if value is None else f"{value:.3f}"


def summary_lines(session: Any) -> list[str]:
    """Per-target pass rates of this session's rows, outcome counts and LLM traffic."""
    records = list(session.records.values())
    if not records and not session.errors:
        return []
    lines = [f"evalbench: {session.settings.benchmark}"]
    by_target: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        if record.get("score"):
            by_target.setdefault(record["target_id"], []).append(record["score"])
    for target, rows in sorted(by_target.items()):
        stats = {}
        for kind in ("positive", "negative"):
            scored = [r for r in rows if r["metric_type"] == kind and r["passed"] is not None]
            stats[kind] = (sum(r["passed"] for r in scored) / len(scored)) if scored else None
        unscored = sum(1 for r in rows if r["passed"] is None)
        lines.append(f"  {target:<24} positive {_rate(stats['positive'])}  negative {_rate(stats['negative'])}"
                     f"  rows {len(rows)}" + (f"  unscored {unscored}" if unscored else ""))
    outcomes = Counter(session.errors.values())
    if outcomes:
        lines.append("  incomplete: " + ", ".join(f"{n} {kind}" for kind, n in sorted(outcomes.items())))
    stats = session.stats
    lines.append(f"  llm: {stats.requests} requests, {stats.cache_hits} cache hits, {stats.retries} retries, "
                 f"${stats.spent:.4f} spent this run")
    run = session._run
    if run is not None and run.engine.prices.unpriced:
        lines.append("  no price for: " + ", ".join(sorted(run.engine.prices.unpriced))
                     + " (counted as $0; add `pricing:` to benchmark.yaml)")
    return lines
