"""Writing a dataset benchmark's results: merge this session's cases into what is on disk."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pydantic import TypeAdapter

from pytest_evalbench.costs import USAGE_LEDGER, ledger_totals, read_ledger, update_cost_file
from pytest_evalbench.dataset.runner import DatasetRecord
from pytest_evalbench.dataset.summary import AgentSummary, CaseResult, summarize_agents
from pytest_evalbench.file_version import versioned
from pytest_evalbench.provenance import SessionStamp, unit_key, update_sessions
from pytest_evalbench.store import count_rows, dump_json, read_valid_rows, results_lock

CASE_RESULTS = "case_results.json"
AGENT_SUMMARY = "agent_summary.json"


def write_dataset_results(bench_dir: Path, records: Iterable[DatasetRecord], order: dict[str, int],
                          stamp: SessionStamp | None = None, root: Path | None = None,
                          ) -> tuple[list[CaseResult], list[AgentSummary], list[str]]:
    """Under the result lock: case_results.json (file order; cases no longer in the data files are
    dropped), agent_summary.json and cost.json["evaluate"]. `records` is read once; `stamp` is
    recorded for their rows in `.sessions.json`. Returns every case on disk, the summary and what
    was dropped. No write leaves `root` (default `bench_dir`)."""
    root = root or bench_dir
    with results_lock(bench_dir, root=root):
        old = read_valid_rows(bench_dir / CASE_RESULTS, CaseResult)
        rows = {r["case_id"]: r for r in old if r["case_id"] in order}
        ledger = {k: v for k, v in read_ledger(bench_dir / USAGE_LEDGER).items() if k in order}
        measured: set[str] = set()
        for record in records:
            measured.add(record.case.case_id)
            rows[record.case.case_id] = record.case.to_json()
            ledger[record.case.case_id] = {k: v.to_json() for k, v in record.usage.items()}
        merged = sorted(rows.values(), key=lambda r: order[r["case_id"]])
        cases = TypeAdapter(list[CaseResult]).validate_python(merged)
        summary = summarize_agents(cases)
        dump_json(bench_dir / CASE_RESULTS, [versioned(r) for r in merged], root)
        dump_json(bench_dir / AGENT_SUMMARY, [versioned(a.to_json()) for a in summary], root)
        dump_json(bench_dir / USAGE_LEDGER, versioned(dict(sorted(ledger.items()))), root)
        update_cost_file(bench_dir / "cost.json", ledger_totals(ledger), root)
        update_sessions(bench_dir, [unit_key(r.agent_name, r.case_id) for r in cases if r.case_id in measured],
                        {unit_key(r.agent_name, r.case_id) for r in cases}, stamp, root)
    stale = sum(1 for r in old if r.get("case_id") not in order)
    return cases, summary, count_rows(stale, f"cases no longer in the data files, from {CASE_RESULTS}")
