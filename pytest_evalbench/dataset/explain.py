"""The nine Explain evaluators: our own judge prompts, each with a 1-5 rubric, all on one scale.

(The original put PerceivedIntelligence on 1-10 and so produced composites above 5.) Each
returns `{"explanation": ..., "score": <integer 1-5>}` through structured output; a score outside
1..5 or of the wrong type is rejected, never clamped, and the caller re-asks.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..llm.structured import parse_as, strict_schema

TRAITS: dict[str, tuple[str, list[str]]] = {
    "RelevanceExplain": (
        "how well the RESPONSE addresses the QUESTION, using the CONTEXT where it matters",
        ["off-topic or ignores the question", "touches the topic but misses the point",
         "partly answers; key parts missing or padded", "answers the question with minor gaps",
         "fully and directly answers the question, grounded in the context"]),
    "CoherenceExplain": (
        "whether the RESPONSE reads as one logical, well-ordered whole",
        ["incoherent or contradictory", "ideas barely connected", "understandable but jumpy or repetitive",
         "logical with small lapses", "clear structure, each part follows from the last"]),
    "PerceivedIntelligenceExplain": (
        "how insightful, accurate and well-reasoned the RESPONSE seems to a knowledgeable reader",
        ["wrong or nonsensical", "shallow with errors", "plausible but generic",
         "competent and mostly precise", "sharp, precise and well reasoned"]),
    "FluencyExplain": (
        "the language quality of the RESPONSE: grammar, word choice, readability",
        ["unreadable", "many errors that hinder reading", "readable with noticeable errors",
         "fluent with rare slips", "flawless and natural"]),
    "EmpathyExplain": (
        "whether the RESPONSE recognises and respects the user's situation and feelings",
        ["dismissive or hurtful", "cold, ignores the person", "neutral, neither warm nor cold",
         "considerate of the user's situation", "warm, attentive and supportive throughout"]),
    "HelpfulnessExplain": (
        "how much the RESPONSE actually helps the user make progress",
        ["useless or misleading", "little practical value", "some help, user must do much more",
         "helpful with small omissions", "complete, actionable and accurate help"]),
    "IntentResolutionExplain": (
        "whether the RESPONSE identifies and resolves what the user actually wants (see RELEVANT CONTEXT)",
        ["misreads the intent", "addresses a different need", "partly resolves the intent",
         "resolves the intent with small gaps", "fully resolves the user's intent"]),
    "ToolCallAccuracyExplain": (
        "whether the tools the agent INVOKED were the right ones from AVAILABLE TOOLS, with correct "
        "arguments, and used efficiently for the QUESTION",
        ["no tools or clearly wrong tools", "mostly wrong tools or arguments", "some right calls, some wrong or missing",
         "right tools with minor argument or efficiency issues", "exactly the needed calls with correct arguments"]),
    "TaskAdherenceExplain": (
        "whether the RESPONSE completes the task GOAL, following its required form and constraints",
        ["ignores the goal", "attempts it but mostly fails the requirements", "partly meets the goal",
         "meets the goal with minor deviations", "meets the goal and every constraint exactly"]),
}
EVAL_NAMES: tuple[str, ...] = tuple(TRAITS)
LABELS = {"input": "RESPONSE", "question": "QUESTION", "context": "CONTEXT", "relevantContext": "RELEVANT CONTEXT",
          "goal": "GOAL", "availableTools": "AVAILABLE TOOLS", "invokedTools": "INVOKED TOOLS"}


class ExplainVerdict(BaseModel):
    """What every Explain evaluator returns."""

    model_config = ConfigDict(extra="forbid", strict=True)
    explanation: str = Field(description="why this score, citing the response")
    score: int = Field(ge=1, le=5, description="integer from 1 (worst) to 5 (best)")


class UnparseableVerdict(ValueError):
    """The evaluator's answer is not a valid ExplainVerdict (bad JSON, missing key, score not 1..5)."""


def _verdict_schema() -> dict[str, Any]:
    schema = strict_schema(ExplainVerdict)
    schema["properties"]["score"]["enum"] = [1, 2, 3, 4, 5]  # enum survives strict mode where minimum does not
    return schema


VERDICT_SCHEMA = _verdict_schema()
"""The response_format schema of every Explain eval (built once)."""


def build_messages(eval_name: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
    """System + user messages for one eval over one payload."""
    trait, rubric = TRAITS[eval_name]
    scale = "\n".join(f"{i} - {text}" for i, text in enumerate(rubric, start=1))
    system = (f"You are a strict evaluator. Rate {trait} on a 1-5 scale:\n{scale}\n"
              'Return only a JSON object: {"explanation": "<2-3 sentences>", "score": <integer 1-5>}.')
    parts = []
    for key, value in payload.items():
        if key == "rag_mode":
            continue
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        parts.append(f"{LABELS.get(key, key.upper())}:\n{text}")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


def parse_verdict(text: str | None) -> ExplainVerdict:
    """Strict parse; out-of-range, fractional or non-integer scores raise UnparseableVerdict."""
    try:
        return parse_as(text, ExplainVerdict)
    except ValueError as exc:
        raise UnparseableVerdict(str(exc)) from None
