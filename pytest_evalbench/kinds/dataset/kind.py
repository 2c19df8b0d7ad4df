"""`DatasetKind`: the dataset kind of the protocol in `kinds/protocol.py` (imported by the registry only
when a run is of this kind).

Its parts: the `dataset:` block of benchmark.yaml and the JSONL files it names (one test item per
`case_id`), writing this session's cases into what is on disk (case_results.json, agent_summary.json,
cost.json), and the plan of the calls one case would make (`--evalbench-estimate`: judged on exactly the
messages the run sends, a live target's answer being the cache's recorded one for that request, else
stand-in text of its expected size).

```yaml
kind: dataset
dataset:
  files: [cases.jsonl]        # JSONL files beside benchmark.yaml; one test item per case_id
  policy: {...}               # scoring policy (thresholds, profiles, hard_fail); default: the documented one
```
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Optional

from pydantic import Field, TypeAdapter, field_validator

from pytest_evalbench.base.errors import InputError
from pytest_evalbench.base.files import count_rows, dump_json, read_valid_rows, results_lock, versioned
from pytest_evalbench.formats import Strict
from pytest_evalbench.formats.dataset_rows import AgentSummary, CaseResult
from pytest_evalbench.formats.provenance import SessionStamp, StampedRows, unit_key, update_sessions
from pytest_evalbench.formats.spec import NAME_RE, SPEC_FILE, BenchmarkSpec, validate_as
from pytest_evalbench.kinds.dataset.answers import stored_answer, write_answers
from pytest_evalbench.kinds.dataset.models import DatasetError, DatasetItem, StoredAnswer, load_cases, payload_for
from pytest_evalbench.kinds.dataset.policy import DOCUMENTED_POLICY, ScoringPolicy
from pytest_evalbench.kinds.dataset.runner import TOOL_EVAL, DatasetRecord, decide, run_item, tool_eval_not_applicable
from pytest_evalbench.kinds.dataset.summary import agent_table, as_target_results, summarize_agents
from pytest_evalbench.kinds.estimate import Expectations, HasRun, Plan, filler
from pytest_evalbench.kinds.explain import ANSWER_SCHEMA, EVAL_NAMES, build_messages
from pytest_evalbench.kinds.judges import agreement_lines, judge_name, reliability_lines, unreliable_judges, vote_sample
from pytest_evalbench.kinds.protocol import BenchmarkKind, JSONRecord, Judged, JudgedRowHook, KindResults, Outcome
from pytest_evalbench.kinds.run import BenchmarkRun
from pytest_evalbench.kinds.targets import AppTarget, ModelTarget
from pytest_evalbench.kinds.trajectory import ArgumentMatcher, matcher_problem
from pytest_evalbench.llm.costs import USAGE_FILE, read_usage, update_cost_file, usage_totals

CASE_METRIC = "pass_rate"


class DatasetKind:
    """The dataset kind of the protocol in `kinds/protocol.py`."""

    roles = ("evaluator_model",)
    judged: ClassVar[Judged] = "evals"
    thresholds_name_targets: ClassVar[bool] = False
    generated_from_metrics: ClassVar[bool] = False
    record_ids: ClassVar[tuple[tuple[str, ...], ...]] = (("case", "case_id"),)
    record_same_ids: ClassVar[tuple[tuple[tuple[str, ...], ...], ...]] = ()

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

    def load_items(self) -> dict[Path, list[DatasetItem]]:
        items = self._load_items()
        check_answerable(items, set(self.run.targets))
        check_matchers(items, self.run.matchers)
        return dict(items)

    def _load_items(self) -> dict[Path, list[DatasetItem]]:
        """Every case of the data files, stored answers applied, and their order. Whether each can be
        answered is `load_items`' question: writing results (a merge of shards) only needs the order."""
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

    def expect_cases(self, cases: Iterable[Any]) -> None:
        """Cases of this kind never wait for each other."""

    async def run_item(self, case: DatasetItem) -> DatasetRecord:
        run = self.run
        return await run_item(case, benchmark=run.spec.name, engine=run.engine, judges=run.judges(),
                              samples=run.spec.judge.samples, target=run.targets.get(case.case.agent_name),
                              matchers=run.matchers)

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
        """The scored evals of a case whose judge is unreliable: its judgment rests on them."""
        return [m.eval for m in case.metrics if m.score is not None and m.eval in self.unreliable]

    def outcome(self, record: DatasetRecord, judged_row: JudgedRowHook | None) -> Outcome:
        """The scoring policy decides the case here, once (`runner.decide`); no hook runs for dataset cases."""
        case = decide(record, self.policy)
        properties: list[tuple[str, object]] = [("evalbench_composite", case.composite)]
        doubtful = self.unreliable_in(case) if case.status == "failed" else []
        # the tool-call check alone failed a case whose evals all passed: a deterministic decision
        by_check = (case.tool_check is not None and not case.tool_check.ok
                    and all(m.passed is not False for m in case.metrics))
        decided_by = "check" if by_check else "judge"
        if doubtful:
            why = "; ".join(f"{name}: {self.unreliable[name]}" for name in doubtful)
            return Outcome("failed", f"{record.message}\njudge unreliable ({why}): this failure cannot fail "
                           "the build", properties, convicts=False, decided_by=decided_by)
        return Outcome(case.status, record.message, properties, decided_by=decided_by)

    def plan_calls(self, item: DatasetItem, expect: Expectations) -> Plan:
        return plan_case(self, item, expect)

    def write_results(self, data: Iterable[JSONRecord]) -> KindResults:
        """One pass over the records (they may stream from disk), counting agreement and unreliable
        failures on the way to the store."""
        records = (self.record_from_json(d) for d in data)
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
            # a failed case whose judgment rests on an unreliable judge is shown, never counted against the build
            lines += reliability_lines(self.unreliable, dict(failures))
            # every case whose judgment rests on an unreliable judge leaves the gate's numbers
            gated_rows = [row for row in gated_rows if not self.unreliable_in(row)]
        gated = summarize_agents(gated_rows)
        return KindResults(results=[a.to_json() for a in summary], rates=as_target_results(gated),
                           table=agent_table(shown), units=[r.unit_row(CASE_METRIC) for r in gated_rows],
                           eval_scores=[s for r in gated_rows for s in r.eval_scores()], dropped=dropped,
                           judge_lines=lines, cases=rows, agents=summary, view="cases", unreliable=dict(self.unreliable),
                           files=[out / name for name in (CASE_RESULTS, AGENT_SUMMARY, "cost.json")] + answer_files,
                           measured=measured, sessions=StampedRows(out))


def _conforms(run: BenchmarkRun) -> BenchmarkKind[DatasetRecord, DatasetItem]:
    """For mypy: the kind is the boundary's protocol with its own case and record types."""
    return DatasetKind(run)


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
        usage = {k: v for k, v in read_usage(bench_dir / USAGE_FILE).items() if k in order}
        measured: set[str] = set()
        for record in records:
            measured.add(record.case.case_id)
            rows[record.case.case_id] = record.case.to_json()
            usage[record.case.case_id] = {k: v.to_json() for k, v in record.usage.items()}
        merged = sorted(rows.values(), key=lambda r: order[r["case_id"]])
        cases = TypeAdapter(list[CaseResult]).validate_python(merged)
        summary = summarize_agents(cases)
        dump_json(bench_dir / CASE_RESULTS, [versioned(r) for r in merged], root)
        dump_json(bench_dir / AGENT_SUMMARY, [versioned(a.to_json()) for a in summary], root)
        dump_json(bench_dir / USAGE_FILE, versioned(dict(sorted(usage.items()))), root)
        update_cost_file(bench_dir / "cost.json", usage_totals(usage), root)
        update_sessions(bench_dir, [unit_key(r.agent_name, r.case_id) for r in cases if r.case_id in measured],
                        {unit_key(r.agent_name, r.case_id) for r in cases}, stamp, root)
    stale = sum(1 for r in old if r.get("case_id") not in order)
    return cases, summary, count_rows(stale, f"cases no longer in the data files, from {CASE_RESULTS}")


APP_ANSWER_TOKENS = 64


def plan_case(kind: HasRun, item: DatasetItem, expect: Expectations) -> Plan:
    """The calls one dataset case would make (see `BenchmarkKind.plan_calls`)."""
    run = kind.run
    case = item.case
    plan = Plan()
    target = run.targets.get(case.agent_name)
    answer: str | None = None
    invoked: list[dict[str, Any]] | None = None
    if isinstance(target, ModelTarget):
        sent = [{"role": "system", "content": target.system_prompt}, {"role": "user", "content": case.question}]
        call = expect.call(f"target {case.agent_name}", target.endpoint, sent, sample=0)
        plan.calls.append(call)
        answer, invoked = call.output.text, []
        plan.chain += 1
    elif isinstance(target, AppTarget):
        answer, invoked = filler(APP_ANSWER_TOKENS), []
        plan.notes.append(f"target {case.agent_name} is an app: its own LLM calls are not seen by evalbench and "
                          f"not estimated (its answers are taken as ~{APP_ANSWER_TOKENS} tokens)")
    elif item.stored is not None and case.model_answer is None:
        answer, invoked = item.stored.text, list(item.stored.invoked)
    evals = list(case.required_evals)
    if TOOL_EVAL in evals and tool_eval_not_applicable(case, payload_for(case, TOOL_EVAL, answer, invoked)):
        evals.remove(TOOL_EVAL)
    panel = run.judges()
    for name in evals:
        messages = build_messages(name, payload_for(case, name, answer, invoked))
        for judge in panel:
            role = "judge" if len(panel) == 1 else f"judge {judge.model}"
            plan.calls += [expect.call(role, judge, messages, sample=vote_sample(0, index),
                                       schema=(f"explain_{name}", ANSWER_SCHEMA))
                           for index in range(run.spec.judge.samples)]
    plan.chain += 1 if evals else 0
    return plan


class DatasetSettings(Strict):
    files: list[str] = Field(min_length=1)
    policy: Optional[ScoringPolicy] = None

    @field_validator("files")
    @classmethod
    def _plain_names(cls, files: list[str]) -> list[str]:
        for name in files:
            if not NAME_RE.fullmatch(name) or not name.endswith(".jsonl"):
                raise ValueError(f"{name[:100]!r} must be a .jsonl file name beside benchmark.yaml (no paths)")
        return files


def dataset_settings(bench_dir: Path, spec: BenchmarkSpec) -> DatasetSettings:
    if spec.dataset is None:
        raise InputError(bench_dir / SPEC_FILE, "kind: dataset needs a `dataset:` block with `files:`",
                         field="dataset")
    settings: DatasetSettings = validate_as(DatasetSettings, spec.dataset, bench_dir / SPEC_FILE, row="dataset")
    return settings


def policy_of(settings: DatasetSettings) -> ScoringPolicy:
    return settings.policy or DOCUMENTED_POLICY


def dataset_files(bench_dir: Path, settings: DatasetSettings) -> list[Path]:
    return [bench_dir / name for name in settings.files]


def load_items(path: Path, policy: ScoringPolicy, start: int = 0) -> list[DatasetItem]:
    """Items of one JSONL file; a case naming an unknown profile is an error of that line."""
    try:
        cases = load_cases(path)
    except DatasetError as exc:
        raise exc.as_input_error() from None
    items: list[DatasetItem] = []
    for line, case in cases:
        if case.threshold_profile not in policy.profiles:
            raise InputError(path, f"unknown threshold_profile {case.threshold_profile!r}; the policy defines "
                             f"{', '.join(sorted(policy.profiles))}", row=line, field="threshold_profile")
        items.append(DatasetItem(case, path, line, start + len(items)))
    return items


def check_unique(items_by_file: dict[Path, list[DatasetItem]]) -> None:
    seen: dict[str, Any] = {}
    for path, items in items_by_file.items():
        for item in items:
            if item.name in seen:
                raise InputError(path, f"duplicate case_id {item.name!r} (also in {seen[item.name]})",
                                 row=item.line, field="case_id")
            seen[item.name] = f"{path.name}:{item.line}"


def check_answerable(items_by_file: dict[Path, list[DatasetItem]], targets: set[str]) -> None:
    """A case without a stored answer needs a target named like its agent to answer it (or the
    answer of an earlier run in answers/<agent>.jsonl, see answers.py)."""
    for path, items in items_by_file.items():
        for item in items:
            case = item.case
            if case.model_answer is None and case.agent_name not in targets and item.stored is None:
                raise InputError(path, f"case {case.case_id!r} has no model_answer and no target answers for agent "
                                 f"{case.agent_name!r}: pass --evalbench-target={case.agent_name}=MODEL or add a "
                                 f"target with id {case.agent_name!r} (a model, or an app from the "
                                 "pytest_evalbench_make_target hook)", row=item.line, field="model_answer")


def check_matchers(items_by_file: dict[Path, list[DatasetItem]], matchers: Mapping[str, ArgumentMatcher]) -> None:
    """Every argument matcher a case's `expected_trajectory` names is built in or supplied by the hook."""
    for path, items in items_by_file.items():
        for item in items:
            trajectory = item.case.expected_trajectory
            problem = None if trajectory is None else matcher_problem(trajectory, matchers)
            if problem is not None:
                raise InputError(path, problem, row=item.line, field="expected_trajectory")
