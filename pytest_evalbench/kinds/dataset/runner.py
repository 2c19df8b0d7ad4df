"""Running one dataset case: (optionally) ask the team's app, run the required Explain evals on the
evaluator concurrently, apply the deterministic tool check and the scoring policy.

Evaluator failures propagate (item ERROR); unusable evaluator answers leave that metric unscored after
bounded re-asks, which makes the case unscored, never passed.

The deterministic ToolCallAccuracy check says whether the agent called the expected tools with the
expected arguments; it is reported beside the judge's score (it does not replace it). An expected call
and an invoked call *fit* when the tool names are equal and every expected argument is present in the
invoked call with an equal value (extra invoked arguments are allowed). Expected calls are paired with
invoked ones by a maximum bipartite matching, so the report counts the most pairs any assignment can
make (a greedy pass can pair `s(q=y)` with the wrong expected call and report 0 of 2 where 1 of 2 is
right). Expected calls left over are then paired, by tool name, with invoked calls left over and
reported as argument mismatches; the rest are missing. Type policy of `values_equal` (JSON values):

- strings: equal after trimming and case-folding;
- numbers: equal by value across int and float (JSON has one number type: 1 == 1.0);
- booleans are not numbers: True never equals 1, False never equals 0;
- null equals only null; objects: same keys, values equal by this policy;
- lists: compared WITHOUT order (as multisets): tool arguments that are lists are in practice sets of
  ids, filters, tags or keywords; except for arguments named in `ORDERED_ARGUMENTS` (steps, sequences,
  paths, rankings, messages), whose order carries meaning and is compared.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel

from pytest_evalbench.formats.dataset_rows import CaseResult, MetricResult, ToolCheckResult, TrajectoryCheck
from pytest_evalbench.formats.results import ToolCall
from pytest_evalbench.kinds.dataset.answers import answer_line
from pytest_evalbench.kinds.dataset.models import DatasetCase, DatasetItem, payload_for
from pytest_evalbench.kinds.dataset.policy import ScoringPolicy, failure_message, judge_case
from pytest_evalbench.kinds.explain import EvalJudgment, run_eval
from pytest_evalbench.kinds.targets import Target
from pytest_evalbench.kinds.trajectory import ArgumentMatcher, TrajectoryResult, match_trajectory, max_matching
from pytest_evalbench.llm.engine import Engine
from pytest_evalbench.llm.types import Endpoint, Usage

TOOL_EVAL = "ToolCallAccuracyExplain"
NOT_APPLICABLE = ("not applicable: no tool call was expected and none was invoked (excluded from the composite "
                  "and the hard-fail rule)")


def tool_eval_not_applicable(case: DatasetCase, payload: dict[str, Any]) -> bool:
    """ToolCallAccuracy has nothing to judge when no tool is expected and none was invoked: a case that
    rightly needs no tool must not score 1 on it (a hard fail)."""
    return not case.expected_tool_calls and not payload.get("invokedTools")


@dataclass
class EvalResults:
    """What one case's evals produced, before the scoring policy decides the case."""

    case: DatasetCase
    by_eval: dict[str, EvalJudgment]
    not_applicable: bool
    """ToolCallAccuracy had nothing to judge (see `tool_eval_not_applicable`)."""
    tool_check: ToolCheckResult | None
    source: Literal["dataset", "target", "stored"]
    trajectory: TrajectoryResult | None = None
    """The case's `expected_trajectory` checked against the calls invoked (judge-free; decides a failure)."""


@dataclass
class DatasetRecord:
    """What one dataset item produced: its evals' results, until `DatasetKind.outcome` applies the
    scoring policy (`decide`, the one place a case's status is decided); then the
    case_results.json row it decided and the failure message."""

    benchmark: str
    usage: dict[str, Usage] = field(default_factory=dict)
    evals: EvalResults | None = None
    decided: CaseResult | None = None
    message: str = ""
    answer: str | None = None
    """A live target's answer to an answer-less case: its line of answers/<agent>.jsonl."""

    @property
    def case(self) -> CaseResult:
        """The decided row (records read back from JSON always have one)."""
        assert self.decided is not None, "DatasetKind.outcome decides the case first"
        return self.decided

    def to_json(self) -> dict[str, Any]:
        """The record as it crosses the worker -> controller boundary and the hooks see it."""
        return {"benchmark": self.benchmark, "kind": "dataset", "case": self.case.to_json(), "message": self.message,
                "status": self.case.status, "usage": {k: v.to_json() for k, v in self.usage.items()},
                **({"answer": self.answer} if self.answer is not None else {})}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DatasetRecord:
        return cls(data["benchmark"], {k: Usage.from_json(v) for k, v in data["usage"].items()},
                   decided=CaseResult.model_validate(data["case"]), message=data["message"], answer=data.get("answer"))


async def run_item(item: DatasetItem, *, benchmark: str, judges: list[Endpoint], engine: Engine,
                   target: Target | None, samples: int = 1, matchers: dict[str, ArgumentMatcher] | None = None
                   ) -> DatasetRecord:
    """(Optionally) ask the team's app, run the case's evals and the tool check; the scoring policy
    decides the case later (`decide`, from `DatasetKind.outcome`)."""
    case = item.case
    usage_by_phase: dict[str, Usage] = {}
    answer, invoked, line = None, None, None
    source: Literal["dataset", "target", "stored"] = "dataset"
    if target is None and case.model_answer is None and item.stored is None:  # loading refuses such cases
        raise ValueError(f"case {case.case_id!r} has no model_answer and no target '{case.agent_name}'")
    if target is not None:
        reply = await target.reply([{"role": "user", "content": case.question}], sample=0, usage_by_phase=usage_by_phase)
        answer, source = reply.content, "target"
        invoked = [call.model_dump(exclude_none=True) for call in reply.tool_calls]
        if case.model_answer is None:  # kept in answers/<agent>.jsonl (see answers.py)
            line = answer_line(case, answer, invoked)
    elif item.stored is not None and case.model_answer is None:
        # a live answer of an earlier run: judged exactly as it was then (same payloads)
        answer, invoked, source = item.stored.text, list(item.stored.invoked), "stored"
    evals: list[str] = list(case.required_evals)
    not_applicable = TOOL_EVAL in evals and tool_eval_not_applicable(case, payload_for(case, TOOL_EVAL, answer,
                                                                                          invoked))
    if not_applicable:
        evals.remove(TOOL_EVAL)
    outcomes = await asyncio.gather(*[
        run_eval(name, payload_for(case, name, answer, invoked), judges=judges, engine=engine, usage_by_phase=usage_by_phase,
                 samples=samples)
        for name in evals])
    by_eval: dict[str, EvalJudgment] = dict(zip(evals, outcomes))
    tool_check = None
    if TOOL_EVAL in by_eval or case.expected_tool_calls:
        check = check_tool_calls(case.expected_tool_calls, invoked if invoked is not None
                                 else case.invoked_tool_calls)
        tool_check = ToolCheckResult(ok=check.ok, matched=check.matched, expected=check.expected,
                                     summary=check.summary)
    trajectory = None
    if case.expected_trajectory is not None:
        made = invoked if invoked is not None else [c.model_dump(exclude_none=True) for c in case.invoked_tool_calls]
        expected = None if case.expected_trajectory.calls is not None else [
            ToolCall.model_validate(_call_fields(_as_dict(c))) for c in case.expected_tool_calls]
        trajectory = match_trajectory(case.expected_trajectory, [ToolCall.model_validate(_call_fields(c)) for c in made],
                                      matchers or {}, expected=expected)
    return DatasetRecord(benchmark, usage_by_phase, EvalResults(case, by_eval, not_applicable, tool_check, source,
                                                                trajectory), answer=line)


def _call_fields(call: dict[str, Any]) -> dict[str, Any]:
    """The tool call's own fields (dataset rows may carry more keys, e.g. `reason`)."""
    return {k: call[k] for k in ("tool", "arguments") if k in call}


def decide(record: DatasetRecord, policy: ScoringPolicy) -> CaseResult:
    """Apply the scoring policy to the record's eval results: the case's status, composite and
    per-eval lines (its case_results.json row) and the failure message, set on the record."""
    assert record.evals is not None, "a record read back from JSON was decided already"
    case, by_eval = record.evals.case, record.evals.by_eval
    judgement = judge_case({name: o.score for name, o in by_eval.items()}, policy, case.threshold_profile)
    metrics: list[MetricResult] = []
    for line in judgement.lines:
        outcome = by_eval[line.eval]
        metric = MetricResult(eval=line.eval, score=line.score, threshold=line.threshold, passed=line.passed,
                              explanation=outcome.explanation)
        if outcome.votes is not None:  # a panel's figures are written only with a panel
            metric.agreement, metric.votes = outcome.agreement, outcome.votes
        metrics.append(metric)
    reasons = list(judgement.reasons)
    if record.evals.not_applicable:
        threshold = policy.thresholds.get(TOOL_EVAL)  # type: ignore[call-overload]
        metrics.append(MetricResult(eval=TOOL_EVAL, score=None, threshold=threshold, passed=None,
                                    explanation=NOT_APPLICABLE, not_applicable=True))
        reasons.append(f"{TOOL_EVAL}: {NOT_APPLICABLE}")
    tool_check = record.evals.tool_check
    trajectory = record.evals.trajectory
    status = judgement.status
    if trajectory is not None and not trajectory.ok:  # a judge-free failure: no score can make up for it
        status = "failed"
        reasons.append(trajectory.summary)
    row = CaseResult(
        case_id=case.case_id, agent_name=case.agent_name, scenario_id=case.scenario_id,
        threshold_profile=judgement.profile, status=status,
        passed=None if status == "unscored" else status == "passed",
        composite=None if judgement.composite is None else round(judgement.composite, 4),
        pass_mark=judgement.pass_mark, metrics=metrics, tool_check=tool_check, reasons=reasons,
        answer_source=record.evals.source, **({"extra": dict(case.model_extra)} if case.model_extra else {}),
        trajectory=None if trajectory is None else TrajectoryCheck.model_validate(trajectory.to_json()))
    message = failure_message(judgement, {name: o.explanation for name, o in by_eval.items()})
    if record.evals.not_applicable:
        message += f"\n  {TOOL_EVAL}: {NOT_APPLICABLE}"
    if tool_check is not None:
        message += f"\ntool check: {tool_check.summary}"
    if trajectory is not None:
        message = (f"case failed: {trajectory.summary}\n" if status != judgement.status else "") + message
        message += f"\n{trajectory.summary}"
    record.decided, record.message = row, message
    return row


ORDERED_ARGUMENTS = frozenset({"steps", "sequence", "order", "path", "route", "ranking", "messages", "history"})
"""Argument names whose list value is compared in order (every other list is compared without order)."""


class ToolCheck(BaseModel):
    matched: int
    expected: int
    missing: list[str]
    unexpected: list[str]
    argument_mismatches: list[str]
    ok: bool
    summary: str


def _as_dict(call: Any) -> dict[str, Any]:
    return call.model_dump() if hasattr(call, "model_dump") else dict(call)


def values_equal(want: Any, got: Any, *, ordered: bool = False) -> bool:
    """Equality under the documented type policy (see the module docstring)."""
    if isinstance(want, bool) or isinstance(got, bool):
        return isinstance(want, bool) and isinstance(got, bool) and want == got
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return float(want) == float(got)
    if isinstance(want, str) and isinstance(got, str):
        return want.strip().casefold() == got.strip().casefold()
    if isinstance(want, dict) and isinstance(got, dict):
        return want.keys() == got.keys() and all(values_equal(v, got[k], ordered=k in ORDERED_ARGUMENTS)
                                                 for k, v in want.items())
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return False
        if ordered:
            return all(values_equal(w, g) for w, g in zip(want, got))
        return max_matching([[values_equal(w, g) for g in got] for w in want])[0] == len(want)
    return want is None and got is None


def _fits(want: dict[str, Any], got: dict[str, Any]) -> bool:
    args = got.get("arguments") or {}
    return want.get("tool") == got.get("tool") and all(
        k in args and values_equal(v, args[k], ordered=k in ORDERED_ARGUMENTS)
        for k, v in (want.get("arguments") or {}).items())


def check_tool_calls(expected: list[Any], invoked: list[Any]) -> ToolCheck:
    """Pair expected calls with invoked ones (most pairs possible), then report what is left."""
    wants = [_as_dict(c) for c in expected]
    gots = [_as_dict(c) for c in invoked]
    matched, pairs = max_matching([[_fits(w, g) for g in gots] for w in wants])
    free = [i for i in range(len(gots)) if i not in pairs.values()]
    missing, mismatches = [], []
    for i, want in enumerate(wants):
        if i in pairs:
            continue
        same_tool = next((j for j in free if gots[j].get("tool") == want["tool"]), None)
        if same_tool is None:
            missing.append(want["tool"])
            continue
        free.remove(same_tool)
        args = gots[same_tool].get("arguments") or {}
        diff = sorted(k for k, v in (want.get("arguments") or {}).items()
                      if k not in args or not values_equal(v, args[k], ordered=k in ORDERED_ARGUMENTS))
        mismatches.append(f"{want['tool']}({', '.join(diff)})")
    unexpected = [gots[j].get("tool", "?") for j in free]
    ok = not missing and not mismatches
    parts = [f"{matched}/{len(expected)} expected calls matched"]
    if missing:
        parts.append("missing " + ", ".join(missing))
    if mismatches:
        parts.append("argument mismatch " + ", ".join(mismatches))
    if unexpected:
        parts.append("also called " + ", ".join(unexpected))
    return ToolCheck(matched=matched, expected=len(expected), missing=missing, unexpected=unexpected,
                     argument_mismatches=mismatches, ok=ok, summary="; ".join(parts))
