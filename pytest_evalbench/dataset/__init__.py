"""Dataset-case benchmarks: JSONL cases judged by Explain evaluators under a scoring policy.

Inside: `models` (one case), `loading` (the `dataset:` block and the JSONL files), `explain`
(the nine evaluators' prompts), `tool_check` (deterministic tool-call check), `policy`
(thresholds, profiles, hard fails), `runner` (one item), `summary` and `store`
(case_results.json, agent_summary.json). May import the shared core; never pytest, never
another kind.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from ..context import BenchmarkRun
from ..kinds import JudgedRowHook, KindResults, Outcome, Record
from .loading import DatasetSettings, check_unique, dataset_files, dataset_settings, load_items, policy_of
from .policy import ScoringPolicy
from .runner import DatasetItem, run_case
from .store import write_dataset_results
from .summary import agent_table, as_target_results


class DatasetKind:
    """The dataset kind of the protocol in `kinds.py`."""

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
        self._order = {item.name: item.index for file_items in items.values() for item in file_items}
        return dict(items)

    def order(self) -> dict[str, int]:
        if not self._order:
            self.load_cases()
        return self._order

    async def run_case(self, case: Any) -> Record:
        run = self.run
        record = await run_case(case, benchmark=run.spec.name, policy=self.policy, engine=run.engine,
                                evaluator=run.require(run.evaluator, "evaluator_model"),
                                target=run.targets.get(case.case.agent_name))
        return record.to_json()

    def outcome(self, record: Record, judged_row: JudgedRowHook) -> Outcome:
        case = record["case"]
        properties = [("evalbench_status", case["status"]), ("evalbench_composite", case["composite"])]
        return Outcome(case["status"], record["message"], properties)

    def write_results(self, records: list[Record]) -> KindResults:
        summary = write_dataset_results(self.run.output_dir, records, self.order())
        return KindResults(results=summary, gate_results=as_target_results(summary), table=agent_table(summary))
