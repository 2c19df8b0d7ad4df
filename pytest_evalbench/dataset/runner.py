"""Running one dataset case: (optionally) ask the team's app, run the required Explain evals on
the evaluator concurrently, apply the deterministic tool check and the scoring policy.

No pytest import. Evaluator failures propagate (item ERROR); unusable evaluator answers leave
that metric unscored after bounded re-asks, which makes the case unscored, never passed.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

from pytest_evalbench.dataset.answers import answer_line
from pytest_evalbench.dataset.explain import VERDICT_SCHEMA, build_messages, parse_verdict
from pytest_evalbench.dataset.models import DatasetCase, DatasetItem, payload_for
from pytest_evalbench.dataset.policy import ScoringPolicy, failure_message, judge_case
from pytest_evalbench.dataset.summary import CaseResult, MetricResult, ToolCheckResult
from pytest_evalbench.dataset.tool_check import check_tool_calls
from pytest_evalbench.llm.engine import Engine
from pytest_evalbench.llm.structured import MAX_ATTEMPTS, ask
from pytest_evalbench.llm.types import Endpoint, Usage
from pytest_evalbench.panel import median_vote, poll
from pytest_evalbench.targets import Target

TOOL_EVAL = "ToolCallAccuracyExplain"
NOT_APPLICABLE = ("not applicable: no tool call was expected and none was invoked (excluded from the composite "
                  "and the hard-fail rule)")


def tool_eval_not_applicable(case: DatasetCase, payload: dict[str, Any]) -> bool:
    """ToolCallAccuracy has nothing to judge when no tool is expected and none was invoked: a case that
    rightly needs no tool must not score 1 on it (a hard fail)."""
    return not case.expected_tool_calls and not payload.get("invokedTools")


@dataclass
class EvalOutcome:
    score: int | None
    explanation: str
    agreement: float | None = None
    votes: list[int | None] | None = None


@dataclass
class EvalResults:
    """What one case's evals produced, before the scoring policy decides the case."""

    case: DatasetCase
    by_eval: dict[str, EvalOutcome]
    not_applicable: bool
    """ToolCallAccuracy had nothing to judge (see `tool_eval_not_applicable`)."""
    tool_check: ToolCheckResult | None
    source: Literal["dataset", "target", "stored"]


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


async def run_eval(eval_name: str, payload: dict[str, Any], *, judges: list[Endpoint], engine: Engine,
                   ledger: dict[str, Usage], samples: int = 1) -> EvalOutcome:
    """One Explain eval by every judge (× samples) with bounded re-asks; the median decides; an
    unusable answer is that judge's unusable vote (all unusable: unscored, score None)."""
    messages = build_messages(eval_name, payload)

    async def ask_one(endpoint: Endpoint, sample: int) -> tuple[int | None, str]:
        verdict, reason = await ask(engine, endpoint, messages, parse_verdict,
                                    schema=(f"explain_{eval_name}", VERDICT_SCHEMA), role="judge",
                                    phase="evaluate", sample=sample, ledger=ledger,
                                    shape='{"explanation": "...", "score": <integer 1-5>}')
        if verdict is None:
            return None, f"unscored: evaluator output unusable after {MAX_ATTEMPTS} attempts: {reason}"
        return verdict.score, verdict.explanation

    panel = median_vote(await poll(judges, samples, 0, ask_one))
    votes = [v.value for v in panel.votes] if len(panel.votes) > 1 else None
    return EvalOutcome(panel.value, panel.justification, panel.agreement, votes)


async def run_case(item: DatasetItem, *, benchmark: str, judges: list[Endpoint], engine: Engine,
                   target: Target | None, samples: int = 1) -> DatasetRecord:
    """(Optionally) ask the team's app, run the case's evals and the tool check; the scoring policy
    decides the case later (`decide`, from `DatasetKind.outcome`)."""
    case = item.case
    ledger: dict[str, Usage] = {}
    answer, invoked, line = None, None, None
    source: Literal["dataset", "target", "stored"] = "dataset"
    if target is None and case.model_answer is None and item.stored is None:  # loading refuses such cases
        raise ValueError(f"case {case.case_id!r} has no model_answer and no target '{case.agent_name}'")
    if target is not None:
        reply = await target.reply([{"role": "user", "content": case.question}], sample=0, ledger=ledger)
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
        run_eval(name, payload_for(case, name, answer, invoked), judges=judges, engine=engine, ledger=ledger,
                 samples=samples)
        for name in evals])
    by_eval: dict[str, EvalOutcome] = dict(zip(evals, outcomes))
    tool_check = None
    if TOOL_EVAL in by_eval or case.expected_tool_calls:
        check = check_tool_calls(case.expected_tool_calls, invoked if invoked is not None
                                 else case.invoked_tool_calls)
        tool_check = ToolCheckResult(ok=check.ok, matched=check.matched, expected=check.expected,
                                     summary=check.summary)
    return DatasetRecord(benchmark, ledger, EvalResults(case, by_eval, not_applicable, tool_check, source),
                         answer=line)


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
    row = CaseResult(
        case_id=case.case_id, agent_name=case.agent_name, scenario_id=case.scenario_id,
        threshold_profile=judgement.profile, status=judgement.status,
        passed=None if judgement.status == "unscored" else judgement.status == "passed",
        composite=None if judgement.composite is None else round(judgement.composite, 4),
        pass_mark=judgement.pass_mark, metrics=metrics, tool_check=tool_check, reasons=reasons,
        answer_source=record.evals.source, **({"extra": dict(case.model_extra)} if case.model_extra else {}))
    message = failure_message(judgement, {name: o.explanation for name, o in by_eval.items()})
    if record.evals.not_applicable:
        message += f"\n  {TOOL_EVAL}: {NOT_APPLICABLE}"
    if tool_check is not None:
        message += f"\ntool check: {tool_check.summary}"
    record.decided, record.message = row, message
    return row
