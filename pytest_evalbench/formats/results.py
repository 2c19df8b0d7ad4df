"""The typed rows the gate reads (per-target rate summaries, pass/fail units and per-eval scores), and the
transcript pieces every kind records (messages, tool calls, an app's model calls and spans).

Kinds hand these to the gate (through `KindResults`); the gate never sees a result file's JSON.
`ModelResult` (one target's rates) is the results.json entry; dataset agents are shown in that shape too.
The two row types (`PassFailUnit`, `EvalScore`) are frozen dataclasses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from pytest_evalbench.base.errors import InputError
from pytest_evalbench.base.json_input import check_depth, parse_json
from pytest_evalbench.base.numbers import TokenCount
from pytest_evalbench.base.safe_text import cut
from pytest_evalbench.formats import Strict

Status = Literal["passed", "failed", "unscored"]
"""An item's outcome, decided once by its kind (`kinds.Outcome`) and stored in the rows."""
Judged = Literal["metrics", "evals"]
"""What a kind's judge decides per item: binary metrics (present/absent) or evals scored 1..5."""


# --------------------------------------------------------------------------- transcripts


class ToolCall(Strict):
    """One tool call of a target: the tool, its arguments and what it returned."""

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    outcome: Optional[str] = None


MAX_RAW_ARGUMENTS = 2_000
"""Characters of a tool call's arguments kept as text (`_raw`) when they are not a JSON object."""


def tool_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """A tool call's arguments, whoever reported the call (a model through the chat API, an app's reply,
    an OpenTelemetry span): (arguments, problem), by one rule. Nothing, null or blank text is `{}`;
    JSON text of an object, or a mapping, is that object; anything else (text that is not JSON, JSON
    that is not an object, nesting deeper than the input limit, a number no file can hold) is
    `{"_raw": the text, cut}` with the problem in words. Text is parsed by the one JSON reader of
    input (`base.inputs.parse_json`), so arguments never nest deeper than any reader accepts."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    try:
        value = (parse_json(raw, ARGUMENTS) if isinstance(raw, str)
                 else check_depth(raw, ARGUMENTS, numbers=True) if isinstance(raw, dict) else raw)
    except InputError as exc:
        problem = f"{exc.field}: {exc.message}" if exc.field else exc.message
    else:
        if isinstance(value, dict) and all(isinstance(key, str) for key in value):
            return value, None
        problem = f"a JSON {_json_type(value)}, not an object"
    text = raw if isinstance(raw, str) else _text(raw)
    return {"_raw": cut(text, MAX_RAW_ARGUMENTS)}, problem


ARGUMENTS = Path("arguments")
"""How the one JSON reader names a tool call's arguments in a problem (they come from no file)."""


def _json_type(value: Any) -> str:
    return {list: "list", str: "text", bool: "boolean", int: "number", float: "number",
            type(None): "null"}.get(type(value), type(value).__name__)


def _text(value: Any) -> str:
    """Arguments given as objects that are not a JSON object, as text (bounded: never a deep repr)."""
    try:
        return json.dumps(check_depth(value, ARGUMENTS, numbers=True), ensure_ascii=False, default=str)
    except (InputError, ValueError, TypeError):
        return f"<{type(value).__name__}>"


class ModelCall(Strict):
    """A model call an app target made while replying, as its OpenTelemetry span reported it."""

    model: Optional[str] = None
    input_tokens: TokenCount = 0
    output_tokens: TokenCount = 0


class Span(Strict):
    """One OpenTelemetry span of an app target's reply, bounded (`kinds/tools.py`)."""

    name: str
    span_id: str
    parent_id: Optional[str] = None
    start_ms: float
    """Milliseconds after the reply's first span started."""
    duration_ms: float
    status: Literal["unset", "ok", "error"] = "unset"
    attributes: dict[str, Any] = Field(default_factory=dict)


class Message(Strict):
    role: Literal["user", "assistant"]
    content: str
    tool_calls: Optional[list[ToolCall]] = None
    model_calls: Optional[list[ModelCall]] = None
    """An app target traced with OpenTelemetry: the model calls of this reply."""
    spans: Optional[list[Span]] = None
    """An app target traced with OpenTelemetry: this reply's spans (at most `MAX_SPANS`)."""
    spans_dropped: Optional[int] = None
    """Spans of this reply beyond `MAX_SPANS`, not kept."""


class CorrectedSummary(Strict):
    """A judge-decided pass rate corrected for the judge's errors (Rogan-Gladen)."""

    pass_rate: Optional[float]
    """Rogan-Gladen corrected pass rate, clipped to [0, 1]; null when undefined."""
    ci: Optional[list[float]]
    """95% delta-method interval carrying the run's and the calibration's uncertainty, clipped to [0, 1]."""
    undefined: Optional[str]
    """Why the correction is undefined (e.g. `sensitivity + specificity ≤ 1`), else null."""
    judge_rows: int
    """Scored rows the judge decided (corrected); rows decided by checks are taken as they are."""


class RateSummary(Strict):
    # no docstring: the JSON schema of results.json (schemas/) is generated from this model
    pass_rate: Optional[float]
    n_passed: int
    n_total: int
    corrected: Optional[CorrectedSummary] = None


class PassK(Strict):
    # no docstring: the JSON schema of results.json (schemas/) is generated from this model
    k: int
    n_cases: int
    n_excluded: int
    pass_hat_k: Optional[float]
    pass_at_k: Optional[float]


class ModelResult(Strict):
    """results.json entry."""

    target_model: str
    positive_pass_rate: Optional[float]
    negative_pass_rate: Optional[float]
    n_positive: int
    n_negative: int
    n_total: int
    by_metric: dict[str, RateSummary]
    by_scenario: dict[str, RateSummary]
    corrected_positive: Optional[CorrectedSummary] = None
    """With a calibration on file: positive_pass_rate corrected for the judge's errors."""
    corrected_negative: Optional[CorrectedSummary] = None
    """With a calibration on file: negative_pass_rate corrected for the judge's errors."""
    pass_k: Optional[dict[str, PassK]] = None
    """Per metric id, with num_samples > 1: pass^k and pass@k over cases; absent otherwise."""

    @model_serializer(mode="wrap")
    def _additive(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        """`pass_k` is left out when null: an entry with one sample per case stays as it was. No return
        annotation: with one, pydantic would describe the serialised entry as that type in results.schema.json."""
        data: dict[str, Any] = handler(self)
        if data.get("pass_k") is None:
            data.pop("pass_k", None)
        return data


@dataclass(frozen=True, slots=True)
class PassFailUnit:
    """One pass/fail unit paired with the baseline, keyed `<target>|<id>|<metric_id>|<sample>`
    (target and row ids cannot contain `|`, see spec.SAFE_ID); passed None = unscored. Slotted: a run
    holds one per case to its end, and the memory bound counts them (docs/performance.md)."""

    target: str
    id: str
    metric_id: str
    sample: int
    passed: Optional[bool]
    metric_name: Optional[str] = None
    metric_type: Optional[str] = None
    decided_by: Optional[str] = None
    """`check` or `judge` (scores.json `decided_by`): only judge-decided rows are corrected."""

    @property
    def key(self) -> str:
        return f"{self.target}|{self.id}|{self.metric_id}|{self.sample}"


@dataclass(frozen=True)
class EvalScore:
    """One scored eval of one dataset case (1..5), keyed `<target>|<id>|<metric_id>`."""

    target: str
    id: str
    metric_id: str
    score: float

    @property
    def key(self) -> str:
        return f"{self.target}|{self.id}|{self.metric_id}"
