"""Which metrics' judges may not convict the build: `judge: {min_kappa, require_calibration}`
against the calibration.json that `--evalbench-calibrate` wrote.

A metric (scenario benchmarks) or Explain eval (dataset benchmarks) is "judge unreliable" when its
calibration entry's kappa is undefined or below `min_kappa`, when it was calibrated for another
judge, or (with `require_calibration: true`) when it has no entry. Its failures are still shown,
but as xfailed items and outside the gate's numbers, with the reason in the summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_evalbench.correction import JudgeAccuracy
from pytest_evalbench.store import read_rows

RESULT_FILE = "calibration.json"
"""What `--evalbench-calibrate` writes beside benchmark.yaml (calibration/) and later runs read here."""


def judge_name(judges: list[Any]) -> str:
    """The calibrated judge: one model, or a panel's models joined by '+'."""
    return "+".join(j.model for j in judges)


def unreliable_judges(bench_dir: Path, judge_config: Any, keys: list[str], judge: str) -> dict[str, str]:
    """Metric id / eval name -> why its judge is unreliable (empty without `min_kappa`)."""
    minimum = judge_config.min_kappa
    if minimum is None:
        return {}
    entries = {str(e.get("metric_id") or e.get("eval")): e for e in read_rows(bench_dir / RESULT_FILE)}
    out: dict[str, str] = {}
    for key in keys:
        entry = entries.get(key)
        if entry is None:
            if judge_config.require_calibration:
                out[key] = f"never calibrated (require_calibration; run --evalbench-calibrate with {RESULT_FILE})"
            continue
        if entry.get("judge") != judge:
            if judge_config.require_calibration:
                out[key] = f"calibrated for another judge ({entry.get('judge')}, not {judge})"
            continue
        value = entry.get("kappa")
        if value is None or value < minimum:
            shown = "undefined" if value is None else f"{value:.2f}"
            out[key] = f"kappa {shown} < min_kappa {minimum:.2f} (n={entry.get('n')}, {RESULT_FILE})"
    return out


def reliability_lines(unreliable: dict[str, str], failures: dict[str, int]) -> list[str]:
    """Summary lines: each unreliable judge, why, and what happened to its failures."""
    def count(key: str) -> str:
        n = failures.get(key, 0)
        return f"{n} failure is" if n == 1 else f"{n} failures are"

    return [f"judge unreliable for {key}: {why}; its judge-decided rows are outside the gate, its "
            f"{count(key)} reported as xfailed and cannot fail the build" for key, why in sorted(unreliable.items())]


def judged_unreliably(unreliable: dict[str, str], metric_id: str, decided_by: str | None) -> bool:
    """A scenario row's verdict came from a judge calibration found unreliable (a check is always trusted)."""
    return metric_id in unreliable and decided_by != "check"


def judge_accuracy(bench_dir: Path, judge: str) -> dict[str, JudgeAccuracy]:
    """Metric id -> the judge's sensitivity and specificity counts from calibration.json, for entries
    calibrated for this judge (an entry for another judge says nothing about this one)."""
    out: dict[str, JudgeAccuracy] = {}
    for entry in read_rows(bench_dir / RESULT_FILE):
        if entry.get("metric_id") and entry.get("judge") == judge and isinstance(entry.get("confusion"), dict):
            out[str(entry["metric_id"])] = JudgeAccuracy.from_confusion(entry["confusion"])
    return out
