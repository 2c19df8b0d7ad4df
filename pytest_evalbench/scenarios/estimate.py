"""The calls one scenario item would make, planned with the real prompt builders (no call is made).

Per user turn: one simulated-user call (its system prompt, the conversation so far with roles
flipped, the turn prompt) and one target call (the target's system prompt and the conversation);
then one judge call per panel judge and judge sample, unless a deterministic check decides. Answers
not known before the run are stand-in text of the expected size (see `estimate.Expectations`); the
share of the simulated user's answer that reaches the conversation (its `Message:` line) is learned
from the cache's recorded answers, else taken as a half (an assumption).
"""

from __future__ import annotations

from typing import Any

from ..context import BenchmarkRun
from ..estimate import Expectations, Plan, PlannedCall, filler
from ..llm.types import Endpoint
from ..spec import Message
from ..targets import ModelTarget
from .judge import judge_messages
from .runner import ScenarioCase, row_target
from .simulate import parse_user_message, turn_prompt, user_system_prompt

ASSUMED_MESSAGE_SHARE = 0.5
"""Without recorded answers: the share of the simulated user's answer sent (the rest is its Thought)."""


def message_share(expect: Expectations, user: Endpoint, prompt: list[dict[str, Any]]) -> float:
    texts = [t for t in expect.recorded_texts(user, prompt) if t]
    if not texts:
        return ASSUMED_MESSAGE_SHARE
    return sum(len(parse_user_message(t)) for t in texts) / sum(len(t) for t in texts)


def plan_scenario(run: BenchmarkRun, case: ScenarioCase, expect: Expectations) -> Plan:
    scenario = case.scenario
    metric = run.spec.metric(scenario.metric_id)
    assert metric is not None  # loading checked it
    generation = run.spec.generation
    user = run.require(run.user, "user_model")
    target = row_target(run.targets[case.target_id], scenario)
    plan = Plan()
    system = user_system_prompt(scenario, metric, generation)
    history: list[dict[str, Any]] = []
    transcript: list[Message] = []
    for turn in range(1, generation.turns + 1):
        flipped = [{"role": "assistant" if m["role"] == "user" else "user", "content": m["content"]} for m in history]
        prompt = [{"role": "system", "content": system}, *flipped,
                  {"role": "user", "content": turn_prompt(turn, scenario, generation)}]
        said = _call(plan, expect, "simulated user", user, prompt)
        message = filler(round(said.tokens * message_share(expect, user, prompt)))
        history.append({"role": "user", "content": message})
        transcript.append(Message(role="user", content=message))
        if isinstance(target, ModelTarget):
            sent = [{"role": "system", "content": target.system_prompt}, *history]
            reply = _call(plan, expect, f"target {case.target_id}", target.endpoint, sent).text
        else:
            reply = filler(64)
            plan.notes.append(f"target {case.target_id} is an app: its own LLM calls are not seen by evalbench "
                              "and not estimated (its replies are taken as ~64 tokens)")
        history.append({"role": "assistant", "content": reply})
        transcript.append(Message(role="assistant", content=reply))
    plan.chain = len(plan.calls)
    checks = metric.checks
    if checks is not None and checks.otherwise != "judge":
        return plan  # the checks decide every row alone
    messages = judge_messages(metric, transcript)
    panel = run.judges()
    for judge in panel:
        role = "judge" if len(panel) == 1 else f"judge {judge.model}"
        for _ in range(run.spec.judge.samples):
            _call(plan, expect, role, judge, messages, possible=checks is not None)
    plan.chain += 1
    return plan


def _call(plan: Plan, expect: Expectations, role: str, endpoint: Endpoint, messages: list[dict[str, Any]],
          *, possible: bool = False) -> Any:
    tokens, scaled = expect.input(endpoint, messages)
    output = expect.output(endpoint, messages)
    plan.calls.append(PlannedCall(role, endpoint, tokens, output, possible=possible, scaled=scaled))
    return output
