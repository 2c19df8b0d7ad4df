"""The calls one scenario item would make, planned with the real prompt builders (no call is made).

Per user turn: one simulated-user call (its system prompt, the conversation so far with roles
flipped, the turn prompt) and one target call (the target's system prompt and the conversation);
then one judge call per panel judge and judge sample, unless a deterministic check decides. While
the cache holds the answer to the exact request, the plan follows it as the run would replay it
(so a fully recorded conversation is planned exactly, and its checks are applied to it); from the
first request it does not hold, answers are stand-in text of the expected size (see
`estimate.Expectations`), the share of the simulated user's answer that reaches the conversation
(its `Message:` line) learned from the cache's recorded answers, else taken as a half (an
assumption), and a judge call a check may spare is counted as possible (an upper bound).
"""

from __future__ import annotations

from typing import Any

from pytest_evalbench.formats.results import Message
from pytest_evalbench.kinds.estimate import Expectations, HasRun, Plan, filler
from pytest_evalbench.kinds.judges import vote_sample
from pytest_evalbench.kinds.labels import JudgeSetup
from pytest_evalbench.kinds.metric_judge import TOP_LOGPROBS, answer_schema, decide, judge_messages
from pytest_evalbench.kinds.scenarios.runner import (
    TERMINATE,
    ScenarioItem,
    parse_user_message,
    perfunctory,
    row_target,
    turn_prompt,
    user_system_prompt,
)
from pytest_evalbench.kinds.targets import ModelTarget
from pytest_evalbench.llm.types import Endpoint

ASSUMED_MESSAGE_SHARE = 0.5
"""Without recorded answers: the share of the simulated user's answer sent (the rest is its Thought)."""
APP_REPLY_TOKENS = 64
"""An app target's reply, as assumed in the conversation's size (its own calls are not seen)."""


def message_share(expect: Expectations, user: Endpoint, prompt: list[dict[str, Any]]) -> float:
    texts = [t for t in expect.recorded_texts(user, prompt) if t]
    if not texts:
        return ASSUMED_MESSAGE_SHARE
    return sum(len(parse_user_message(t)) for t in texts) / sum(len(t) for t in texts)


def plan_scenario(kind: HasRun, case: ScenarioItem, expect: Expectations, setup: JudgeSetup) -> Plan:
    """The calls one scenario item would make (see `BenchmarkKind.plan_calls`); `setup` is what the
    run's judge is handed (its contrast examples)."""
    run = kind.run
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
    known = True
    """Every answer so far is the one the cache holds (the conversation is the one the run replays)."""
    for turn in range(1, generation.turns + 1):
        flipped = [{"role": "assistant" if m["role"] == "user" else "user", "content": m["content"]} for m in history]
        prompt = [{"role": "system", "content": system}, *flipped,
                  {"role": "user", "content": turn_prompt(turn, scenario, generation)}]
        said = expect.call("simulated user", user, prompt, sample=case.sample)
        plan.calls.append(said)
        message = parse_user_message(said.output.text) if said.cached else ""
        known = known and said.cached and bool(message)
        if known and message.lower().startswith(TERMINATE) and transcript:
            break  # the recorded user ends the conversation here
        if known:
            message = perfunctory(message, f"{scenario.id}|{case.sample}|{turn}") if generation.perfunctory else message
        else:
            message = filler(round(said.output.tokens * message_share(expect, user, prompt)))
        history.append({"role": "user", "content": message})
        transcript.append(Message(role="user", content=message))
        if isinstance(target, ModelTarget):
            sent = [{"role": "system", "content": target.system_prompt}, *history]
            replied = expect.call(f"target {case.target_id}", target.endpoint, sent, sample=case.sample)
            plan.calls.append(replied)
            reply = replied.output.text
            known = known and replied.cached
        else:
            reply, known = filler(APP_REPLY_TOKENS), False
            plan.notes.append(f"target {case.target_id} is an app: its own LLM calls are not seen by evalbench "
                              f"and not estimated (its replies are taken as ~{APP_REPLY_TOKENS} tokens)")
        history.append({"role": "assistant", "content": reply})
        transcript.append(Message(role="assistant", content=reply))
    plan.chain = len(plan.calls)
    checks = metric.checks
    if checks is not None and (checks.otherwise != "judge" or (known and decide(metric, transcript) is not None)):
        return plan  # the checks decide (on the recorded conversation, or every row whatever it says)
    # the run's own judge request: the metric's prompt style, its contrast examples, log-probabilities
    messages = judge_messages(metric, transcript, run.spec.judge_style(metric),
                              setup.contrast.get(metric.id, ()))
    top_logprobs = TOP_LOGPROBS if run.spec.judge.probability else 0
    panel = run.judges()
    for judge in panel:
        role = "judge" if len(panel) == 1 else f"judge {judge.model}"
        for index in range(run.spec.judge.samples):
            plan.calls.append(expect.call(role, judge, messages, sample=vote_sample(case.sample, index),
                                          schema=answer_schema(transcript), possible=checks is not None and not known,
                                          top_logprobs=top_logprobs))
    plan.chain += 1
    return plan
