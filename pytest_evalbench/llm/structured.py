"""Structured output with a bounded re-ask: the one loop every JSON-answering role goes through.

The judge, the Explain evaluators and the authoring commands all ask for a JSON object through
`response_format` (a strict JSON Schema from a pydantic model), parse it leniently (fences and
<think> blocks stripped, control characters tolerated) but validate it strictly, and re-ask up to
MAX_ATTEMPTS times with the problem shown. Each attempt is its own cache entry; a chain that ends
unusable is dropped from the cache, so a rerun asks afresh instead of replaying useless answers,
while every usable answer stays cached and replays for free.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from pytest_evalbench.base.errors import field_path
from pytest_evalbench.llm.engine import Engine
from pytest_evalbench.llm.types import Endpoint, Usage, safe_json

MAX_ATTEMPTS = 3
T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
_FENCE_RE = re.compile(r"^\s*```(?:json)?\s*|\s*```\s*$", re.IGNORECASE)
_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_UNSUPPORTED_IN_STRICT = {"title", "default", "minLength", "maxLength", "minItems", "maxItems", "minimum",
                          "maximum"}


def strict_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A JSON Schema in the subset every strict structured-output provider accepts: every object
    closed and fully required; no titles, defaults, length or range keywords (some providers reject
    them with HTTP 400; pydantic still enforces them, and a violation is re-asked)."""

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        if not isinstance(node, dict):
            return node
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _UNSUPPORTED_IN_STRICT:
                continue
            if key in ("properties", "$defs"):
                out[key] = {name: walk(sub) for name, sub in value.items()}
            else:
                out[key] = walk(value)
        if out.get("type") == "object" and "properties" in out:
            out["additionalProperties"] = False
            out["required"] = list(out["properties"])
        return out

    return walk(model.model_json_schema())


def load_json(text: str | None) -> Any:
    """The JSON value in a model's answer; ValueError with a short reason."""
    text = text or ""
    if "<" in text:  # a <think> block (checked first: the regexes scan the whole answer)
        text = _THINK_RE.sub("", text)
    cleaned = (_FENCE_RE.sub("", text) if "`" in text else text).strip()
    if not cleaned:
        raise ValueError("the answer was empty")
    try:
        value = json.loads(cleaned, strict=False)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    try:
        return safe_json(value) if "\\" in cleaned else value  # only an escape makes a lone surrogate
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None


def parse_as(text: str | None, model: type[M], check: Callable[[M], None] | None = None) -> M:
    """Parse and validate one JSON answer; ValueError with a one-line reason to show the model."""
    data = load_json(text)
    try:
        answer = model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = field_path(err.get("loc", ()), data) or "answer"
        raise ValueError(f"{where}: {err.get('msg', 'invalid')}") from None
    if check is not None:
        check(answer)
    return answer


async def ask(engine: Engine, endpoint: Endpoint, messages: list[dict[str, Any]], parse: Callable[[str | None], T],
              *, schema: tuple[str, dict[str, Any]], role: str, phase: str, sample: int, usage_by_phase: dict[str, Usage],
              shape: str) -> tuple[T | None, str]:
    """(answer, "") or (None, last problem) after MAX_ATTEMPTS unusable answers.

    `shape` describes the expected JSON in the re-ask message, e.g. '{"present": true or false}'.
    """
    reason = ""
    keys: list[str] = []
    for attempt in range(MAX_ATTEMPTS):
        completion = await engine.complete(endpoint, messages, role=role, phase=phase, sample=sample,
                                           attempt=attempt, schema=schema, usage_by_phase=usage_by_phase)
        keys += [completion.key] if completion.key else []
        limit = engine.settings.max_reply_chars
        try:
            if limit and len(completion.content or "") > limit:  # bounded report and result files
                raise ValueError(f"the answer is {len(completion.content or '')} characters, over the limit of "
                                 f"{limit} (--evalbench-max-reply-chars)")
            return parse(completion.content), ""
        except ValueError as exc:
            reason = str(exc)
            messages = [*messages, {"role": "assistant", "content": (completion.content or "")[:limit or None]},
                        {"role": "user", "content": f"That answer cannot be used: {reason}. Reply again with only "
                         f"the corrected JSON object {shape}."}]
    await engine.forget(keys)
    return None, reason
