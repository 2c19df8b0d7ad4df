"""What a run tells people: terminal summary lines and the `last_run.json` status file."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ..llm.cache import atomic_write_text

LAST_RUN = "last_run.json"
MAX_LISTED = 10


def summary_lines(session: Any) -> list[str]:
    """The evalbench section of the terminal summary."""
    lines = [f"benchmark {session.settings.benchmark}: {len(session.records)} rows recorded, "
             f"{len(session.errors)} items errored"]
    missing = session.tally.missing()
    if missing:
        shown = ", ".join(missing[:MAX_LISTED]) + (f" and {len(missing) - MAX_LISTED} more" if len(missing) > MAX_LISTED
                                                   else "")
        lines.append(f"{len(missing)} selected item{'s' if len(missing) > 1 else ''} never reported: {shown}")
    lines += [f"dropped {d}" for d in session.dropped]
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


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def write_run_running(path: Path, benchmark: str) -> None:
    """Written at session start: a run that dies before its end leaves "running"."""
    status = {"benchmark": benchmark, "started_at": _now(), "status": "running"}
    atomic_write_text(path, json.dumps(status, indent=2) + "\n")


def write_run_status(path: Path, session: Any, outcome: Any) -> None:
    """The final record of the session: complete, incomplete (and why, per item), error (the
    finish step failed) or "not run" (no item ran: collection error or nothing selected)."""
    tally = session.tally
    not_scored = tally.unaccounted()
    status = {
        "benchmark": session.settings.benchmark,
        "finished_at": _now(),
        "status": ("error" if session.finish_error else "not run") if outcome is None
        else "incomplete" if outcome.incomplete else "complete",
        "incomplete": outcome.incomplete if outcome is not None else [],
        "errors": dict(sorted(session.errors.items())),
        "selected": len(tally.selected),
        "scored": len([nodeid for nodeid in tally.selected if nodeid not in not_scored]),
        "not_scored": not_scored,
        "rows_recorded": len(session.records),
        "dropped": list(session.dropped),
        "threshold_breaches": outcome.breaches if outcome is not None else [],
        "regressions": outcome.regressions if outcome is not None else [],
        "judge": list(getattr(session, "judge_lines", [])),
        "llm": session.stats.to_json(),
    }
    if session.finish_error:
        status["error"] = session.finish_error
    atomic_write_text(path, json.dumps(status, indent=2) + "\n")
