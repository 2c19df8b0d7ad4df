"""`ScenarioKind`: the scenario kind of the protocol in `kinds/protocol.py` (imported by the registry only
when a run is of this kind), and what the finish counts of this session's records as they pass to the
store (read from their JSON: this session's spooled records were valid when spooled).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, overload

from pytest_evalbench.base.errors import ConfigError
from pytest_evalbench.base.files import read_rows
from pytest_evalbench.formats.agreement import JudgeAccuracy
from pytest_evalbench.formats.provenance import StampedRows, unit_key
from pytest_evalbench.formats.sequential import SequentialRule
from pytest_evalbench.formats.spec import SPEC_FILE
from pytest_evalbench.kinds.judges import (
    agreement_lines,
    judge_accuracy,
    judge_name,
    judged_unreliably,
    reliability_lines,
    unreliable_judges,
)
from pytest_evalbench.kinds.labels import JudgeSetup, load_judge_setup
from pytest_evalbench.kinds.protocol import (
    BenchmarkKind,
    JSONObject,
    JSONRecord,
    Judged,
    JudgedRowHook,
    KindResults,
    Outcome,
    Status,
)
from pytest_evalbench.kinds.run import BenchmarkRun
from pytest_evalbench.kinds.scenarios.aggregate import aggregate, correct_results
from pytest_evalbench.kinds.scenarios.draws import NOT_DRAWN, NotDrawn, SampleDraws, prior_of
from pytest_evalbench.kinds.scenarios.models import SCENARIOS_FILE, ScenarioRecord, ScoreRow, derive_pass, iter_scenarios
from pytest_evalbench.kinds.scenarios.runner import ScenarioItem, StoredScenario, audit_line, run_scenario
from pytest_evalbench.kinds.scenarios.store import (
    RUNS_DIR,
    Known,
    RunConversations,
    RunScores,
    StoredRows,
    write_results,
)

if TYPE_CHECKING:
    from pytest_evalbench.kinds.estimate import Expectations, Plan


TAIL_MESSAGES = 2
"""A failure shows the last exchange; `-v` adds the whole transcript (plugin/session.py)."""
TAIL_CHARS = 400


class ScenarioKind:
    """The scenario kind of the protocol in `kinds/protocol.py`."""

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

    def __init__(self, run: BenchmarkRun) -> None:
        self.run = run
        self._order: dict[str, int] = {}
        self._known = Known()
        self._judge_setup: JudgeSetup | None = None

    @functools.cached_property
    def unreliable(self) -> dict[str, str]:
        """Metric id -> why its judge may not convict the build (calibration.json vs `judge: min_kappa`)."""
        run = self.run
        judge = judge_name(run.evaluators)
        return unreliable_judges(run.bench_dir, run.spec.judge, [m.id for m in run.spec.metrics], judge,
                                 run.spec.judge_styles())

    @functools.cached_property
    def accuracy(self) -> dict[str, JudgeAccuracy]:
        """Metric id -> this judge's calibration counts (calibration.json): what corrected rates read."""
        return judge_accuracy(self.run.bench_dir, judge_name(self.run.evaluators))

    def judged_unreliably(self, score: ScoreRow) -> bool:
        """The row's judgment came from a judge that calibration found unreliable (a check is always trusted)."""
        return judged_unreliably(self.unreliable, score.metric_id, score.decided_by)

    def data_files(self) -> list[Path]:
        return [self.run.bench_dir / SCENARIOS_FILE]

    def load_items(self) -> dict[Path, list[ScenarioItem]]:
        """Items in a fixed order: scenario row, then target, then sample."""
        run = self.run
        if not run.target_configs:
            raise ConfigError(f"{run.bench_dir / SPEC_FILE}: no targets; add a `targets:` list or pass "
                              "--evalbench-target=MODEL")
        stored = {s.id: StoredScenario(s) for s in iter_scenarios(run.bench_dir, run.spec)}  # one model at a time
        self._order = {key: i for i, key in enumerate(stored)}
        self._known = Known({m.id: (m.name, m.type) for m in run.spec.metrics}, StoredRows(stored))
        cases: list[ScenarioItem] = []
        for row in stored.values():
            for cfg in run.target_configs:
                for sample in range(run.spec.generation.num_samples):
                    cases.append(ScenarioItem(row, cfg.id, sample, len(cases)))
        self._judge_setup = self._load_judge_setup()
        _ = self.draws  # the prior is read from the result files before this run writes them
        return {self.data_files()[0]: cases}

    @functools.cached_property
    def draws(self) -> SampleDraws | None:
        """`generation.sampling: sequential` with more than one sample: the rule deciding when a case
        stops drawing, at the error rate `gate.alpha`, under the prior fitted to the scores on disk
        (the last runs'; none yet: settled for certain only)."""
        spec = self.run.spec
        if spec.generation.sampling != "sequential" or spec.generation.num_samples < 2:
            return None
        prior = prior_of(RunScores(self.run.output_dir, self._known))
        return SampleDraws(SequentialRule(spec.generation.num_samples, spec.gate.case_pass_rate, spec.gate.alpha,
                                          prior))

    def expect_cases(self, cases: Iterable[ScenarioItem]) -> None:
        if self.draws is not None:
            self.draws.expect(cases)

    @property
    def judge_setup(self) -> JudgeSetup:
        """What the judge is handed from the calibration files: loaded with the cases (at preflight in a
        controller or single process, at collection in an xdist worker), before any case is judged."""
        if self._judge_setup is None:  # a case planned or run by a caller that loaded no cases
            self._judge_setup = self._load_judge_setup()
        return self._judge_setup

    def _load_judge_setup(self) -> JudgeSetup:
        return load_judge_setup(self.run.bench_dir, self.run.spec, self.run.evaluators)

    def order(self) -> dict[str, int]:
        if not self._order:
            self.load_items()
        return self._order

    async def run_item(self, case: ScenarioItem) -> ScenarioRecord | NotDrawn:
        if self.draws is None:
            return await run_scenario(self.run, case, self.judge_setup)
        return await self.draws.run(case, lambda: run_scenario(self.run, case, self.judge_setup), sample_passed)

    def record_to_json(self, record: ScenarioRecord | NotDrawn) -> JSONRecord:
        if isinstance(record, NotDrawn):  # the session reports it as a skip before asking
            raise TypeError(f"{record.case.name}: a sample not drawn has no record")
        return record.to_json()

    def record_from_json(self, data: JSONRecord) -> ScenarioRecord:
        return ScenarioRecord.from_json(data)

    def outcome(self, record: ScenarioRecord | NotDrawn, judged_row: JudgedRowHook | None) -> Outcome:
        """The judged-row hook sees the score row as JSON and may change it; then, and only here,
        `passed`/`score` and the status are derived from `present`. A sample not drawn has no row."""
        if isinstance(record, NotDrawn):
            return Outcome(NOT_DRAWN, record.message, [])
        if judged_row is not None:
            row = record.score.to_json()
            judged_row(row, record.to_json())
            record.score = ScoreRow.model_validate(row)
        score = record.score
        score.passed, score.score = derive_pass(score.present, score.metric_type)
        status: Status = "unscored" if score.passed is None else ("passed" if score.passed else "failed")
        record.status = status
        properties: list[tuple[str, object]] = [("evalbench_present", score.present), ("evalbench_passed", score.passed),
                      ("evalbench_score", score.score), ("evalbench_justification", score.justification)]
        message = score.justification if status == "unscored" else ""
        if status == "failed":  # built for failures only (the transcript's tail)
            metric = self.run.spec.metric(score.metric_id)
            message = failure_message(record, metric.why if metric else None)
        why = self.unreliable.get(score.metric_id) if self.judged_unreliably(score) else None
        if status == "failed" and why:
            return Outcome(status, f"{message}\njudge unreliable ({why}): this failure cannot fail the build",
                           properties, convicts=False, decided_by=score.decided_by)
        return Outcome(status, message, properties, decided_by=score.decided_by)

    def plan_calls(self, case: ScenarioItem, expect: Expectations) -> Plan:
        from pytest_evalbench.kinds.scenarios.estimate import plan_scenario  # only an estimate needs it

        return plan_scenario(self, case, expect, self.judge_setup)

    def write_results(self, records: Iterable[JSONRecord]) -> KindResults:
        """One pass over the records as JSON (they may stream from disk; this session's own spooled
        records, valid when spooled, are not validated again): the store merges them into the run
        files; agreement and reliability figures are counted on the way."""
        bench_dir = self.run.output_dir
        run = self.run
        draws = self.draws  # its prior read before this session's rows are written
        tally = RecordTally(self.unreliable)
        measured: set[str] = set()  # filled by the store (one key string per row)

        # Target runs not configured are dropped only when benchmark.yaml lists its targets; when
        # targets come from the command line alone (impactbench's style), other models' runs stay.
        targets = ({t.id for t in run.spec.targets} | {t.id for t in run.target_configs}) if run.spec.targets else None
        rates, dropped, scores, gated = write_results(bench_dir, tally.counted(records), self.order(), targets=targets,
                                                      samples=run.spec.generation.num_samples, known=self._known,
                                                      stamp=run.stamp, root=run.bench_dir, measured=measured,
                                                      accuracy=self.accuracy)
        lines = agreement_lines(tally.agreement)
        line = audit_line(tally.audit_counts(), len(measured))
        lines += [line] if line else []
        results: Sequence[JSONObject] = ResultsFile(bench_dir / "results.json") if rates else []
        summaries = [r.model_dump(mode="json", exclude_unset=True) for r in rates]  # results.json's, by_scenario empty
        if self.unreliable:
            # failures judged by an unreliable judge are shown (xfailed), never counted against the build
            lines += reliability_lines(self.unreliable, {k: tally.failures[k] for k in self.unreliable},
                                       {k: tally.checked[k] for k in self.unreliable})
            # every judgment of an unreliable judge leaves the gate's numbers (passes would inflate them)
            gated = scores.unit_rows(lambda row: not self.judged_unreliably(row))
        # the gate reads the rows this session measured; rows carried over from earlier sessions stay
        # in the result files (and are shown as carried over), but can neither clear nor convict
        gated = {target: kept for target, rows in gated.items()
                 if (kept := [r for r in rows if unit_key(r.target, r.id, r.sample) in measured])}
        rates = aggregate(gated, by_scenario=False)
        if self.accuracy or run.spec.judge.correct_rates:  # the gate's rates, corrected over its own rows
            correct_results(rates, gated, self.accuracy)
        return KindResults(results=results, rates=rates, scores=scores,
                           units=[row for rows in gated.values() for row in rows],
                           conversations=RunConversations(bench_dir, self._known, scores.fresh), dropped=dropped,
                           judge_lines=lines, files=[bench_dir / "results.json", bench_dir / RUNS_DIR],
                           unreliable=dict(self.unreliable), measured=measured, sessions=StampedRows(bench_dir),
                           accuracy=self.accuracy, summaries=summaries,
                           sequential=draws.rule if draws is not None else None)


def sample_passed(record: ScenarioRecord) -> bool | None:
    """What a drawn sample tells the later ones: the judge's judgment against the metric's polarity
    (before any judged-row hook, which runs when the item reports)."""
    return derive_pass(record.score.present, record.score.metric_type)[0]


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
    """The judge's judgment against the metric's polarity, why the metric matters (impactbench's
    `mattersBecause`, when the metric has one), the judge's reasons and the transcript's tail. The first
    line repeats what a trajectory check found differed (`ScenarioRecord.trajectory_detail`), so every
    surface that shows only that line (the Markdown summary, the case list) says it."""
    score = record.score
    seen = "present" if score.present else "absent"
    seen += f" (first at assistant turn {score.turn})" if score.turn else ""
    want = "present" if score.metric_type == "positive" else "absent"
    differed = record.trajectory_detail
    lines = [f"{score.metric_id} {score.metric_name!r} ({score.metric_type}): behaviour {seen}, "
             f"expected {want}" + (f"; {differed}" if differed else ""),
             *([f"why it matters: {why}"] if why else []),
             f"{score.decided_by or 'judge'}: {score.justification}", "last exchange:"]
    for message in record.conversation.transcript[-TAIL_MESSAGES:]:
        text = " ".join(message.content.split())
        lines.append(f"  {message.role.upper()}: {text[:TAIL_CHARS]}{'…' if len(text) > TAIL_CHARS else ''}")
    return "\n".join(lines)


def _conforms(run: BenchmarkRun) -> BenchmarkKind[ScenarioRecord | NotDrawn, ScenarioItem]:
    """For mypy: the kind is the boundary's protocol with its own case and record types."""
    return ScenarioKind(run)


AUDIT_FLAGS = ("ended_early", "stated_objective", "broke_character")


class RecordTally:
    """Panel agreement per row, failures of metrics whose judge is unreliable (per metric: the judge's and
    the checks') and simulated-user audit flags (per flag), counted in the store's one pass over the records."""

    def __init__(self, unreliable: dict[str, str]) -> None:
        self.unreliable = unreliable
        self.agreement: list[tuple[str, float | None]] = []
        self.failures: Counter[str] = Counter()
        self.checked: Counter[str] = Counter()
        """Failures a deterministic check decided, of metrics whose judge is unreliable (they count as usual)."""
        self.audited: Counter[str] = Counter()

    def counted(self, records: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """`records` (`ScenarioRecord.to_json`'s shape), counted as they pass."""
        agreement, failures, audited, unreliable = self.agreement, self.failures, self.audited, self.unreliable
        checked = self.checked
        for record in records:
            if (found := record["conversation"].get("user_audit")) is not None:  # as Counter.update counts them
                audited["ended_early"] += found["ended_early"]
                audited["stated_objective"] += bool(found["stated_objective"])
                audited["broke_character"] += bool(found["broke_character"])
            score = record["score"]
            if (value := score.get("agreement")) is not None:  # a panel's: kept per row (one pair, not one per item)
                agreement.append((score["metric_id"], value))
            if record.get("status") == "failed" and score["metric_id"] in unreliable:
                if judged_unreliably(unreliable, score["metric_id"], score.get("decided_by")):
                    failures[score["metric_id"]] += 1
                else:
                    checked[score["metric_id"]] += 1
            yield record

    def audit_counts(self) -> dict[str, int]:
        return {k: self.audited[k] for k in AUDIT_FLAGS}
