"""Writing the documented result files: merge this session's rows into what is on disk.

A subset run (node id, -k, --lf) replaces only the rows it produced; rows of cases that did not
run stay. Rows are ordered by scenario order, then sample, so `-n 4` and `-n 0` write identical
files. Every file is validated against its model and written atomically.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter

from ..store import USAGE_LEDGER, dump_json, ledger_totals, phase_cost, read_ledger, read_valid_rows
from .aggregate import aggregate
from .models import ConversationRow, ModelResult, ScoreRow, derive_pass

RUNS_DIR = "runs"
PHASES = ("simulate", "evaluate")


@dataclass(frozen=True)
class Known:
    """What rows written by other versions or tools are completed from: the spec's metrics
    (id -> (name, type)) and this benchmark's scenario rows (id -> row)."""

    metrics: dict[str, tuple[str, str]] = field(default_factory=dict)
    scenarios: dict[str, dict[str, Any]] = field(default_factory=dict)


Normaliser = Callable[[dict[str, Any], str, Known], dict[str, Any]]


def _common(row: dict[str, Any], target_id: str) -> dict[str, Any]:
    """Spellings every writer of these files used: impactbench's `_sample`, no `conv_id`."""
    out = {k: v for k, v in row.items() if not k.startswith("_")}
    if "sample" not in out and isinstance(row.get("_sample"), int):
        out["sample"] = row["_sample"]
    out.setdefault("sample", 0)
    target = out.get("target_model") or (out.get("target") or {}).get("id") or target_id
    out.setdefault("conv_id", f"{out.get('id')}__{target}")
    return out


def normalise_conversation(row: dict[str, Any], target_id: str, known: Known) -> dict[str, Any]:
    """A conversations.json row in this version's shape: scenario fields from scenarios.json,
    `target` from impactbench's `target_model`."""
    out = {**known.scenarios.get(str(row.get("id")), {}), **_common(row, target_id)}
    if "target" not in out:
        out["target"] = {"id": out.pop("target_model", None) or target_id, "model": None}
    out.pop("target_model", None)
    out["persona"] = out.pop("user_persona", None) or out.get("persona")  # as Scenario.effective_persona
    return out


def normalise_score(row: dict[str, Any], target_id: str, known: Known) -> dict[str, Any]:
    """A scores.json row in this version's shape: metric name/type from benchmark.yaml, `score`
    and a missing `passed` derived from `present` (impactbench dropped `score`)."""
    out = _common(row, target_id)
    out.setdefault("target_model", target_id)
    name, mtype = known.metrics.get(str(out.get("metric_id")), (None, None))
    if name is not None:
        out.setdefault("metric_name", name)
        out.setdefault("metric_type", mtype)
    if "present" in out and "metric_type" in out and ("score" not in out or "passed" not in out):
        passed, score = derive_pass(out["present"], str(out["metric_type"]))
        out.setdefault("passed", passed)
        out.setdefault("score", score)
    return out


def _validated(model: type[BaseModel], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    TypeAdapter(list[model]).validate_python(rows)  # type: ignore[valid-type]
    return rows


def row_key(row: dict[str, Any]) -> tuple[str, int]:
    return str(row.get("id")), int(row.get("sample") or 0)


def merge_rows(existing: list[dict[str, Any]], new: list[dict[str, Any]], order: dict[str, int],
               ) -> list[dict[str, Any]]:
    """New rows replace old ones with the same (id, sample); rows of unknown scenarios are dropped."""
    merged = {row_key(r): r for r in existing if r.get("id") in order}
    merged.update({row_key(r): r for r in new})
    return sorted(merged.values(), key=lambda r: (order.get(r["id"], len(order)), int(r.get("sample") or 0)))


def write_target_run(run_dir: Path, records: list[dict[str, Any]], order: dict[str, int],
                     known: Known = Known()) -> None:
    """Merge one target's records into its conversations.json, scores.json and cost.json."""
    conversations = [r["conversation"] for r in records if r.get("conversation")]
    scores = [r["score"] for r in records if r.get("score")]
    conv_rows = merge_rows(read_file_rows(run_dir, "conversations.json", known), conversations, order)
    score_rows = merge_rows(read_file_rows(run_dir, "scores.json", known), scores, order)

    ledger_path = run_dir / USAGE_LEDGER
    ledger = read_ledger(ledger_path)
    for record in records:
        if record.get("conversation"):
            conv = record["conversation"]
            ledger[f"{conv['id']}|{conv['sample']}"] = record["usage"]
    live = {f"{r['id']}|{r['sample']}" for r in conv_rows}
    ledger = {k: v for k, v in sorted(ledger.items()) if k in live}
    totals = ledger_totals(ledger)
    cost = {phase: phase_cost(phase, totals[phase]) for phase in PHASES}

    dump_json(run_dir / "conversations.json", _validated(ConversationRow, conv_rows))
    dump_json(run_dir / "scores.json", _validated(ScoreRow, score_rows))
    dump_json(ledger_path, ledger)
    dump_json(run_dir / "cost.json", cost)


READERS: dict[str, tuple[type[BaseModel], Normaliser]] = {
    "conversations.json": (ConversationRow, normalise_conversation),
    "scores.json": (ScoreRow, normalise_score),
}


def read_file_rows(run_dir: Path, filename: str, known: Known = Known()) -> list[dict[str, Any]]:
    """The usable rows of one target's conversations.json or scores.json, whoever wrote them."""
    model, normalise = READERS[filename]
    return read_valid_rows(run_dir / filename, model, lambda row: normalise(row, run_dir.name, known))


_known_by_dir: dict[Path, Known] = {}
"""The last `Known` written with per benchmark directory, so later readers of the same files in this
process (the gate, the HTML report) complete foreign rows the same way."""


def read_run_rows(bench_dir: Path, filename: str, known: Known | None = None) -> dict[str, list[dict[str, Any]]]:
    """The usable rows of `runs/<target>/<filename>` for every target that has that file, by target id."""
    known = known or _known_by_dir.get(bench_dir, Known())
    runs = bench_dir / RUNS_DIR
    if not runs.is_dir():
        return {}
    return {run_dir.name: read_file_rows(run_dir, filename, known)
            for run_dir in sorted(runs.iterdir()) if (run_dir / filename).is_file()}


def write_results(bench_dir: Path, records: Iterable[dict[str, Any]], order: dict[str, int],
                  known: Known = Known()) -> list[dict[str, Any]]:
    """Write every touched target's run files, then results.json over all runs on disk."""
    _known_by_dir[bench_dir] = known
    by_target: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        by_target[record["target_id"]].append(record)
    runs = bench_dir / RUNS_DIR
    for target_id in sorted(by_target):
        write_target_run(runs / target_id, by_target[target_id], order, known)
    rows_by_model = read_run_rows(bench_dir, "scores.json", known)
    for target_id, rows in rows_by_model.items():
        for row in rows:
            row.setdefault("target_model", target_id)
    results = aggregate(rows_by_model)
    if rows_by_model:
        dump_json(bench_dir / "results.json", _validated(ModelResult, results))
    return results
