"""What a scenario benchmark's files say, row by row: scenarios.json (`Scenario`), conversations.json
(`ConversationRow`) and scores.json (`ScoreRow`). Loading and checking scenarios.json against the spec
is the scenario kind's (`kinds/scenarios/models.py`); the rows are here, below the kinds, because the
protocol's results, the gate's reports and the JSON Schemas read them too.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import ConfigDict, Field, field_validator, model_validator

from pytest_evalbench.base.numbers import Probability
from pytest_evalbench.formats import Input, Strict, check_id
from pytest_evalbench.formats.results import Message, PassFailUnit
from pytest_evalbench.formats.spec import Int, MetricType

__all__ = ["UNSET_OPTIONAL", "ConversationRow", "JudgeVote", "Landmark", "Scenario", "ScoreRow", "TargetRef",
           "UserAudit"]


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

    def unit_row(self) -> PassFailUnit:
        """The pass/fail unit the gate pairs with the baseline."""
        return PassFailUnit(self.target_model, self.id, self.metric_id, self.sample, self.passed, self.metric_name,
                          self.metric_type, self.decided_by)
