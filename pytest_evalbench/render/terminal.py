"""What a run tells people: terminal summary lines and the `last_run.json` status file."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..safe_files import atomic_write_text

if TYPE_CHECKING:  # read only at the end of a run; `write_run_running` runs at its start
    from .summary import RunSummary

LAST_RUN = "last_run.json"
MAX_LISTED = 10


def _where(files: list[tuple[str, str]], bench_dir: Path, base: Path) -> str:
    """One line for every result file: paths under `bench_dir` shown under `base`, others as given."""
    inside, outside = [], []
    for _, path in files:
        p = Path(path)
        try:
            inside.append(p.relative_to(bench_dir).as_posix() + ("/" if p.is_dir() else ""))
        except ValueError:
            outside.append(path)
    parts = ([f"{base}/{{{', '.join(inside)}}}"] if len(inside) > 1 else [f"{base}/{inside[0]}"] if inside else [])
    return "results: " + ", ".join(parts + outside)


def summary_lines(summary: RunSummary, bench_dir: Path, base: Path) -> list[str]:
    """The evalbench section of the terminal summary; its last line is the gate's verdict and why.

    `base` is `bench_dir` as the user should see it (relative to the working directory)."""
    gate = summary.gate
    lines = [f"benchmark {summary.benchmark}: {summary.recorded} item{'s' if summary.recorded != 1 else ''} "
             f"recorded, {summary.failed} failed, {summary.errored} errored"]
    lines += [f"ERROR {e}" for e in summary.errors]
    lines += summary.notes
    lines += [line for line in gate.table if not line.startswith("warning: ")]  # reworded below
    lines += [f"warning: {w}" for w in (summary.scenario.warnings if summary.scenario else [])]
    lines += [f"  per-case: {v}" for v in gate.verdicts]
    lines += [f"  NOT EVALUATED: {n}" for n in gate.notes]
    lines += [f"  THRESHOLD BREACH: {b}" for b in gate.breaches]
    lines += [f"  REGRESSION vs baseline: {r}" for r in gate.regressions]
    lines += [f"  INCOMPLETE: {i}" for i in gate.incomplete]
    if gate.flips:
        lines.append(f"flipped pass->fail since the baseline ({len(gate.flips)}); rerun them with:")
        lines.append("  pytest " + " ".join(f"'{f}'" for f in gate.flips))
    cost = summary.cost
    lines.append(f"llm: {cost.requests} requests, {cost.cache_hits} cache hits, {cost.retries} retries; {cost.note}")
    for key, usage in cost.phases.items():
        lines.append(f"  {key:<18} {usage['input_tokens']:>9} in {usage['output_tokens']:>8} out  ${usage['cost']:.4f}")
    if summary.files:
        lines.append(_where(summary.files, bench_dir, base))
    lines.append(f"gate: {gate.verdict.upper()} (exit {gate.exit_code}): {gate.reason}")
    return lines


def transcript_text(record: dict[str, Any]) -> str:
    """The whole conversation of a record that has one (shown under a failure with `-v`)."""
    transcript = (record.get("conversation") or {}).get("transcript") or []
    if not transcript:
        return ""
    return "full transcript:\n" + "\n".join(f"  {m.get('role', '').upper()}: {m.get('content', '')}" for m in transcript)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def write_run_running(path: Path, benchmark: str, root: Path | None = None) -> None:
    """Written at session start: a run that dies before its end leaves "running" (never through a
    link out of `root`, the benchmark directory)."""
    status = {"benchmark": benchmark, "started_at": _now(), "status": "running"}
    atomic_write_text(path, json.dumps(status, indent=2) + "\n", root or path.parent)


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
    atomic_write_text(path, json.dumps(status, indent=2) + "\n", session.bench_dir)
