"""`CalibrationKind`: this kind's implementation of the protocol in `kinds/protocol.py` (imported by the
registry there only when a run is of this kind; the package `__init__` imports nothing)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from pytest_evalbench.base.errors import ConfigError
from pytest_evalbench.base.files import dump_json, versioned
from pytest_evalbench.formats.stats import agreement_entry
from pytest_evalbench.kinds.calibration.models import (
    CALIBRATION_FILE,
    CalibrationCase,
    CalibrationEntry,
    CalibrationRecord,
    MetricLabel,
    load_labels,
)
from pytest_evalbench.kinds.dataset.explain import EVAL_NAMES
from pytest_evalbench.kinds.dataset.runner import run_eval
from pytest_evalbench.kinds.estimate import Expectations, Plan
from pytest_evalbench.kinds.judges import RESULT_FILE, judge_name, majority, poll
from pytest_evalbench.kinds.protocol import (
    BenchmarkKind,
    JSONRecord,
    Judged,
    JudgedRowHook,
    KindResults,
    Outcome,
    Status,
    spec_kind,
)
from pytest_evalbench.kinds.run import BenchmarkRun
from pytest_evalbench.kinds.scenarios.judge import judge
from pytest_evalbench.llm.types import Endpoint, Usage

__all__ = ["CalibrationKind"]


class CalibrationKind:
    """The calibration kind of the protocol in `kinds/protocol.py`."""

    roles = ("evaluator_model",)

    def __init__(self, run: BenchmarkRun) -> None:
        self.run = run
        self._order: dict[str, int] = {}

    def data_files(self) -> list[Path]:
        return [self.run.bench_dir / CALIBRATION_FILE]

    def load_cases(self) -> dict[Path, list[CalibrationCase]]:
        path = self.data_files()[0]
        cases = load_labels(path, self.run.spec, spec_kind(self.run.spec).judged)
        self._order = {c.row_id: c.index for c in cases}
        return {path: cases}

    def order(self) -> dict[str, int]:
        if not self._order:
            self.load_cases()
        return self._order

    async def run_case(self, case: CalibrationCase) -> CalibrationRecord:
        run = self.run
        usage_by_phase: dict[str, Usage] = {}
        judges = run.judges()
        label = case.label
        verdict: bool | int | None
        expected: bool | int
        if isinstance(label, MetricLabel):
            metric = run.spec.metric(label.metric_id)
            assert metric is not None  # loading checked it

            async def ask_one(endpoint: Endpoint, sample: int) -> tuple[bool | None, str]:
                verdict = await judge(metric, label.transcript, evaluator=endpoint, engine=run.engine,
                                      sample=sample, usage_by_phase=usage_by_phase)
                return verdict.present, verdict.justification

            panel = majority(await poll(judges, run.spec.judge.samples, 0, ask_one))
            verdict, text, expected = panel.value, panel.justification, label.present
        else:
            outcome = await run_eval(label.eval, label.inputs, judges=judges, engine=run.engine, usage_by_phase=usage_by_phase,
                                     samples=run.spec.judge.samples)
            verdict, text, expected = outcome.score, outcome.explanation, label.score
        return CalibrationRecord(run.spec.name, case.line, case.key, expected, verdict, text, usage_by_phase)

    def record_to_json(self, record: CalibrationRecord) -> JSONRecord:
        return record.to_json()

    def record_from_json(self, data: JSONRecord) -> CalibrationRecord:
        return CalibrationRecord.from_json(data)

    def outcome(self, record: CalibrationRecord, judged_row: JudgedRowHook | None) -> Outcome:
        """The item passes when the judge agrees with the label (decided here, once)."""
        status: Status = ("unscored" if record.verdict is None else
                          "passed" if record.verdict == record.label else "failed")
        record.status = status
        shown = {True: "present", False: "absent"}
        label, verdict = (shown[v] if isinstance(v, bool) else v for v in (record.label, record.verdict))
        message = {"failed": f"{record.key}: the judge said {verdict}, the label says {label}\n"
                             f"judge: {record.justification}",
                   "unscored": record.justification}.get(status, "")
        return Outcome(status, message, [("evalbench_label", record.label), ("evalbench_verdict", record.verdict)])

    def plan_calls(self, case: CalibrationCase, expect: Expectations) -> Plan:
        """A calibration run is not estimated: its judge calls are as many as its labelled lines."""
        raise ConfigError("--evalbench-estimate: a calibration run (--evalbench-calibrate) cannot be estimated; "
                          "it makes one judge call per labelled line of calibration.jsonl")

    def write_results(self, data: Iterable[JSONRecord]) -> KindResults:
        """calibration.json over this session's examples, one entry per metric or eval."""
        records = (self.record_from_json(d) for d in data)
        entries = calibration_entries(records, spec_kind(self.run.spec).judged, judge_name(self.run.judges()))
        dump_json(self.run.bench_dir / RESULT_FILE, [versioned(e.model_dump(exclude_none=False)) for e in entries],
                  self.run.bench_dir)
        return KindResults(view="none", results=[e.model_dump(exclude_none=False) for e in entries],
                           table=calibration_table(entries))


def calibration_entries(records: Iterable[CalibrationRecord], judged: Judged, judge: str) -> list[CalibrationEntry]:
    groups: dict[str, list[CalibrationRecord]] = defaultdict(list)
    for record in sorted(records, key=lambda r: r.line):
        groups[record.key].append(record)
    weighted = judged == "evals"
    categories: list[bool | int] = [True, False] if not weighted else [1, 2, 3, 4, 5]
    order = list(EVAL_NAMES) if weighted else sorted(groups)
    entries = []
    for key in sorted(groups, key=lambda k: (order.index(k) if k in order else len(order), k)):
        rows = groups[key]
        stats = agreement_entry([r.label for r in rows], [r.verdict for r in rows], categories,
                                weighted=weighted)
        entries.append(CalibrationEntry.model_validate({("eval" if weighted else "metric_id"): key, "judge": judge,
                                                        **stats}))
    return entries


def calibration_table(entries: list[CalibrationEntry]) -> list[str]:
    """Terminal lines: per metric or eval, agreement and kappa with its interval."""
    lines = [f"calibration ({RESULT_FILE}): judge {entries[0].judge}" if entries else "calibration: no examples"]
    for e in entries:
        key = e.metric_id or e.eval
        agreement = "-" if e.agreement is None else f"{e.agreement:.2f}"
        value = "undefined" if e.kappa is None else f"{e.kappa:.2f}"
        ci = "" if e.kappa_ci is None else f" [95% CI {e.kappa_ci[0]:.2f}, {e.kappa_ci[1]:.2f}]"
        lines.append(f"  {key}: n={e.n} agreement {agreement} kappa {value}{ci}"
                     + (f" ({e.weighting}-weighted)" if e.weighting != "none" else "")
                     + (f", {e.unscored} unscored" if e.unscored else ""))
    return lines


def _conforms(run: BenchmarkRun) -> BenchmarkKind[CalibrationRecord, CalibrationCase]:
    """For mypy: the kind is the boundary's protocol with its own case and record types."""
    return CalibrationKind(run)
