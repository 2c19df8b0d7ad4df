"""Run history: one JSON line per run in `benchmarks/<name>/history.jsonl`, read back for trends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytest_evalbench.file_version import version_problem, versioned
from pytest_evalbench.render.summary import RunSummary
from pytest_evalbench.store import open_append

HISTORY = "history.jsonl"
TREND_RUNS = 30
"""The HTML report draws each rate's trend over at most this many recorded runs."""


def history_entry(summary: RunSummary) -> dict[str, Any]:
    """The line one run appends: time, commit, models, the per-target/metric rates this session
    measured (none when it is incomplete: its numbers are no trend point; rates carried over from
    earlier sessions never are) with their counts (and the gate's k/n where it differs), whether it
    was complete and a full run, case statuses, cost, the gate's verdict and rules."""
    complete = not summary.gate.outcome.incomplete and summary.gate.exit_code in (0, 1, 6)
    rates: dict[str, dict[str, float | None]] = {}
    for row in summary.rates if complete else []:
        if row.measured:
            rates.setdefault(row.target, {})[row.metric] = None if row.rate is None else round(row.rate, 4)
    counts = {t: {m: c for m, c in metrics.items() if m in rates[t]}
              for t, metrics in summary.count_table().items() if t in rates}
    return {"time": summary.created, "commit": summary.commit, "benchmark": summary.benchmark,
            "models": summary.models, "rates": rates, "complete": complete, "scope": summary.scope,
            "counts": counts, "cases": summary.status_counts(),
            "cost": {"spent": summary.cost.spent, "total": summary.cost.total},
            "gate": {"verdict": summary.gate.verdict, "exit_code": summary.gate.exit_code,
                     "rules": summary.gate.rule_lines}}


def read_history(path: Path, limit: int = TREND_RUNS) -> list[dict[str, Any]]:
    """The last `limit` well-formed entries of full runs, the trend's points (a torn or hand-edited
    line is skipped, not fatal; a selection's rates describe other rows than a full run's, so its
    line is kept in the file but is no trend point; lines written before `scope` existed count)."""
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
        if version_problem(entry) is not None:  # a newer format's line: not read, like a torn one
            continue
        if isinstance(entry, dict) and isinstance(entry.get("rates"), dict) and entry.get("scope", "full") == "full":
            entries.append(entry)
    return entries[-limit:]


def append_history(path: Path, summary: RunSummary) -> None:
    """Append this run's line in one write; after a torn last line (a killed writer) start a new line,
    so only the torn entry is lost. The file lives in the benchmark directory and is never a link."""
    line = json.dumps(versioned(history_entry(summary)), sort_keys=True, ensure_ascii=False) + "\n"
    with open_append(path, path.parent) as fh:
        if fh.tell() > 0:
            fh.seek(-1, 2)
            if fh.read(1) != b"\n":
                line = "\n" + line
        fh.write(line.encode("utf-8"))
