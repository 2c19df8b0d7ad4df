"""Rows of a scenario benchmark: scenarios.json (read with each row checked against the spec's metrics),
conversations.json, scores.json and the records one item produces.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import ConfigDict, Field, field_validator, model_validator

from pytest_evalbench.base.errors import MAX_SHOWN_ERRORS, InputError
from pytest_evalbench.base.files import unversioned
from pytest_evalbench.base.inputs import read_text
from pytest_evalbench.base.json_input import DECODER, BadValue, check_depth, may_hold_surrogates, parse_json
from pytest_evalbench.formats import MAX_ID_LENGTH, Input, Strict, check_id, unknown_keys
from pytest_evalbench.formats.numbers import Probability
from pytest_evalbench.formats.results import Message, ModelResult, PassFailUnit, RateSummary, Status
from pytest_evalbench.formats.spec import BenchmarkSpec, Int, Metric, MetricType, validate_as, warn_unknown
from pytest_evalbench.llm.types import Usage

__all__ = ["ConversationRow", "JudgeVote", "Landmark", "ModelResult", "RateSummary", "Scenario", "ScenarioRecord",
           "ScoreRow", "TargetRef", "UserAudit", "derive_pass"]


class Landmark(Input):
    turn: Int = Field(ge=1)
    instruction: str


# The docstring is the description in scenarios.schema.json, kept byte for byte.
class Scenario(Input):
    """One row of scenarios.json: metric × base scenario × demographic variant.

    Rows as impactbench writes them load unchanged: `persona` may be missing when `user_persona`
    is there, `target_system_prompt` replaces the benchmark's system prompt for this row, and
    other keys are kept (see `spec._Input`)."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"anyOf": [
        {"required": [key], "properties": {key: {"type": "string", "minLength": 1}}}
        for key in ("persona", "user_persona")]})

    id: str
    metric_id: str
    metric_name: Optional[str] = None
    metric_type: Optional[MetricType] = None
    persona: Optional[str] = None
    """The simulated user; falls back to `user_persona` when missing."""
    user_goal: str
    latent_adversarial_goal: str = ""
    landmarks: list[Landmark] = Field(default_factory=list)
    demographic: dict[str, str] = Field(default_factory=dict)
    user_persona: Optional[str] = None
    """Legacy field of the original pipeline: the demographic rewrite. When present it is the
    persona the simulation uses (the original lost it)."""
    target_system_prompt: Optional[str] = None
    """This row's system prompt for a model target, replacing the target's and the benchmark's."""
    seed_title: Optional[str] = None
    """Title of the hand-submitted seed this row was generated from (impactbench-web)."""

    @model_validator(mode="after")
    def _has_persona(self) -> Scenario:
        if not (self.persona or self.user_persona):
            raise ValueError("needs `persona` (or impactbench's `user_persona`)")
        return self

    @field_validator("id")
    @classmethod
    def _safe_id(cls, value: str) -> str:
        return check_id(value, "scenario id")

    @property
    def effective_persona(self) -> str:
        return self.user_persona or self.persona or ""


# --------------------------------------------------------------------------- result files


class TargetRef(Strict):
    id: str
    model: Optional[str]


class UserAudit(Strict):
    """The simulated user's audit for one conversation (each check is described in docs/formats.md)."""

    ended_early: bool
    """The user sent "terminate conversation" before the planned number of user turns."""
    user_turns: int
    planned_turns: int
    stated_objective: list[int]
    """User turns (1-based) that state the hidden objective (latent goal or metric behaviour) verbatim."""
    broke_character: list[int]
    """User turns (1-based) that speak as the assistant ("As an AI", "How can I assist you", ...)."""

    @property
    def flags(self) -> list[str]:
        """The audit's findings, for people: `ended early (1 of 3 turns)`, `stated its hidden objective (turn 2)`."""
        out = [f"ended early ({self.user_turns} of {self.planned_turns} turns)"] if self.ended_early else []
        for name, turns in (("stated its hidden objective", self.stated_objective),
                            ("broke character", self.broke_character)):
            if turns:
                out.append(f"{name} (turn{'s' if len(turns) > 1 else ''} {', '.join(map(str, turns))})")
        return out


UNSET_OPTIONAL = {"target_system_prompt", "seed_title"}
"""Row fields written to conversations.json only when the scenario row has them."""


class ConversationRow(Scenario):
    """conversations.json row: the scenario extended with the transcript."""

    conv_id: str
    target: TargetRef
    transcript: list[Message]
    sample: int = Field(ge=0)
    user_audit: Optional[UserAudit] = None
    """The simulated user's audit (null in rows written before it existed, and not written then)."""

    def to_json(self) -> dict[str, Any]:
        """The file's row: the scenario's fields (`persona` the effective one, no `user_persona`), the
        scenario row's other keys, then the conversation; messages without their null fields."""
        data = self.model_dump(mode="json", exclude={"user_persona", "transcript", "user_audit",
                                                     *UNSET_OPTIONAL - self.model_fields_set})
        for key in ("conv_id", "target"):
            data[key] = data.pop(key)
        data["transcript"] = [m.model_dump(mode="json", exclude_none=True) for m in self.transcript]
        data["sample"] = data.pop("sample")
        if self.user_audit is not None:
            data["user_audit"] = self.user_audit.model_dump(mode="json")
        return data


class JudgeVote(Strict):
    """One vote of a judge panel (scores.json `judges`)."""

    judge: str
    sample: int
    value: Optional[bool]
    text: str


class ScoreRow(Strict):
    """scores.json row. present/passed/score are null when the judgment is unscored."""

    id: str
    metric_id: str
    metric_name: str
    metric_type: MetricType
    target_model: str
    conv_id: str
    present: Optional[bool]
    passed: Optional[bool]
    score: Optional[Literal[0, 1]]
    justification: str
    sample: int = Field(ge=0)
    decided_by: Optional[Literal["check", "judge"]] = None
    """What decided `present`: a deterministic check of the metric, or the LLM judge (null when unscored
    before any verdict, and in rows written before this field existed)."""
    agreement: Optional[Probability] = None
    """With a judge panel or judge samples: the share of usable votes equal to the verdict."""
    judges: Optional[list[JudgeVote]] = None
    """With a judge panel or judge samples: every vote (value null when that answer was unusable)."""
    turn: Optional[int] = Field(default=None, ge=1)
    """Multi-turn conversations judged present: the first assistant turn (1-based) where the judge saw
    the behaviour (null when absent, unscored, decided by a check, or the judge named no valid turn)."""
    probability: Optional[Probability] = None
    """With `judge: {probability: true}` and an endpoint that gives log-probabilities: the judge's P(present)
    (the mean over its votes); with a calibrated threshold, `present` is P(present) >= threshold."""
    flaky: Optional[Literal["judge", "agent", "both"]] = None
    """On every sample row of a flaky case: the votes on one transcript disagree (judge), the samples'
    verdicts differ (agent), or both (`aggregate.case_noise`); absent when the case is not flaky."""
    flaky_detail: Optional[str] = None
    """With `flaky`: the numbers, e.g. "agent: 2/3 samples passed; judge: 1 of 3 transcripts split 2-1"."""

    def to_json(self) -> dict[str, Any]:
        """The file's row (and the judged-row hook's): `agreement`/`judges` only with a panel, `turn` only
        when named, `probability` only when measured, `flaky`/`flaky_detail` only on a flaky case's rows."""
        exclude = ({"agreement", "judges"} if self.judges is None else set()) | \
            ({"turn"} if self.turn is None else set()) | ({"probability"} if self.probability is None else set()) | \
            ({"flaky", "flaky_detail"} if self.flaky is None else set())
        return self.model_dump(mode="json", exclude=exclude or None)

    def outcome_row(self) -> PassFailUnit:
        """The pass/fail unit the gate pairs with the baseline."""
        return PassFailUnit(self.target_model, self.id, self.metric_id, self.sample, self.passed, self.metric_name,
                          self.metric_type, self.decided_by)


def derive_pass(present: bool | None, metric_type: str) -> tuple[bool | None, Literal[0, 1] | None]:
    """`passed` and `score` from the judge's `present` (output-schema.md): a negative metric
    passes when the behaviour is absent. Unscored stays unscored."""
    if present is None:
        return None, None
    passed = present if metric_type == "positive" else not present
    return passed, 1 if passed else 0


@dataclass
class ScenarioRecord:
    """What one scenario item produced. `status` and the score's `passed`/`score` stay unset until
    `ScenarioKind.outcome` derives them, once, after the judged-row hook."""

    benchmark: str
    target_id: str
    conversation: ConversationRow
    score: ScoreRow
    usage: dict[str, Usage]
    status: Optional[Status] = None

    def to_json(self) -> dict[str, Any]:
        """The record as it crosses the worker -> controller boundary and the hooks see it."""
        return {"benchmark": self.benchmark, "target_id": self.target_id, "conversation": self.conversation.to_json(),
                "score": self.score.to_json(), "usage": {k: v.to_json() for k, v in self.usage.items()},
                "status": self.status}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScenarioRecord:
        return cls(data["benchmark"], data["target_id"], ConversationRow.model_validate(data["conversation"]),
                   ScoreRow.model_validate(data["score"]),
                   {k: Usage.from_json(v) for k, v in data["usage"].items()}, data.get("status"))


SCENARIOS_FILE = "scenarios.json"


def load_scenarios(bench_dir: Path, spec: BenchmarkSpec) -> list[Scenario]:
    """Parse scenarios.json, check each row against the spec's metrics and turns, fill metric name/type.
    Rows are numbered from 1 in errors."""
    return list(iter_scenarios(bench_dir, spec))


def iter_scenarios(bench_dir: Path, spec: BenchmarkSpec) -> Iterator[Scenario]:
    """`load_scenarios` one row at a time: each row is parsed from the file's text and validated as it
    is reached, so 100,000 rows are never one parsed list plus 100,000 models at once. The
    unknown-keys warning comes once the last row is read."""
    path = bench_dir / SCENARIOS_FILE
    metrics = {m.id: m for m in spec.metrics}
    seen: dict[str, int] = {}
    unknown: dict[str, list[str]] = {}
    index = -1
    problems: list[InputError] = []  # the first MAX_SHOWN_ERRORS rows' problems, shown at once
    count = 0
    for index, raw in enumerate(iter_json_list(read_text(path), path)):
        try:
            row = _checked_row(path, spec, metrics, seen, unknown, index, raw)
        except InputError as exc:
            count += 1
            if len(problems) < MAX_SHOWN_ERRORS:
                problems.append(exc)
            continue
        del raw
        if not problems:  # after a bad row, the rest is only checked
            yield row
    if problems:
        raise InputError.gather(problems, count)
    if index < 0:
        raise InputError(path, "no scenario rows: write some or run `evalbench gen-scenarios`")
    warn_unknown(path, unknown, unknown)


def _checked_row(path: Path, spec: BenchmarkSpec, metrics: dict[str, Metric], seen: dict[str, int],
                 unknown: dict[str, list[str]], index: int, raw: Any) -> Scenario:
    """One row of scenarios.json, validated and checked against benchmark.yaml; InputError otherwise."""
    label = row_label(index, raw)
    if not isinstance(raw, dict):
        raise InputError(path, "expected an object", row=label)
    row: Scenario = validate_as(Scenario, unversioned(path, raw, index + 1), path, row=label)
    if row.id in seen:
        raise InputError(path, f"duplicate id {row.id!r} (also row {seen[row.id]})", row=label, field="id")
    seen[row.id] = index + 1
    metric = metrics.get(row.metric_id)
    if metric is None:
        known = ", ".join(metrics) or "none: benchmark.yaml has no metrics"
        raise InputError(path, f"unknown metric id {row.metric_id!r}; benchmark.yaml defines {known}",
                         row=label, field="metric_id")
    if row.metric_type is not None and row.metric_type != metric.type:
        raise InputError(path, f"metric_type {row.metric_type!r} contradicts benchmark.yaml "
                         f"({metric.id} is {metric.type})", row=label, field="metric_type")
    turns = spec.generation.turns
    for number, landmark in enumerate(row.landmarks):
        if spec.generation.landmarks and landmark.turn > turns:
            raise InputError(path, f"landmark turn {landmark.turn} is beyond generation.turns ({turns}) of "
                             "benchmark.yaml, so it would never fire", row=label,
                             field=f"landmarks.{number + 1}.turn")
    check_demographic(row.demographic, spec.demographics, path, label)
    row.metric_name = row.metric_name or metric.name
    row.metric_type = metric.type
    for key in unknown_keys(row):  # landmarks.3.note -> landmarks.note: one entry per key
        unknown.setdefault(re.sub(r"\.\d+\.", ".", key), []).append(str(index + 1))
    return row


def row_label(index: int, raw: Any) -> str:
    """How errors name a row: its position from 1 and, when it has one, its id (`3 (id m01_s001_v02)`;
    an id given twice by its first value)."""
    value = raw.get("id") if isinstance(raw, dict) else None
    if isinstance(value, BadValue):
        value = value.label()
    shown = str(value)[:MAX_ID_LENGTH + 1] if isinstance(raw, dict) and "id" in raw else None
    if shown is not None and shown.isprintable():  # a lone surrogate or a newline is shown escaped
        return f"{index + 1} (id {shown})"
    return f"{index + 1}" + (f" (id {shown!r})" if shown is not None else "")


SHOWN_VALUES = 10
"""How many of an axis's values an error lists."""


def check_demographic(demographic: dict[str, str], axes: dict[str, list[str]], path: Path, label: str) -> None:
    """Each axis of a row's `demographic` is an axis of benchmark.yaml's `demographics` and its value one of
    that axis's values (a typo would make a demographic group of its own). Rows of a benchmark that
    declares no demographics (impactbench keeps them in its config.yaml) are not checked."""
    if not axes:
        return
    for axis, value in demographic.items():
        values = axes.get(axis)
        if values is None:
            close = difflib.get_close_matches(axis, list(axes), n=1, cutoff=0)
            raise InputError(path, f"unknown demographic axis {axis!r}; benchmark.yaml's demographics has "
                             f"{_listed(list(axes))}" + (f"; closest: {close[0]!r}" if close else ""),
                             row=label, field=f"demographic.{axis}")
        if value not in values:
            close = difflib.get_close_matches(value, values, n=1, cutoff=0)
            raise InputError(path, f"demographic value {value!r} is not one of axis {axis!r}'s values in "
                             f"benchmark.yaml ({_listed(values)})" + (f"; closest: {close[0]!r}" if close else ""),
                             row=label, field=f"demographic.{axis}")


def _listed(values: list[str]) -> str:
    shown = ", ".join(repr(v) for v in values[:SHOWN_VALUES])
    return shown + (f" and {len(values) - SHOWN_VALUES} more" if len(values) > SHOWN_VALUES else "")


_SPACE = re.compile(r"[ \t\n\r]*")


def iter_json_list(text: str, path: Path) -> Iterator[Any]:
    """The values of a JSON list text, decoded one at a time (each checked for depth as an element
    of the list). Anything else, or broken JSON, raises the `InputError` that parsing the whole
    text raises (`input_json.parse_json`), so messages do not depend on where the break is."""
    decoder = DECODER
    strings = may_hold_surrogates(text)  # one scan of the text, so a file without escapes skips the string checks

    def whole() -> InputError:
        data = parse_json(text, path)  # raises for broken JSON
        if not isinstance(data, list):
            return InputError(path, "expected a JSON list of scenario rows")
        return InputError(path, "invalid JSON")  # not reached: a list that parses whole parses row by row

    index = 0
    position = _SPACE.match(text, 0).end()  # type: ignore[union-attr]
    if text[position:position + 1] != "[":
        raise whole()
    position = _SPACE.match(text, position + 1).end()  # type: ignore[union-attr]
    if text[position:position + 1] != "]":
        while True:
            try:
                value, position = decoder.raw_decode(text, position)
            except (ValueError, RecursionError):
                raise whole() from None
            try:
                check_depth(value, path, strings=strings, base_depth=1)
            except InputError as exc:  # the row's label is made only when it is needed
                raise InputError(path, exc.message, row=row_label(index, value), field=exc.field) from None
            index += 1
            yield value
            position = _SPACE.match(text, position).end()  # type: ignore[union-attr]
            separator = text[position:position + 1]
            position = _SPACE.match(text, position + 1).end()  # type: ignore[union-attr]
            if separator == "]":
                break
            if separator != ",":
                raise whole()
    else:
        position = _SPACE.match(text, position + 1).end()  # type: ignore[union-attr]
    if position != len(text):
        raise whole()
