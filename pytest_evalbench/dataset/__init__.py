"""Dataset-case benchmarks: JSONL cases judged by Explain evaluators under a scoring policy.

Inside: `models` (one case), `loading` (the `dataset:` block and the JSONL files), `explain`
(the nine evaluators' prompts), `tool_check` (deterministic tool-call check), `policy`
(thresholds, profiles, hard fails), `runner` (one item), `summary` and `store`
(case_results.json, agent_summary.json). May import the shared core; never pytest, never
another kind.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Collection
from pathlib import Path
from typing import Any

from ..calibration.reliability import judge_name, reliability_lines, unreliable_judges
from ..context import BenchmarkRun
from ..kinds import JudgedRowHook, KindResults, Outcome, Record
from ..panel import agreement_lines
from ..store import read_rows
from .explain import EVAL_NAMES
from .loading import DatasetSettings, check_answerable, check_unique, dataset_files, dataset_settings, load_items, policy_of
from .policy import ScoringPolicy
from .runner import DatasetItem, run_case
from .store import AGENT_SUMMARY, CASE_RESULTS, write_dataset_results
from .summary import agent_table, as_target_results, summarize_agents

CASE_METRIC = "pass_rate"


class DatasetKind:
    """The dataset kind of the protocol in `kinds.py`."""

    roles = ("evaluator_model",)

    def __init__(self, run: BenchmarkRun) -> None:
        self.run = run
        self._order: dict[str, int] = {}

    @functools.cached_property
    def settings(self) -> DatasetSettings:
        """The `dataset:` block (validated once per process)."""
        return dataset_settings(self.run.bench_dir, self.run.spec)

    @property
    def policy(self) -> ScoringPolicy:
        return policy_of(self.settings)

    def data_files(self) -> list[Path]:
        return dataset_files(self.run.bench_dir, self.settings)

    def load_cases(self) -> dict[Path, list[Any]]:
        items: dict[Path, list[DatasetItem]] = {}
        for file in self.data_files():
            items[file] = load_items(file, self.policy, start=sum(len(v) for v in items.values()))
        check_unique(items)
        check_answerable(items, set(self.run.targets))
        self._order = {item.name: item.index for file_items in items.values() for item in file_items}
        return dict(items)

    def order(self) -> dict[str, int]:
        if not self._order:
            self.load_cases()
        return self._order

    async def run_case(self, case: Any) -> Record:
        run = self.run
        record = await run_case(case, benchmark=run.spec.name, policy=self.policy, engine=run.engine,
                                judges=run.judges(), samples=run.spec.judge.samples,
                                target=run.targets.get(case.case.agent_name))
        return record.to_json()

    @functools.cached_property
    def unreliable(self) -> dict[str, str]:
        """Eval -> why its judge may not convict the build (calibration.json vs `judge: min_kappa`)."""
        run = self.run
        return unreliable_judges(run.bench_dir, run.spec.judge, list(EVAL_NAMES), judge_name(run.evaluators))

    def unreliable_in(self, case: dict[str, Any]) -> list[str]:
        """The scored evals of a case whose judge is unreliable: its verdict rests on them."""
        return [m["eval"] for m in case["metrics"] if m["score"] is not None and m["eval"] in self.unreliable]

    def outcome(self, record: Record, judged_row: JudgedRowHook) -> Outcome:
        case = record["case"]
        properties = [("evalbench_status", case["status"]), ("evalbench_composite", case["composite"])]
        doubtful = self.unreliable_in(case) if case["status"] == "failed" else []
        if doubtful:
            why = "; ".join(f"{name}: {self.unreliable[name]}" for name in doubtful)
            return Outcome("failed", f"{record['message']}\njudge unreliable ({why}): this failure cannot fail "
                           "the build", properties, convicts=False)
        return Outcome(case["status"], record["message"], properties)

    def write_results(self, records: Collection[Record]) -> KindResults:
        out = self.run.output_dir
        summary, dropped = write_dataset_results(out, records, self.order())
        rows = read_rows(out / CASE_RESULTS)
        lines = agreement_lines([(m["eval"], m.get("agreement")) for r in records for m in r["case"]["metrics"]])
        gated_rows, gated = rows, summary
        if self.unreliable:
            # a failed case whose verdict rests on an unreliable judge is shown, never counted against the build
            failures: Counter[str] = Counter()
            for record in records:
                if record["case"]["status"] == "failed":
                    failures.update(self.unreliable_in(record["case"]))
            lines += reliability_lines(self.unreliable, dict(failures))
            # every case whose verdict rests on an unreliable judge leaves the gate's numbers
            gated_rows = [row for row in rows if not self.unreliable_in(row)]
            gated = summarize_agents(gated_rows)
        return KindResults(results=summary, gate_results=as_target_results(gated), table=agent_table(summary),
                           outcomes=case_outcome_rows(gated_rows), eval_scores=eval_score_rows(gated_rows),
                           dropped=dropped, judge_lines=lines, cases=rows, view="cases",
                           files=[out / name for name in (CASE_RESULTS, AGENT_SUMMARY, "cost.json")])


def case_outcome_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One pass/fail unit per case for the gate: the agent is the target, `pass_rate` the metric."""
    return [{"target_model": r["agent_name"], "id": r["case_id"], "metric_id": CASE_METRIC, "sample": 0,
             "passed": r["passed"]} for r in rows]


def eval_score_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every scored eval of every case, paired with the baseline by agent, case_id and eval."""
    return [{"target_model": r["agent_name"], "id": r["case_id"], "metric_id": m["eval"], "score": m["score"]}
            for r in rows for m in r["metrics"] if m["score"] is not None]
