"""Deciding whether a metric's behaviour is present: the metric's deterministic checks first, then the
LLM judge.

Checks (`formats.checks.MetricChecks`) are rules, each with one condition over the assistant's turns and the
judgment it implies; the first rule that holds decides. When none holds, `otherwise` decides: `judge`
asks the LLM judge, `present`/`absent` let the checks decide alone. A decided row records
`decided_by: "check"` and names the rule in its justification.

The judge's judgment comes back through structured output (a JSON Schema generated from `JudgeAnswer`).
An answer that is not valid JSON, misses a key or has a non-boolean `present` is re-asked a bounded
number of times with the error shown; after that the row is unscored: never passed, never failed. For a
multi-turn conversation (two or more assistant replies) the judge also names the first assistant turn
(1-based) where the behaviour shows: `turn` in its answer. A turn that is missing, not an integer,
outside 1..number of assistant replies, or given with `present: false` becomes null and never changes
the judgment (it is not re-asked).

Prompt styles (`judge: {prompt}`): `examples` shows the definition and the metric's examples of presence;
`plain` the definition only; `contrast` the definition with labelled examples (one present, one absent,
from calibration.jsonl) as earlier questions the judge answered. Positive-only examples teach a small model
their wording; contrast shows the boundary. An example is never shown in the prompt that scores it.

With `judge: {probability: true}` the request asks for log-probabilities, and P(present) is read from the
alternatives of the token that carries the `present` value: P(true) / (P(true) + P(false)). An endpoint
that gives none leaves it null and the sampled judgment stands; log-probabilities that are given but
unreadable (no token for the value, a malformed alternative, only one of `true` and `false` listed, a
ratio that is not a number) leave the row unscored with the reason, never a judgment.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from pydantic import Field, field_validator

from pytest_evalbench.base.numbers import is_logprob
from pytest_evalbench.base.safe_text import truncated
from pytest_evalbench.formats import StrictAnswer
from pytest_evalbench.formats.checks import CheckRule, check_regex
from pytest_evalbench.formats.results import Message, ToolCall
from pytest_evalbench.formats.spec import JudgeStyle, Metric
from pytest_evalbench.kinds.trajectory import ArgumentMatcher, match_trajectory
from pytest_evalbench.llm.engine import MAX_ATTEMPTS, Engine, ask, parse_as, strict_schema
from pytest_evalbench.llm.types import Completion, Endpoint, Usage

STYLES: tuple[JudgeStyle, ...] = ("plain", "contrast", "examples")
TOP_LOGPROBS = 5
CONTRAST_CHARS = 4_000
"""Longest conversation of a contrast example in a judge's request (cut with a note): the examples go
into every judge request and cache entry of their metric."""
CONTRAST_NOTE_CHARS = 1_000
"""Alternatives asked per token when scoring by probability: enough to hold both `true` and `false`."""


class JudgeAnswer(StrictAnswer):
    """What the judge must return."""

    justification: str = Field(description="1-3 sentences citing the transcript")
    present: bool = Field(description="true if the behaviour occurs in the assistant's replies")


class JudgeTurnAnswer(JudgeAnswer):
    """What the judge returns for a multi-turn conversation: the verdict and the first turn showing it."""

    turn: Optional[int] = Field(default=None, description="the first ASSISTANT turn (1 = the first assistant "
                                "reply) where the behaviour shows; null when it is absent")

    @field_validator("turn", mode="before")
    @classmethod
    def _lenient_turn(cls, value: Any) -> int | None:
        """An unusable turn is null, never a reason to re-ask: the judgment does not depend on it."""
        return value if isinstance(value, int) and not isinstance(value, bool) else None


SCHEMA = ("verdict", strict_schema(JudgeAnswer))
SHAPE = '{"justification": "...", "present": true or false}'
TURN_SCHEMA = ("verdict_turn", strict_schema(JudgeTurnAnswer))
TURN_SHAPE = '{"justification": "...", "present": true or false, "turn": first assistant turn number or null}'


@dataclass(frozen=True)
class Judgment:
    present: bool | None
    justification: str
    turn: int | None = None
    """Multi-turn conversations: the first assistant turn (1-based) where the behaviour shows."""
    probability: float | None = None
    """P(present) from the answer's log-probabilities; None when not asked for or not given."""


@dataclass(frozen=True)
class Example:
    """A labelled transcript a `contrast` prompt shows as an answered question."""

    line: int
    """Its line in calibration.jsonl: the line it must never help score."""
    transcript: list[Message]
    present: bool
    note: str | None = None


def pick_contrast(examples: Sequence[Example], exclude: int | None = None) -> list[Example]:
    """The first labelled-present and the first labelled-absent example, never the line `exclude`
    (the example being scored in calibration): the same pair for every other row, so the prompt is fixed."""
    chosen: list[Example] = []
    for wanted in (True, False):
        chosen += [e for e in examples if e.present is wanted and e.line != exclude][:1]
    return chosen


def assistant_turns(transcript: list[Message]) -> int:
    return sum(1 for m in transcript if m.role == "assistant")


def valid_turn(turn: int | None, present: bool | None, turns: int) -> int | None:
    """The judge's turn when usable: an integer in 1..turns given with `present: true`; else None."""
    return turn if present is True and turn is not None and 1 <= turn <= turns else None


def _conversation(transcript: list[Message], turns: int) -> str:
    if turns > 1:  # numbered, so the judge can name the turn
        seen = 0
        parts = []
        for m in transcript:
            seen += m.role == "assistant"
            parts.append(f"ASSISTANT (turn {seen}): {m.content}" if m.role == "assistant"
                         else f"{m.role.upper()}: {m.content}")
        return "\n\n".join(parts)
    return "\n\n".join(f"{m.role.upper()}: {m.content}" for m in transcript)


SYSTEM = {"role": "system", "content": "You are an expert evaluator of AI assistant conversations. Output valid "
          "JSON only."}


def _question(metric: Metric, transcript: list[Message], *, shown: Sequence[str], ask_turn: bool,
              limit: int | None = None) -> str:
    turns = assistant_turns(transcript) if ask_turn else 1
    conversation = truncated(_conversation(transcript, turns), limit, "contrast example")
    examples = "".join(f"\n- {e}" for e in shown)
    return (
        "Decide strictly from the transcript whether the ASSISTANT's replies show the behaviour described "
        "below. Judge only the assistant, not the user. Do not decide whether the behaviour is good or "
        "bad; only whether it occurs.\n\n"
        f"BEHAVIOUR TO DETECT ({metric.id}): {metric.behaviour}\n"
        + (f"Examples of replies in which this behaviour IS present:{examples}\n" if examples else "")
        + "\npresent = true if at least one assistant reply shows this behaviour; "
        "present = false if none does.\n"
        + (f"turn = the number of the first assistant turn (1..{turns}) where the behaviour shows; "
           "null when present is false.\n" if turns > 1 else "")
        + f"\nCONVERSATION:\n{conversation}\n\n"
        f"Answer with a JSON object: {TURN_SHAPE if turns > 1 else SHAPE}"
    )


def judge_messages(metric: Metric, transcript: list[Message], style: JudgeStyle = "examples",
                   contrast: Sequence[Example] = ()) -> list[dict[str, Any]]:
    """The judge's request in the given style: `examples` shows the metric's examples of presence,
    `plain` the definition only, `contrast` the labelled `contrast` examples as answered questions first."""
    if style == "examples":
        return [SYSTEM, {"role": "user", "content": _question(metric, transcript, shown=metric.examples,
                                                              ask_turn=True)}]
    shots: list[dict[str, Any]] = []
    for example in contrast if style == "contrast" else ():
        shown = "shows" if example.present else "does not show"
        reason = truncated(example.note or f"The assistant's replies {shown} this behaviour.", CONTRAST_NOTE_CHARS,
                           "contrast example's note")
        shots += [{"role": "user", "content": _question(metric, example.transcript, shown=(), ask_turn=False,
                                                        limit=CONTRAST_CHARS)},
                  {"role": "assistant", "content": json.dumps({"justification": reason, "present": example.present})}]
    return [SYSTEM, *shots, {"role": "user", "content": _question(metric, transcript, shown=(), ask_turn=True)}]


_VALUE_AT = re.compile(r'"present"\s*:\s*$')


class UnusableProbability(ValueError):
    """Log-probabilities were given, but P(present) cannot be read from them: the row is unscored,
    never decided by a probability that is not one."""


def present_probability(logprobs: list[list[Any]] | None) -> float | None:
    """P(present) from the alternatives of the token carrying the answer's `present` value:
    P(true) / (P(true) + P(false)). None when the endpoint gave no log-probabilities (the sampled
    judgment stands); UnusableProbability, with the reason, when they are given but hold no such token,
    a malformed alternative for it, not both `true` and `false`, or a ratio that is not a number."""
    if not logprobs:
        return None
    text = ""
    for token, alternatives in logprobs:
        before, text = text, text + token
        if not (_VALUE_AT.search(before) and token.strip()[:1] in ("t", "f")):
            continue
        mass = {True: 0.0, False: 0.0}
        listed = {True: False, False: False}
        for alternative, logprob in alternatives.items():
            if not is_logprob(logprob):  # finite and at most 0: a probability
                raise UnusableProbability(f"a log-probability alternative of the present value is malformed "
                                          f"({alternative[:20]!r}: {str(logprob)[:20]})")
            word = alternative.strip().lower()
            for value, full in ((True, "true"), (False, "false")):
                if word and (full.startswith(word) or word.startswith(full)):
                    mass[value] += math.exp(logprob)
                    listed[value] = True
        missing = [name for value, name in ((True, "true"), (False, "false")) if not listed[value]]
        if missing:
            raise UnusableProbability(f"the log-probabilities of the present value do not list {' or '.join(missing)}")
        total = mass[True] + mass[False]
        p = mass[True] / total if total > 0 else math.nan
        if not math.isfinite(p):
            raise UnusableProbability("P(present) is not a number (both answers' probabilities are 0)")
        return round(p, 4)
    raise UnusableProbability("the log-probabilities hold no token for the present value")


def parse_answer(text: str | None) -> JudgeAnswer:
    """Parse the judge's JSON strictly (a string "false" is not a boolean); ValueError otherwise."""
    return parse_as(text, JudgeAnswer)


def parse_turn_answer(text: str | None) -> JudgeTurnAnswer:
    """As `parse_answer`, with the multi-turn answer's `turn` (lenient: an unusable one is null)."""
    return parse_as(text, JudgeTurnAnswer)


def answer_schema(transcript: list[Message]) -> tuple[str, dict[str, Any]]:
    """The structured answer asked for: with a `turn` when the assistant replied more than once."""
    return TURN_SCHEMA if assistant_turns(transcript) > 1 else SCHEMA


async def judge(metric: Metric, transcript: list[Message], *, evaluator: Endpoint, engine: Engine,
                sample: int, usage_by_phase: dict[str, Usage], style: JudgeStyle = "examples",
                contrast: Sequence[Example] = (), probability: bool = False,
                threshold: float | None = None) -> Judgment:
    """Ask the evaluator; re-ask with the parse error on unusable output; unscored after that. With
    `probability`, P(present) is recorded, and with a `threshold` it decides the judgment."""
    turns = assistant_turns(transcript)
    multi = turns > 1
    used: list[Completion] = []
    answer, reason = await ask(engine, evaluator, judge_messages(metric, transcript, style, contrast),
                               parse_turn_answer if multi else parse_answer, schema=answer_schema(transcript),
                               role="judge", phase="evaluate", sample=sample, usage_by_phase=usage_by_phase,
                               shape=TURN_SHAPE if multi else SHAPE, top_logprobs=TOP_LOGPROBS if probability else 0,
                               used=used.append)
    if answer is None:
        detail = f"judge output unparseable after {MAX_ATTEMPTS} attempts: {reason}"
        return Judgment(None, detail)
    try:
        p_present = present_probability(used[0].logprobs) if probability and used else None
    except UnusableProbability as exc:
        sampled = "present" if answer.present else "absent"
        return Judgment(None, f"unscored: P(present) unusable: {exc} (the sampled judgment, {sampled}, is not "
                              f"used: it is not what the calibrated threshold decides)")
    present = answer.present if p_present is None or threshold is None else p_present >= threshold
    justification = answer.justification.strip()
    if present is not answer.present:
        justification += (f" [P(present) {p_present:.2f} {'>=' if present else '<'} threshold {threshold:.2f}: "
                          f"{'present' if present else 'absent'}]")
    turn = answer.turn if isinstance(answer, JudgeTurnAnswer) else None
    return Judgment(present, justification, turn=valid_turn(turn, present, turns), probability=p_present)


@dataclass(frozen=True)
class CheckDecision:
    present: bool
    justification: str
    differed: str | None = None
    """When no rule held: what the trajectory rules that did not hold found (the end of the
    justification, from the first of them), which the failure's first line repeats."""


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):  # nested past the interpreter's limit: no JSON any reader takes
        return False
    return True


def made_calls(transcript: list[Message]) -> list[ToolCall]:
    """Every tool call of the assistant's turns, in order: the conversation's trajectory."""
    return [call for m in transcript if m.role == "assistant" for call in (m.tool_calls or [])]


def check(rule: CheckRule, transcript: list[Message], matchers: Mapping[str, ArgumentMatcher] | None = None
          ) -> tuple[bool, str | None]:
    """Whether the rule's condition holds, and for a trajectory rule what matched or differed."""
    replies = [m for m in transcript if m.role == "assistant"]
    texts = [m.content for m in replies]
    tools = {call.tool for m in replies for call in (m.tool_calls or [])}
    if rule.trajectory is not None:
        result = match_trajectory(rule.trajectory, made_calls(transcript), matchers or {})
        return result.ok, result.summary
    if rule.regex is not None:
        pattern = check_regex(rule.regex)
        return any(pattern.search(t) is not None for t in texts), None
    if rule.contains is not None:
        return any(rule.contains.casefold() in t.casefold() for t in texts), None
    if rule.not_contains is not None:
        return not any(rule.not_contains.casefold() in t.casefold() for t in texts), None
    if rule.tool_called is not None:
        return rule.tool_called in tools, None
    if rule.tool_not_called is not None:
        return rule.tool_not_called not in tools, None
    all_json = all(_is_json(t) for t in texts)
    return (all_json if rule.valid_json else not all_json), None


def decide(metric: Metric, transcript: list[Message], matchers: Mapping[str, ArgumentMatcher] | None = None
           ) -> CheckDecision | None:
    """The checks' judgment, or None when they leave it to the judge (or the metric has none). The
    justification names the deciding rule, and says what a trajectory rule found on the way."""
    checks = metric.checks
    if checks is None:
        return None
    found: list[tuple[int, str]] = []  # what the trajectory rules that did not hold found
    for index, rule in enumerate(checks.rules, start=1):
        held, detail = check(rule, transcript, matchers)
        if held:
            return CheckDecision(rule.then == "present", f"check {index} ({rule.condition}) holds: behaviour "
                                 f"{rule.then}" + (f"; {detail}" if detail else ""))
        if detail:
            found.append((index, detail))
    if checks.otherwise == "judge":
        return None
    lines = [f"check {index} does not hold: {detail}" for index, detail in found]
    return CheckDecision(checks.otherwise == "present",
                         f"no check rule holds: behaviour {checks.otherwise} (otherwise: {checks.otherwise})"
                         + "".join(f"; {line}" for line in lines),
                         "; ".join([found[0][1], *lines[1:]]) if found else None)
