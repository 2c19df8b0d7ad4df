"""`DatasetKind`: this kind's implementation of the protocol in `kinds.py` (imported by the
registry there only when a run is of this kind; the package `__init__` imports nothing)."""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from pytest_evalbench.dataset.answers import stored_answer, write_answers
from pytest_evalbench.dataset.explain import EVAL_NAMES
from pytest_evalbench.dataset.loading import (
    DatasetSettings,
    check_answerable,
    check_unique,
    dataset_files,
    dataset_settings,
    load_items,
    policy_of,
)
from pytest_evalbench.dataset.models import DatasetItem, StoredAnswer
from pytest_evalbench.dataset.policy import ScoringPolicy
from pytest_evalbench.dataset.runner import DatasetRecord, decide, run_case
from pytest_evalbench.dataset.store import AGENT_SUMMARY, CASE_RESULTS, write_dataset_results
from pytest_evalbench.dataset.summary import CaseResult, agent_table, as_target_results, summarize_agents
from pytest_evalbench.kinds import BenchmarkKind, JSONRecord, Judged, JudgedRowHook, KindResults, Outcome
from pytest_evalbench.panel import agreement_lines
from pytest_evalbench.provenance import LedgerRows, unit_key
from pytest_evalbench.reliability import judge_name, reliability_lines, unreliable_judges
from pytest_evalbench.run import BenchmarkRun

if TYPE_CHECKING:
    from pytest_evalbench.estimate import Expectations, HasRun, Plan


def _plan_case(kind: HasRun, item: DatasetItem, expect: Expectations) -> Plan:
    """`estimate.plan_case`, imported only for an estimate: a run does not pay for the estimator's modules."""
    from pytest_evalbench.dataset.estimate import plan_case

    return plan_case(kind, item, expect)

CASE_METRIC = "pass_rate"


class DatasetKind:
    """The dataset kind of the protocol in `kinds.py`."""

    roles = ("evaluator_model",)
    judged: ClassVar[Judged] = "evals"
    thresholds_name_targets: ClassVar[bool] = False
    generated_from_metrics: ClassVar[bool] = False
    record_ids: ClassVar[tuple[tuple[str, ...], ...]] = (("case", "case_id"),)
    record_same_ids: ClassVar[tuple[tuple[tuple[str, ...], ...], ...]] = ()

    plan_calls = _plan_case
    """The calls `run_case` would make, planned without making them (`--evalbench-estimate`)."""

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

    def load_cases(self) -> dict[Path, list[DatasetItem]]:
        items = self._load_items()
        check_answerable(items, set(self.run.targets))
        return dict(items)

    def _load_items(self) -> dict[Path, list[DatasetItem]]:
        """Every case of the data files, stored answers applied, and their order. Whether each can be
        answered is `load_cases`' question: writing results (a merge of shards) only needs the order."""
        items: dict[Path, list[DatasetItem]] = {}
        for file in self.data_files():
            items[file] = load_items(file, self.policy, start=sum(len(v) for v in items.values()))
        check_unique(items)
        self._use_stored_answers(items)
        self._order = {item.name: item.index for file_items in items.values() for item in file_items}
        return items

    def _use_stored_answers(self, items: dict[Path, list[DatasetItem]]) -> None:
        """An answer-less case whose agent has no target this run takes a live target's earlier
        answer from answers/<agent>.jsonl (see answers.py), if there is one."""
        found: dict[str, dict[str, tuple[int, StoredAnswer]]] = {}
        for file_items in items.values():
            for position, item in enumerate(file_items):
                case = item.case
                if case.model_answer is None and case.agent_name not in self.run.targets:
                    answer = stored_answer(self.run.output_dir, case, found)
                    if answer is not None:
                        file_items[position] = dataclasses.replace(item, stored=answer)

    def order(self) -> dict[str, int]:
        if not self._order:
            self._load_items()
        return self._order

    async def run_case(self, case: DatasetItem) -> DatasetRecord:
        run = self.run
        return await run_case(case, benchmark=run.spec.name, engine=run.engine, judges=run.judges(),
                              samples=run.spec.judge.samples, target=run.targets.get(case.case.agent_name))

    def record_to_json(self, record: DatasetRecord) -> JSONRecord:
        return record.to_json()

    def record_from_json(self, data: JSONRecord) -> DatasetRecord:
        return DatasetRecord.from_json(data)

    @functools.cached_property
    def unreliable(self) -> dict[str, str]:
        """Eval -> why its judge may not convict the build (calibration.json vs `judge: min_kappa`)."""
        run = self.run
        return unreliable_judges(run.bench_dir, run.spec.judge, list(EVAL_NAMES), judge_name(run.evaluators))

    def unreliable_in(self, case: CaseResult) -> list[str]:
        """The scored evals of a case whose judge is unreliable: its verdict rests on them."""
        return [m.eval for m in case.metrics if m.score is not None and m.eval in self.unreliable]

    def outcome(self, record: DatasetRecord, judged_row: JudgedRowHook | None) -> Outcome:
        """The scoring policy decides the case here, once (`runner.decide`); no hook runs for dataset cases."""
        case = decide(record, self.policy)
        properties: list[tuple[str, object]] = [("evalbench_composite", case.composite)]
        doubtful = self.unreliable_in(case) if case.status == "failed" else []
        if doubtful:
            why = "; ".join(f"{name}: {self.unreliable[name]}" for name in doubtful)
            return Outcome("failed", f"{record.message}\njudge unreliable ({why}): this failure cannot fail "
                           "the build", properties, convicts=False)
        return Outcome(case.status, record.message, properties)

    def write_results(self, records: Iterable[DatasetRecord]) -> KindResults:
        """One pass over the records (they may stream from disk), counting agreement and unreliable
        failures on the way to the store."""
        out = self.run.output_dir
        agreement: list[tuple[str, float | None]] = []
        failures: Counter[str] = Counter()
        answers: dict[str, dict[str, str]] = defaultdict(dict)

        ran: set[str] = set()

        def counted(records: Iterable[DatasetRecord]) -> Iterable[DatasetRecord]:
            for record in records:
                ran.add(record.case.case_id)
                if record.answer is not None:
                    answers[record.case.agent_name][record.case.case_id] = record.answer
                agreement.extend((m.eval, m.agreement) for m in record.case.metrics)
                if record.case.status == "failed":
                    failures.update(self.unreliable_in(record.case))
                yield record

        rows, summary, dropped = write_dataset_results(out, counted(records), self.order(), self.run.stamp,
                                                       self.run.bench_dir)
        answer_files = write_answers(out, answers, self.order(), self.run.bench_dir)
        lines = agreement_lines(agreement)
        # the gate reads the cases this session measured; cases carried over from earlier sessions
        # stay in the result files (and are shown as carried over), but can neither clear nor convict
        measured = {unit_key(r.agent_name, r.case_id) for r in rows if r.case_id in ran}
        gated_rows = [row for row in rows if row.case_id in ran]
        shown = summarize_agents(gated_rows)
        if self.unreliable:
            # a failed case whose verdict rests on an unreliable judge is shown, never counted against the build
            lines += reliability_lines(self.unreliable, dict(failures))
            # every case whose verdict rests on an unreliable judge leaves the gate's numbers
            gated_rows = [row for row in gated_rows if not self.unreliable_in(row)]
        gated = summarize_agents(gated_rows)
        return KindResults(results=[a.to_json() for a in summary], rates=as_target_results(gated),
                           table=agent_table(shown), outcomes=[r.outcome_row(CASE_METRIC) for r in gated_rows],
                           eval_scores=[s for r in gated_rows for s in r.eval_scores()], dropped=dropped,
                           judge_lines=lines, cases=rows, agents=summary, view="cases", unreliable=dict(self.unreliable),
                           files=[out / name for name in (CASE_RESULTS, AGENT_SUMMARY, "cost.json")] + answer_files,
                           measured=measured, sessions=LedgerRows(out))


def _conforms(run: BenchmarkRun) -> BenchmarkKind[DatasetRecord, DatasetItem]:
    """For mypy: the kind is the boundary's protocol with its own case and record types."""
    return DatasetKind(run)
