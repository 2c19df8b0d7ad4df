"""Writing a dataset benchmark's results: merge this session's cases into what is on disk."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from ..llm.types import Usage
from ..models import PhaseCost
from ..store import USAGE_LEDGER, dump_json, read_json
from .report import AgentSummary, CaseResult, summarize_agents

CASE_RESULTS = "case_results.json"
AGENT_SUMMARY = "agent_summary.json"


def write_dataset_results(bench_dir: Path, records: list[dict[str, Any]], order: dict[str, int]
                          ) -> list[dict[str, Any]]:
    """case_results.json (file order), agent_summary.json and cost.json["evaluate"]; returns the summary."""
    rows = {r["case_id"]: r for r in read_json(bench_dir / CASE_RESULTS, []) if r.get("case_id") in order}
    ledger = {k: v for k, v in read_json(bench_dir / USAGE_LEDGER, {}).items() if k in order}
    for record in records:
        rows[record["case"]["case_id"]] = record["case"]
        ledger[record["case"]["case_id"]] = record["usage"]
    merged = sorted(rows.values(), key=lambda r: order[r["case_id"]])
    TypeAdapter(list[CaseResult]).validate_python(merged)
    summary = summarize_agents(merged)
    TypeAdapter(list[AgentSummary]).validate_python(summary)
    total: dict[str, Usage] = defaultdict(Usage)
    for usage in ledger.values():
        for phase, value in usage.items():
            total[phase].add(Usage.from_json(value))
    cost = read_json(bench_dir / "cost.json", {})
    cost = cost if isinstance(cost, dict) else {}
    for phase, usage in total.items():
        cost[phase] = PhaseCost(phase=phase, cost=round(usage.cost, 6), input_tokens=usage.input_tokens,
                                output_tokens=usage.output_tokens).model_dump()
    dump_json(bench_dir / CASE_RESULTS, merged)
    dump_json(bench_dir / AGENT_SUMMARY, summary)
    dump_json(bench_dir / USAGE_LEDGER, dict(sorted(ledger.items())))
    dump_json(bench_dir / "cost.json", cost)
    return summary
