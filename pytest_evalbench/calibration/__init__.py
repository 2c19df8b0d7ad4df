"""Judge calibration: the third benchmark kind (`--evalbench-calibrate`).

Every line of `calibration.jsonl` beside benchmark.yaml is a human-labelled example and one
test item (`benchmarks/<name>/calibration.jsonl::<line>`): the benchmark's judge (or panel)
judges it exactly as in a normal run, the item passes when the judge agrees with the label, and
the session writes `calibration.json`: per metric (scenario benchmarks) or Explain eval (dataset
benchmarks) n, exact agreement, Cohen's kappa (quadratic-weighted for 1-5 scores) with a 95%
interval, and the confusion matrix. `judge: {min_kappa: ...}` then marks metrics whose judge
falls short as "judge unreliable" in later runs (see `reliability.py`).

It implements the protocol of `kinds.py` with no change to the pytest layer. It uses the
judges of the kinds it calibrates (`scenarios.judge`, `dataset.runner.run_eval`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from ..context import BenchmarkRun
from ..dataset.explain import EVAL_NAMES
from ..dataset.runner import run_eval
from ..kinds import JudgedRowHook, KindResults, Outcome, Record
from ..llm.types import Endpoint, Usage
from ..panel import majority, poll
from ..scenarios.judge import judge
from ..store import dump_json
from .models import CALIBRATION_FILE, RESULT_FILE, CalibrationCase, CalibrationEntry, MetricLabel, load_labels
from .reliability import judge_name
from .stats import agreement_entry

__all__ = ["CalibrationKind"]


class CalibrationKind:
    """The calibration kind of the protocol in `kinds.py`."""

    roles = ("evaluator_model",)

    def __init__(self, run: BenchmarkRun) -> None:
        self.run = run
        self._order: dict[str, int] = {}

    def data_files(self) -> list[Path]:
        return [self.run.bench_dir / CALIBRATION_FILE]

    def load_cases(self) -> dict[Path, list[Any]]:
        path = self.data_files()[0]
        cases = load_labels(path, self.run.spec)
        self._order = {c.row_id: c.index for c in cases}
        return {path: cases}

    def order(self) -> dict[str, int]:
        if not self._order:
            self.load_cases()
        return self._order

    async def run_case(self, case: Any) -> Record:
        assert isinstance(case, CalibrationCase)
        run = self.run
        ledger: dict[str, Usage] = {}
        judges = run.judges()
        label = case.label
        expected: Any
        if isinstance(label, MetricLabel):
            metric = run.spec.metric(label.metric_id)
            assert metric is not None  # loading checked it

            async def ask_one(endpoint: Endpoint, sample: int) -> tuple[bool | None, str]:
                verdict = await judge(metric, label.transcript, evaluator=endpoint, engine=run.engine,
                                      sample=sample, ledger=ledger)
                return verdict.present, verdict.justification

            panel = majority(await poll(judges, run.spec.judge.samples, 0, ask_one))
            verdict: Any = panel.value
            text, expected = panel.justification, label.present
        else:
            outcome = await run_eval(label.eval, label.inputs, judges=judges, engine=run.engine, ledger=ledger,
                                     samples=run.spec.judge.samples)
            verdict, text, expected = outcome.score, outcome.explanation, label.score
        status = "unscored" if verdict is None else ("passed" if verdict == expected else "failed")
        return {"benchmark": run.spec.name, "kind": "calibration", "line": case.line, "key": case.key,
                "label": expected, "verdict": verdict, "justification": text, "status": status,
                "usage": {k: v.to_json() for k, v in ledger.items()}}

    def outcome(self, record: Record, judged_row: JudgedRowHook) -> Outcome:
        status = record["status"]
        shown = {True: "present", False: "absent"}
        label, verdict = (shown.get(record[k], record[k]) if isinstance(record[k], bool) else record[k]
                          for k in ("label", "verdict"))
        message = {"failed": f"{record['key']}: the judge said {verdict}, the label says {label}\n"
                             f"judge: {record['justification']}",
                   "unscored": record["justification"]}.get(status, "")
        return Outcome(status, message, [("evalbench_label", record["label"]),
                                         ("evalbench_verdict", record["verdict"])])

    def write_results(self, records: Collection[Record]) -> KindResults:
        """calibration.json over this session's examples, one entry per metric or eval."""
        entries = calibration_entries(records, self.run.spec.kind, judge_name(self.run.judges()))
        dump_json(self.run.bench_dir / RESULT_FILE, entries)
        return KindResults(view="none", results=entries, gate_results=[], table=calibration_table(entries))


def calibration_entries(records: Iterable[Record], kind: str, judge: str) -> list[dict[str, Any]]:
    groups: dict[str, list[Record]] = defaultdict(list)
    for record in sorted(records, key=lambda r: r["line"]):
        groups[record["key"]].append(record)
    weighted = kind != "scenarios"
    categories: list[Any] = [True, False] if not weighted else [1, 2, 3, 4, 5]
    order = list(EVAL_NAMES) if weighted else sorted(groups)
    entries = []
    for key in sorted(groups, key=lambda k: (order.index(k) if k in order else len(order), k)):
        rows = groups[key]
        stats = agreement_entry([r["label"] for r in rows], [r["verdict"] for r in rows], categories,
                                weighted=weighted)
        entry = {("eval" if weighted else "metric_id"): key, "judge": judge, **stats}
        entries.append(CalibrationEntry.model_validate(entry).model_dump(exclude_none=False))
    return entries


def calibration_table(entries: list[dict[str, Any]]) -> list[str]:
    """Terminal lines: per metric or eval, agreement and kappa with its interval."""
    lines = [f"calibration ({RESULT_FILE}): judge {entries[0]['judge']}" if entries else "calibration: no examples"]
    for e in entries:
        key = e["metric_id"] or e["eval"]
        agreement = "-" if e["agreement"] is None else f"{e['agreement']:.2f}"
        value = "undefined" if e["kappa"] is None else f"{e['kappa']:.2f}"
        ci = "" if e["kappa_ci"] is None else f" [95% CI {e['kappa_ci'][0]:.2f}, {e['kappa_ci'][1]:.2f}]"
        lines.append(f"  {key}: n={e['n']} agreement {agreement} kappa {value}{ci}"
                     + (f" ({e['weighting']}-weighted)" if e["weighting"] != "none" else "")
                     + (f", {e['unscored']} unscored" if e["unscored"] else ""))
    return lines
