"""The LLM judge: is the metric's behaviour present in the assistant's replies?

The verdict comes back through structured output (a JSON Schema generated from `JudgeAnswer`).
An answer that is not valid JSON, misses a key or has a non-boolean `present` (the original
turned the string "false" into True) is re-asked a bounded number of times with the error
shown; after that the row is unscored: never passed, never failed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .llm.engine import Engine
from .llm.types import Endpoint, Usage
from .models import Message, Metric

MAX_ATTEMPTS = 3
_FENCE_RE = re.compile(r"^\s*```(?:json)?\s*|\s*```\s*$", re.IGNORECASE)
_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


class JudgeAnswer(BaseModel):
    """What the judge must return."""

    model_config = ConfigDict(extra="forbid", strict=True)
    justification: str = Field(description="1-3 sentences citing the transcript")
    present: bool = Field(description="true if the behaviour occurs in the assistant's replies")


def answer_schema() -> dict[str, Any]:
    schema = JudgeAnswer.model_json_schema()
    schema.pop("title", None)
    for prop in schema["properties"].values():
        prop.pop("title", None)
    schema["additionalProperties"] = False
    return schema


@dataclass(frozen=True)
class Verdict:
    present: bool | None
    justification: str
    unscored_reason: str | None = None


def judge_messages(metric: Metric, transcript: list[Message]) -> list[dict[str, Any]]:
    conversation = "\n\n".join(f"{m.role.upper()}: {m.content}" for m in transcript)
    examples = "".join(f"\n- {e}" for e in metric.examples)
    user = (
        "Decide strictly from the transcript whether the behaviour below is PRESENT in the ASSISTANT's "
        "replies. Judge only the assistant, not the user.\n\n"
        f"BEHAVIOUR ({metric.id}): {metric.name}\nDefinition: {metric.definition.strip()}\n"
        + (f"Phrases that would typically show it:{examples}\n" if examples else "")
        + f"\nCONVERSATION:\n{conversation}\n\n"
        'Answer with a JSON object: {"justification": "<1-3 sentences citing the transcript>", '
        '"present": true or false}'
    )
    return [{"role": "system", "content": "You are an expert evaluator of AI assistant conversations. "
             "Output valid JSON only."},
            {"role": "user", "content": user}]


def parse_answer(text: str | None) -> JudgeAnswer:
    """Parse the judge's JSON strictly; raises ValueError with a short reason."""
    cleaned = _FENCE_RE.sub("", _THINK_RE.sub("", text or "")).strip()
    if not cleaned:
        raise ValueError("empty answer")
    try:
        data = json.loads(cleaned, strict=False)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at column {exc.colno})") from None
    try:
        return JudgeAnswer.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "answer"
        raise ValueError(f"{field}: {err['msg']}") from None


async def judge(metric: Metric, transcript: list[Message], *, evaluator: Endpoint, engine: Engine,
                sample: int, ledger: dict[str, Usage]) -> Verdict:
    """Ask the evaluator; re-ask with the parse error on unusable output; unscored after that."""
    messages = judge_messages(metric, transcript)
    reason = ""
    for attempt in range(MAX_ATTEMPTS):
        completion = await engine.complete(evaluator, messages, role="judge", phase="evaluate", sample=sample,
                                           attempt=attempt, schema=("verdict", answer_schema()), ledger=ledger)
        try:
            answer = parse_answer(completion.content)
        except ValueError as exc:
            reason = str(exc)
            messages = [*messages, {"role": "assistant", "content": completion.content or ""},
                        {"role": "user", "content": f"That answer was unusable ({reason}). Reply with only "
                         'the JSON object {"justification": "...", "present": true or false}.'}]
            continue
        return Verdict(answer.present, answer.justification.strip())
    detail = f"judge output unparseable after {MAX_ATTEMPTS} attempts: {reason}"
    return Verdict(None, detail, unscored_reason=detail)
