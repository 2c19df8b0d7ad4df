"""The calls one dataset case would make, planned with the real Explain prompts (no call is made).

A case with an answer (in the row, or stored from an earlier live run) is judged on exactly the
messages the run sends; a live target's answer is the cache's recorded one for that request, else
stand-in text of its expected size. Every required eval (ToolCallAccuracy only when applicable) is
asked once per panel judge and sample.
"""

from __future__ import annotations

from typing import Any

from pytest_evalbench.dataset.explain import VERDICT_SCHEMA, build_messages
from pytest_evalbench.dataset.models import DatasetItem, payload_for
from pytest_evalbench.dataset.runner import TOOL_EVAL, tool_eval_not_applicable
from pytest_evalbench.estimate import Expectations, HasRun, Plan, filler
from pytest_evalbench.panel import vote_sample
from pytest_evalbench.targets import AppTarget, ModelTarget

APP_ANSWER_TOKENS = 64


def plan_case(kind: HasRun, item: DatasetItem, expect: Expectations) -> Plan:
    """A kind's `plan_calls` (see `estimate.Estimable`)."""
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
                                       schema=(f"explain_{name}", VERDICT_SCHEMA))
                           for index in range(run.spec.judge.samples)]
    plan.chain += 1 if evals else 0
    return plan
