"""Writing a dataset benchmark's results: merge this session's cases into what is on disk."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from ..store import (
    USAGE_LEDGER,
    count_rows,
    dump_json,
    ledger_totals,
    read_ledger,
    read_valid_rows,
    results_lock,
    update_cost_file,
)
from .summary import AgentSummary, CaseResult, summarize_agents

CASE_RESULTS = "case_results.json"
AGENT_SUMMARY = "agent_summary.json"


def write_dataset_results(bench_dir: Path, records: Iterable[dict[str, Any]], order: dict[str, int]
                          ) -> tuple[list[dict[str, Any]], list[str]]:
    """Under the result lock: case_results.json (file order; cases no longer in the data files are
    dropped), agent_summary.json and cost.json["evaluate"]. Returns the summary and what was dropped."""
    with results_lock(bench_dir):
        old = read_valid_rows(bench_dir / CASE_RESULTS, CaseResult)
        rows = {r["case_id"]: r for r in old if r["case_id"] in order}
        ledger = {k: v for k, v in read_ledger(bench_dir / USAGE_LEDGER).items() if k in order}
        for record in records:
            rows[record["case"]["case_id"]] = record["case"]
            ledger[record["case"]["case_id"]] = record["usage"]
        merged = sorted(rows.values(), key=lambda r: order[r["case_id"]])
        TypeAdapter(list[CaseResult]).validate_python(merged)
        summary = summarize_agents(merged)
        TypeAdapter(list[AgentSummary]).validate_python(summary)
        dump_json(bench_dir / CASE_RESULTS, merged)
        dump_json(bench_dir / AGENT_SUMMARY, summary)
        dump_json(bench_dir / USAGE_LEDGER, dict(sorted(ledger.items())))
        update_cost_file(bench_dir / "cost.json", ledger_totals(ledger))
    stale = sum(1 for r in old if r.get("case_id") not in order)
    return summary, count_rows(stale, f"cases no longer in the data files, from {CASE_RESULTS}")
