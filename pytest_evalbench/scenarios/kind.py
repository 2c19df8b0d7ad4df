"""`ScenarioKind`: this kind's implementation of the protocol in `kinds.py` (imported by the
registry there only when a run is of this kind; the package `__init__` imports nothing)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, overload

from ..correction import JudgeAccuracy
from ..errors import ConfigError
from ..kinds import BenchmarkKind, JSONObject, JSONRecord, Judged, JudgedRowHook, KindResults, Outcome, Status
from ..loading import SPEC_FILE
from ..panel import agreement_lines
from ..provenance import LedgerRows, unit_key
from ..reliability import judge_accuracy, judge_name, judged_unreliably, reliability_lines, unreliable_judges
from ..run import BenchmarkRun
from ..store import read_rows
from ..targets import ModelTarget
from .aggregate import aggregate, correct_results
from .audit import audit_line
from .load_memo import RowHandoff, load_rows
from .loading import SCENARIOS_FILE, iter_scenarios
from .models import ScenarioRecord, ScoreRow, derive_pass
from .runner import ScenarioCase, StoredScenario, run_scenario
from .store import RUNS_DIR, Known, RunConversations, StoredRows, write_results
from .tally import RecordTally
from .written import inputs_digest

if TYPE_CHECKING:
    from ..estimate import Expectations, HasRun, Plan
    from ..llm.item_memo import ItemMemo


def _plan_scenario(kind: HasRun, case: ScenarioCase, expect: Expectations) -> Plan:
    """`estimate.plan_scenario`, imported only for an estimate: a run does not pay for the estimator's modules."""
    from .estimate import plan_scenario

    return plan_scenario(kind, case, expect)


TAIL_MESSAGES = 2
"""A failure shows the last exchange; `-v` adds the whole transcript (plugin/session.py)."""
TAIL_CHARS = 400


class ScenarioKind:
    """The scenario kind of the protocol in `kinds.py`."""

    roles = ("user_model", "evaluator_model")
    judged: ClassVar[Judged] = "metrics"
    thresholds_name_targets: ClassVar[bool] = True
    generated_from_metrics: ClassVar[bool] = True
    record_ids: ClassVar[tuple[tuple[str, ...], ...]] = (
        ("target_id",), ("conversation", "id"), ("conversation", "target", "id"), ("score", "id"),
        ("score", "metric_id"), ("score", "target_model"))
    record_same_ids: ClassVar[tuple[tuple[tuple[str, ...], ...], ...]] = (
        (("target_id",), ("conversation", "target", "id"), ("score", "target_model")),
        (("conversation", "id"), ("score", "id")))

    plan_calls = _plan_scenario
    """The calls `run_case` would make, planned without making them (`--evalbench-estimate`)."""

    def __init__(self, run: BenchmarkRun) -> None:
        self.run = run
        self._order: dict[str, int] = {}
        self._known = Known()
        self._remember: Callable[[], None] | None = None
        """Writes the load memo (`load_memo`): at the finish of a session that ran items."""
        self.handoff = RowHandoff()
        """The rows `load_cases` loaded, for xdist workers; on a worker, those its controller loaded."""

    @functools.cached_property
    def unreliable(self) -> dict[str, str]:
        """Metric id -> why its judge may not convict the build (calibration.json vs `judge: min_kappa`)."""
        run = self.run
        judge = judge_name(run.evaluators)
        return unreliable_judges(run.bench_dir, run.spec.judge, [m.id for m in run.spec.metrics], judge)

    @functools.cached_property
    def accuracy(self) -> dict[str, JudgeAccuracy]:
        """Metric id -> this judge's calibration counts (calibration.json): what corrected rates read."""
        return judge_accuracy(self.run.bench_dir, judge_name(self.run.evaluators))

    def judged_unreliably(self, score: ScoreRow) -> bool:
        """The row's verdict came from a judge that calibration found unreliable (a check is always trusted)."""
        return judged_unreliably(self.unreliable, score.metric_id, score.decided_by)

    def data_files(self) -> list[Path]:
        return [self.run.bench_dir / SCENARIOS_FILE]

    def load_cases(self) -> dict[Path, list[ScenarioCase]]:
        """Items in a fixed order: scenario row, then target, then sample."""
        run = self.run
        if not run.target_configs:
            raise ConfigError(f"{run.bench_dir / SPEC_FILE}: no targets; add a `targets:` list or pass "
                              "--evalbench-target=MODEL")

        def parsed() -> Iterator[StoredScenario]:  # one model at a time
            return (StoredScenario(s) for s in iter_scenarios(run.bench_dir, run.spec))

        cache = run.engine.cache  # the rows from the load memo, when this file was loaded so before
        rows, self._remember = load_rows(run.bench_dir / SCENARIOS_FILE, run.spec, cache.directory, cache.reads,
                                         cache.writes, parsed, self.handoff.take())
        stored = {s.id: s for s in rows}
        self.handoff.rows = list(stored.values())
        self._order = {key: i for i, key in enumerate(stored)}
        self._known = Known({m.id: (m.name, m.type) for m in run.spec.metrics}, StoredRows(stored))
        cases: list[ScenarioCase] = []
        for row in stored.values():
            for cfg in run.target_configs:
                for sample in range(run.spec.generation.num_samples):
                    cases.append(ScenarioCase(row, cfg.id, sample, len(cases)))
        return {self.data_files()[0]: cases}

    def order(self) -> dict[str, int]:
        if not self._order:
            self.load_cases()
        return self._order

    async def run_case(self, case: ScenarioCase) -> ScenarioRecord:
        """The item's record from its chain, after `memo_hit` missed (the scheduler tries it first):
        the chain leaves an item memo when it was fully cached."""
        memo = self._memo_of(case)
        if memo is None:
            return await run_scenario(self.run, case)
        return await memo[0].produce(memo[1], lambda: run_scenario(self.run, case), _memo_json)

    def memo_hit(self, case: ScenarioCase) -> ScenarioRecord | None:
        """The item's record when its item memo hits (its calls counted), else None: settled without a
        task (`Pipeline.first`), and `run_case` runs the chain."""
        memo = self._memo_of(case)
        return None if memo is None else memo[0].hit(memo[1], _memo_record)

    def _memo_of(self, case: ScenarioCase) -> tuple[ItemMemo, str] | None:
        """The run's item memo and the case's key in it; None without memos or for an app target (its
        replies are not cached)."""
        memo = self.run.item_memo
        if memo is None or not isinstance(self.run.targets.get(case.target_id), ModelTarget):
            return None
        return memo, memo.key(case.stored.row_json, case.target_id, case.sample)

    def record_to_json(self, record: ScenarioRecord) -> JSONRecord:
        """`to_json()`, or the JSON the record was read from when `outcome` kept it in step (a memo hit:
        no dump again)."""
        return record.source if record.source is not None else record.to_json()

    def record_from_json(self, data: JSONRecord) -> ScenarioRecord:
        return ScenarioRecord.from_json(data)

    def outcome(self, record: ScenarioRecord, judged_row: JudgedRowHook | None) -> Outcome:
        """The judged-row hook sees the score row as JSON and may change it; then, and only here,
        `passed`/`score` and the status are derived from `present`. The JSON the record was read from
        (an item memo's) is kept only when no hook saw the row: what changes here is set in it too."""
        source = record.source
        record.source = None  # the record changes here: that JSON no longer matches
        if judged_row is not None:
            record.score.passed = record.score.score = record.status = None  # the hook sees them undecided
            row = record.score.to_json()
            judged_row(row, record.to_json())
            record.score = ScoreRow.model_validate(row)
        score = record.score
        score.passed, score.score = derive_pass(score.present, score.metric_type)
        status: Status = "unscored" if score.passed is None else ("passed" if score.passed else "failed")
        record.status = status
        if source is not None and judged_row is None:
            record.source = _decided(source, score.passed, score.score, status)
        properties: list[tuple[str, object]] = [("evalbench_present", score.present), ("evalbench_passed", score.passed),
                      ("evalbench_score", score.score), ("evalbench_justification", score.justification)]
        message = score.justification if status == "unscored" else ""
        if status == "failed":  # built for failures only (the transcript's tail: ~8 us an item)
            metric = self.run.spec.metric(score.metric_id)
            message = failure_message(record, metric.why if metric else None)
        why = self.unreliable.get(score.metric_id) if self.judged_unreliably(score) else None
        if status == "failed" and why:
            return Outcome(status, f"{message}\njudge unreliable ({why}): this failure cannot fail the build",
                           properties, convicts=False)
        return Outcome(status, message, properties)

    def write_results(self, records: Iterable[ScenarioRecord]) -> KindResults:
        """`write_records` of the records' JSON (the JSON they were read from, when unchanged)."""
        return self.write_records(record.source or record.to_json() for record in records)

    def write_records(self, records: Iterable[JSONRecord]) -> KindResults:
        """One pass over the records as JSON (they may stream from disk; this session's own spooled
        records, valid when spooled, are not validated again): the store merges them into the run
        files; agreement and reliability figures are counted on the way."""
        bench_dir = self.run.output_dir
        run = self.run
        if self._remember is not None:  # this session ran: the next one takes scenarios.json's rows from the memo
            self._remember()
            self._remember = None
        tally = RecordTally(self.unreliable)
        measured: set[str] = set()  # filled by the store (one key string per row)

        # Target runs not configured are dropped only when benchmark.yaml lists its targets; when
        # targets come from the command line alone (impactbench's style), other models' runs stay.
        targets = ({t.id for t in run.spec.targets} | {t.id for t in run.target_configs}) if run.spec.targets else None
        samples, stored = run.spec.generation.num_samples, getattr(records, "lines", None)  # their bytes: `written`
        inputs = inputs_digest(stored(), self.order(), samples, targets) if stored is not None else None
        rates, dropped, scores, gated = write_results(bench_dir, tally.counted(records), self.order(), targets=targets,
                                                      samples=samples, known=self._known,
                                                      stamp=run.stamp, root=run.bench_dir, measured=measured,
                                                      accuracy=self.accuracy, inputs=inputs)
        lines = agreement_lines(tally.agreement)
        line = audit_line(tally.audit_counts(), len(measured))
        lines += [line] if line else []
        results: Sequence[JSONObject] = ResultsFile(bench_dir / "results.json") if rates else []
        summaries = [r.model_dump(mode="json", exclude_unset=True) for r in rates]  # results.json's, by_scenario empty
        if self.unreliable:
            # failures judged by an unreliable judge are shown (xfailed), never counted against the build
            lines += reliability_lines(self.unreliable, {k: tally.failures[k] for k in self.unreliable})
            # every verdict of an unreliable judge leaves the gate's numbers (passes would inflate them)
            gated = scores.outcome_rows(lambda row: not self.judged_unreliably(row))
        # the gate reads the rows this session measured; rows carried over from earlier sessions stay
        # in the result files (and are shown as carried over), but can neither clear nor convict
        gated = {target: kept for target, rows in gated.items()
                 if (kept := [r for r in rows if unit_key(r.target, r.id, r.sample) in measured])}
        rates = aggregate(gated, by_scenario=False)
        if self.accuracy or run.spec.judge.correct_rates:  # the gate's rates, corrected over its own rows
            correct_results(rates, gated, self.accuracy)
        return KindResults(results=results, rates=rates, scores=scores,
                           outcomes=[row for rows in gated.values() for row in rows],
                           conversations=RunConversations(bench_dir, self._known, scores.fresh), dropped=dropped,
                           judge_lines=lines, files=[bench_dir / "results.json", bench_dir / RUNS_DIR],
                           unreliable=dict(self.unreliable), measured=measured, sessions=LedgerRows(bench_dir),
                           accuracy=self.accuracy, summaries=summaries)


class ResultsFile(Sequence[JSONObject]):
    """results.json's entries, read from the file when first asked for: the results hook's payload,
    built only for a plugin that implements the hook (by_scenario holds one entry per scenario)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[JSONObject] | None = None

    def _read(self) -> list[JSONObject]:
        if self._entries is None:
            self._entries = read_rows(self.path)
        return self._entries

    @overload
    def __getitem__(self, index: int) -> JSONObject: ...

    @overload
    def __getitem__(self, index: slice[int | None, int | None, int | None]) -> Sequence[JSONObject]: ...

    def __getitem__(self, index: int | slice[int | None, int | None, int | None]) -> JSONObject | Sequence[JSONObject]:
        return self._read()[index]

    def __len__(self) -> int:
        return len(self._read())


def failure_message(record: ScenarioRecord, why: str | None = None) -> str:
    """The judge's verdict against the metric's polarity, why the metric matters (impactbench's
    `mattersBecause`, when the metric has one), the judge's reasons and the transcript's tail."""
    score = record.score
    seen = "present" if score.present else "absent"
    seen += f" (first at assistant turn {score.turn})" if score.turn else ""
    want = "present" if score.metric_type == "positive" else "absent"
    lines = [f"{score.metric_id} {score.metric_name!r} ({score.metric_type}): behaviour {seen}, "
             f"expected {want}", *([f"why it matters: {why}"] if why else []),
             f"{score.decided_by or 'judge'}: {score.justification}", "last exchange:"]
    for message in record.conversation.transcript[-TAIL_MESSAGES:]:
        text = " ".join(message.content.split())
        lines.append(f"  {message.role.upper()}: {text[:TAIL_CHARS]}{'…' if len(text) > TAIL_CHARS else ''}")
    return "\n".join(lines)


def _decided(source: JSONRecord, passed: bool | None, score: int | None, status: Status) -> JSONRecord | None:
    """The record's JSON with its outcome set, as `to_json()` gives it after `outcome` (the keys are there,
    in place, in `to_json()`'s JSON); None when it is not that JSON's shape."""
    row = source.get("score")
    if not isinstance(row, dict) or "passed" not in row or "score" not in row or "status" not in source:
        return None
    row["passed"], row["score"], source["status"] = passed, score, status
    return source


def _memo_json(record: ScenarioRecord) -> JSONRecord:
    """A record's JSON for its item memo: decided as `outcome` decides it without a judged-row hook, so a
    hit's JSON is the record's JSON as the item reports it (a hook's run decides again, from `present`)."""
    score = record.score
    passed, value = derive_pass(score.present, score.metric_type)
    data = _decided(record.to_json(), passed, value, "unscored" if passed is None else ("passed" if passed else "failed"))
    assert data is not None  # to_json() has every key
    return data


def _memo_record(data: JSONRecord) -> ScenarioRecord:
    """A memo's record: strictly validated, so its JSON holds exactly the record's values."""
    return ScenarioRecord.from_json(data, strict=True)


def _conforms(run: BenchmarkRun) -> BenchmarkKind[ScenarioRecord, ScenarioCase]:
    """For mypy: the kind is the boundary's protocol with its own case and record types."""
    return ScenarioKind(run)
