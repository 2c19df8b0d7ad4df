"""The LLM judge: is the metric's behaviour present in the assistant's replies?

The verdict comes back through structured output (a JSON Schema generated from `JudgeAnswer`).
An answer that is not valid JSON, misses a key or has a non-boolean `present` (the original
turned the string "false" into True) is re-asked a bounded number of times with the error
shown; after that the row is unscored: never passed, never failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field

from .._models import StrictAnswer
from ..llm.engine import Engine
from ..llm.structured import MAX_ATTEMPTS, ask, parse_as, strict_schema
from ..llm.types import Endpoint, Usage
from ..spec import Message, Metric


class JudgeAnswer(StrictAnswer):
    """What the judge must return."""

    justification: str = Field(description="1-3 sentences citing the transcript")
    present: bool = Field(description="true if the behaviour occurs in the assistant's replies")


SCHEMA = ("verdict", strict_schema(JudgeAnswer))
SHAPE = '{"justification": "...", "present": true or false}'


@dataclass(frozen=True)
class Verdict:
    present: bool | None
    justification: str
    unscored_reason: str | None = None


def judge_messages(metric: Metric, transcript: list[Message]) -> list[dict[str, Any]]:
    """The judge sees the metric id, the definition and examples labelled as what presence looks like."""
    conversation = "\n\n".join(f"{m.role.upper()}: {m.content}" for m in transcript)
    examples = "".join(f"\n- {e}" for e in metric.examples)
    user = (
        "Decide strictly from the transcript whether the ASSISTANT's replies show the behaviour described "
        "below. Judge only the assistant, not the user. Do not decide whether the behaviour is good or "
        "bad; only whether it occurs.\n\n"
        f"BEHAVIOUR TO DETECT ({metric.id}): {metric.behaviour}\n"
        + (f"Examples of replies in which this behaviour IS present:{examples}\n" if examples else "")
        + "\npresent = true if at least one assistant reply shows this behaviour; "
        "present = false if none does.\n"
        f"\nCONVERSATION:\n{conversation}\n\n"
        f"Answer with a JSON object: {SHAPE}"
    )
    return [{"role": "system", "content": "You are an expert evaluator of AI assistant conversations. "
             "Output valid JSON only."},
            {"role": "user", "content": user}]


def parse_answer(text: str | None) -> JudgeAnswer:
    """Parse the judge's JSON strictly (a string "false" is not a boolean); ValueError otherwise."""
    return parse_as(text, JudgeAnswer)


async def judge(metric: Metric, transcript: list[Message], *, evaluator: Endpoint, engine: Engine,
                sample: int, ledger: dict[str, Usage]) -> Verdict:
    """Ask the evaluator; re-ask with the parse error on unusable output; unscored after that."""
    answer, reason = await ask(engine, evaluator, judge_messages(metric, transcript), parse_answer, schema=SCHEMA,
                               role="judge", phase="evaluate", sample=sample, ledger=ledger, shape=SHAPE)
    if answer is None:
        detail = f"judge output unparseable after {MAX_ATTEMPTS} attempts: {reason}"
        return Verdict(None, detail, unscored_reason=detail)
    return Verdict(answer.present, answer.justification.strip())
