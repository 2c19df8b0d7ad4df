"""Run history: one JSON line per run in `benchmarks/<name>/history.jsonl`, read back for trends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..safe_files import open_append
from .summary import RunSummary

HISTORY = "history.jsonl"
TREND_RUNS = 30
"""The HTML report draws each rate's trend over at most this many recorded runs."""


def history_entry(summary: RunSummary) -> dict[str, Any]:
    """The line one run appends: time, commit, models, per-target/metric rates, cost, gate verdict."""
    return {"time": summary.created, "commit": summary.commit, "benchmark": summary.benchmark,
            "models": summary.models, "rates": summary.rate_table(),
            "cost": {"spent": summary.cost.spent, "total": summary.cost.total},
            "gate": {"verdict": summary.gate.verdict, "exit_code": summary.gate.exit_code}}


def read_history(path: Path, limit: int = TREND_RUNS) -> list[dict[str, Any]]:
    """The last `limit` well-formed entries (a torn or hand-edited line is skipped, not fatal)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    entries = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("rates"), dict):
            entries.append(entry)
    return entries[-limit:]


def append_history(path: Path, summary: RunSummary) -> None:
    """Append this run's line in one write; after a torn last line (a killed writer) start a new line,
    so only the torn entry is lost. The file lives in the benchmark directory and is never a link."""
    line = json.dumps(history_entry(summary), sort_keys=True, ensure_ascii=False) + "\n"
    with open_append(path, path.parent) as fh:
        if fh.tell() > 0:
            fh.seek(-1, 2)
            if fh.read(1) != b"\n":
                line = "\n" + line
        fh.write(line.encode("utf-8"))
