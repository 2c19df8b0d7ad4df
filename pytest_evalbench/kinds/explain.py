"""The nine Explain evaluators: our own judge prompts, each with a 1-5 rubric, all on one scale, and
`run_eval`, one eval by the judge panel. Shared: the dataset kind scores its cases with them and judge
calibration scores its labelled examples with them.

(The original put PerceivedIntelligence on 1-10 and so produced composites above 5.) Each
returns `{"explanation": ..., "score": <integer 1-5>}` through structured output; a score outside
1..5 or of the wrong type is rejected, never clamped, and the caller re-asks.

The prompt shows the question and its context before the response (the reader meets the
response knowing what it answers), tells the evaluator not to reward length, and anchors the
scale with three short examples per evaluator, written for this project, at scores 1, 3 and 5.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from pytest_evalbench.formats import StrictAnswer
from pytest_evalbench.kinds.judges import median_vote, poll
from pytest_evalbench.llm.engine import MAX_ATTEMPTS, Engine, ask, parse_as, strict_schema
from pytest_evalbench.llm.types import Endpoint, Usage

EvalName = Literal["RelevanceExplain", "CoherenceExplain", "PerceivedIntelligenceExplain", "FluencyExplain",
                   "EmpathyExplain", "HelpfulnessExplain", "IntentResolutionExplain", "ToolCallAccuracyExplain",
                   "TaskAdherenceExplain"]

# payload keys each eval needs (the dataset kind's `ROW_FIELD` names the row field each falls back to)
PAYLOAD_KEYS: dict[str, tuple[str, ...]] = {
    "RelevanceExplain": ("input", "question", "context"),
    "CoherenceExplain": ("input", "question"),
    "PerceivedIntelligenceExplain": ("input", "question", "context"),
    "FluencyExplain": ("input", "question"),
    "EmpathyExplain": ("input", "question"),
    "HelpfulnessExplain": ("input", "question"),
    "IntentResolutionExplain": ("input", "question", "relevantContext"),
    "ToolCallAccuracyExplain": ("input", "question", "availableTools", "invokedTools"),
    "TaskAdherenceExplain": ("input", "question", "goal"),
}

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

ANCHORS: dict[str, tuple[str, tuple[str, str, str]]] = {
    "RelevanceExplain": ("How do I reset my router?", (
        "Routers were invented in the 1980s and come in many brands.",
        "Resetting devices can fix many problems; check the manual of your router.",
        "Hold the reset button on the back for ten seconds until the lights blink, then log in with the "
        "default password printed on the label.")),
    "CoherenceExplain": ("Why is the sky blue?", (
        "Blue. The sun is hot, so oceans. Light is fast because blue.",
        "Sunlight scatters. The sky is blue. Also sunsets are red, and air has molecules which scatter it.",
        "Air molecules scatter short (blue) wavelengths of sunlight far more than long ones, so blue light "
        "reaches us from every direction of the sky.")),
    "PerceivedIntelligenceExplain": ("Should I pay off debt or invest?", (
        "Always invest, debt does not matter.",
        "It depends on your situation; both can be good.",
        "Compare the debt's interest rate with the return you can expect after tax: pay off debt above "
        "roughly 6-7% first, and keep an emergency fund either way.")),
    "FluencyExplain": ("Describe your weekend.", (
        "weekend me go the park good was it and dog run yes",
        "On weekend I have went to park with my dog and it were nice, we walking long.",
        "I spent Saturday morning walking my dog in the park, then read in the sun all afternoon.")),
    "EmpathyExplain": ("I failed my exam and feel terrible.", (
        "That is your fault for not studying. Next question?",
        "Exams can be retaken. Check the retake dates on the website.",
        "I'm sorry, that is a hard blow after all your work. It's normal to feel low; when you're ready, "
        "we can look at what went wrong and plan the retake together.")),
    "HelpfulnessExplain": ("How do I convert a string to an int in Python?", (
        "Python is a programming language.",
        "There is a built-in function for that; look it up in the documentation.",
        "Use int(\"42\"); wrap it in try/except ValueError if the string may not be a number.")),
    "IntentResolutionExplain": ("I need a vegetarian dinner for four tonight, under 30 minutes.", (
        "Here is a slow-roasted beef recipe that takes four hours.",
        "Try a vegetable curry; it serves two and takes about an hour.",
        "Chickpea and spinach curry for four: 25 minutes, one pan, ingredients listed below with steps.")),
    "ToolCallAccuracyExplain": ("What is the weather in Paris? (tools: get_weather, search_news)", (
        "Invoked search_news(query=\"football\") and answered from memory.",
        "Invoked get_weather(city=\"London\"), then get_weather(city=\"Paris\").",
        "Invoked get_weather(city=\"Paris\") once and answered from its result.")),
    "TaskAdherenceExplain": ("Goal: reply with JSON only, keys 'title' and 'steps'.", (
        "Sure! Here are some ideas you might like: make a plan and follow it.",
        "Here is the JSON: {\"title\": \"Plan\", \"steps\": [\"a\"]} Hope this helps!",
        "{\"title\": \"Plan\", \"steps\": [\"a\", \"b\"]}")),
}
"""Per evaluator: an example question and example responses that deserve 1, 3 and 5."""
RESPONSE_KEY = "input"
NO_LENGTH_BIAS = ("Do not reward length: a longer response scores higher only if the extra content serves the "
                  "criterion; padding, repetition and needless detail count against it.")
LABELS = {"input": "RESPONSE", "question": "QUESTION", "context": "CONTEXT", "relevantContext": "RELEVANT CONTEXT",
          "goal": "GOAL", "availableTools": "AVAILABLE TOOLS", "invokedTools": "INVOKED TOOLS"}


class ExplainAnswer(StrictAnswer):
    """What every Explain evaluator returns."""

    explanation: str = Field(description="why this score, citing the response")
    score: int = Field(ge=1, le=5, description="integer from 1 (worst) to 5 (best)")


class UnparseableAnswer(ValueError):
    """The evaluator's answer is not a valid ExplainAnswer (bad JSON, missing key, score not 1..5)."""


def _answer_schema() -> dict[str, Any]:
    schema = strict_schema(ExplainAnswer)
    schema["properties"]["score"]["enum"] = [1, 2, 3, 4, 5]  # enum survives strict mode where minimum does not
    return schema


ANSWER_SCHEMA = _answer_schema()
"""The response_format schema of every Explain eval (built once)."""


def anchors(eval_name: str) -> str:
    question, (low, mid, high) = ANCHORS[eval_name]
    return (f"Examples that anchor the scale (for calibration only; judge the real response on its own):\n"
            f"QUESTION: {question}\n"
            f"- score 1: {low}\n- score 3: {mid}\n- score 5: {high}")


def build_messages(eval_name: str, payload: dict[str, Any]) -> list[dict[str, Any]]:
    """System + user messages for one eval over one payload: question and context first, the response last."""
    trait, rubric = TRAITS[eval_name]
    scale = "\n".join(f"{i} - {text}" for i, text in enumerate(rubric, start=1))
    system = (f"You are a strict evaluator. Rate {trait} on a 1-5 scale:\n{scale}\n{NO_LENGTH_BIAS}\n\n"
              f"{anchors(eval_name)}\n\n"
              'Return only a JSON object: {"explanation": "<2-3 sentences>", "score": <integer 1-5>}.')
    parts = []
    keys = [k for k in payload if k not in ("rag_mode", RESPONSE_KEY)]
    keys += [RESPONSE_KEY] if RESPONSE_KEY in payload else []
    for key in keys:
        value = payload[key]
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        parts.append(f"{LABELS.get(key, key.upper())}:\n{text}")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


def parse_explain_answer(text: str | None) -> ExplainAnswer:
    """Strict parse; out-of-range, fractional or non-integer scores raise UnparseableAnswer."""
    try:
        return parse_as(text, ExplainAnswer)
    except ValueError as exc:
        raise UnparseableAnswer(str(exc)) from None


@dataclass
class EvalJudgment:
    score: int | None
    explanation: str
    agreement: float | None = None
    votes: list[int | None] | None = None


async def run_eval(eval_name: str, payload: dict[str, Any], *, judges: list[Endpoint], engine: Engine,
                   usage_by_phase: dict[str, Usage], samples: int = 1) -> EvalJudgment:
    """One Explain eval by every judge (× samples) with bounded re-asks; the median decides; an
    unusable answer is that judge's unusable vote (all unusable: unscored, score None)."""
    messages = build_messages(eval_name, payload)

    async def ask_one(endpoint: Endpoint, sample: int) -> tuple[int | None, str]:
        answer, reason = await ask(engine, endpoint, messages, parse_explain_answer,
                                    schema=(f"explain_{eval_name}", ANSWER_SCHEMA), role="judge",
                                    phase="evaluate", sample=sample, usage_by_phase=usage_by_phase,
                                    shape='{"explanation": "...", "score": <integer 1-5>}')
        if answer is None:
            return None, f"unscored: evaluator output unusable after {MAX_ATTEMPTS} attempts: {reason}"
        return answer.score, answer.explanation

    panel = median_vote(await poll(judges, samples, 0, ask_one))
    votes = [v.value for v in panel.votes] if len(panel.votes) > 1 else None
    return EvalJudgment(panel.value, panel.justification, panel.agreement, votes)
