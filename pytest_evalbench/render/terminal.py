"""What a run tells people: terminal summary lines and the `last_run.json` status file."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from ..llm.cache import atomic_write_text

LAST_RUN = "last_run.json"


def incomplete_reasons(errors: dict[str, str], exitstatus: int) -> list[str]:
    """Why the run's numbers are incomplete: errored items by kind, or an interruption."""
    reasons = [f"{n} item{'s' if n > 1 else ''} {kind}" for kind, n in sorted(Counter(errors.values()).items())]
    if exitstatus == 2:
        reasons.append("session interrupted")
    return reasons


def summary_lines(session: Any) -> list[str]:
    """The evalbench section of the terminal summary."""
    lines = [f"benchmark {session.settings.benchmark}: {len(session.records)} rows recorded, "
             f"{len(session.errors)} items errored"]
    if session.finish_error:
        lines.append(f"ERROR: {session.finish_error}")
    if session.outcome is not None:
        lines += session.outcome.lines()
    lines += getattr(session, "judge_lines", [])
    stats = session.stats
    lines.append(f"llm: {stats.requests} requests, {stats.cache_hits} cache hits, {stats.retries} retries, "
                 f"peak {stats.peak_in_flight} in flight, ${stats.spent:.4f} spent this run")
    for key, usage in sorted(stats.usage.items()):
        lines.append(f"  {key:<18} {usage.input_tokens:>9} in {usage.output_tokens:>8} out  ${usage.cost:.4f}")
    if stats.unpriced:
        lines.append("no price for: " + ", ".join(sorted(stats.unpriced))
                     + " (counted as $0; add `pricing:` to benchmark.yaml)")
    return lines


def write_run_status(path: Path, session: Any, outcome: Any) -> None:
    """A small machine-readable record of the last session: complete or not, and why."""
    status = {
        "benchmark": session.settings.benchmark,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "status": "incomplete" if outcome.incomplete else "complete",
        "incomplete": outcome.incomplete,
        "errors": dict(sorted(session.errors.items())),
        "rows_recorded": len(session.records),
        "threshold_breaches": outcome.breaches,
        "regressions": outcome.regressions,
        "judge": list(getattr(session, "judge_lines", [])),
        "llm": session.stats.to_json(),
    }
    atomic_write_text(path, json.dumps(status, indent=2) + "\n")
