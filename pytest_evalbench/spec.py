"""Pydantic models of benchmark.yaml and of the pieces both benchmark kinds share (messages,
tool calls, cost entries). Kind-specific rows live in `scenarios/models.py` and `dataset/`.

The JSON Schemas in `pytest_evalbench/schemas/` are generated from these models.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
MetricType = Literal["positive", "negative"]
DEFAULT_MAX_TOKENS = {"conversation": 2048, "judge": 1024}
"""Per-role `max_tokens` when a model's `params` set none (the original pipeline's values): the
simulated user and the targets hold conversations, the judge writes a short verdict."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --------------------------------------------------------------------------- benchmark.yaml


class ModelConfig(_Strict):
    """An OpenAI-compatible chat model: the simulated user, the judge, or a target."""

    model: str = Field(min_length=1)
    base_url: Optional[str] = None
    """Endpoint; defaults to OPENAI_BASE_URL (then the OpenAI API)."""
    api_key_env: Optional[str] = None
    """Name of the environment variable holding the key; defaults to OPENAI_API_KEY."""
    provider: Literal["openai", "local"] = "openai"
    """`local` runs the embedded llama.cpp model (the `[local]` extra) instead of an endpoint."""
    params: dict[str, Any] = Field(default_factory=dict)
    """Extra sampling parameters (temperature, max_tokens, seed, ...)."""


class TargetConfig(_Strict):
    """A system under test: a model endpoint, or the team's own app (see hookspecs)."""

    id: str
    model: Optional[str] = None
    base_url: Optional[str] = None
    api_key_env: Optional[str] = None
    provider: Literal["openai", "local"] = "openai"
    system_prompt: Optional[str] = None
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("id")
    @classmethod
    def _safe_id(cls, value: str) -> str:
        if not SAFE_ID.match(value):
            raise ValueError(f"target id {value!r} must match {SAFE_ID.pattern} (it names a directory)")
        return value

    def as_model(self) -> ModelConfig:
        """The endpoint part of a model target."""
        assert self.model is not None
        return ModelConfig(model=self.model, base_url=self.base_url, api_key_env=self.api_key_env,
                           provider=self.provider, params=self.params)


CONDITIONS = ("regex", "contains", "not_contains", "tool_called", "tool_not_called", "valid_json")


class CheckRule(_Strict):
    """One deterministic rule over the assistant's turns: when its single condition holds, it decides
    the verdict (`then`) without asking the judge."""

    regex: Optional[str] = None
    """Holds when some assistant turn matches (re.search; add (?i) for case-insensitive)."""
    contains: Optional[str] = None
    """Holds when some assistant turn contains the text (case-insensitive)."""
    not_contains: Optional[str] = None
    """Holds when no assistant turn contains the text (case-insensitive)."""
    tool_called: Optional[str] = None
    """Holds when the assistant called this tool."""
    tool_not_called: Optional[str] = None
    """Holds when the assistant never called this tool."""
    valid_json: Optional[bool] = None
    """true: holds when every assistant reply is valid JSON; false: when some reply is not."""
    then: Literal["present", "absent"]

    @model_validator(mode="after")
    def _one_condition(self) -> CheckRule:
        given = [name for name in CONDITIONS if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(f"a check rule needs exactly one of {', '.join(CONDITIONS)} (got "
                             f"{', '.join(given) or 'none'})")
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as exc:
                raise ValueError(f"regex {self.regex!r} does not compile: {exc}") from None
        return self

    @property
    def condition(self) -> str:
        name = next(n for n in CONDITIONS if getattr(self, n) is not None)
        return f"{name}: {getattr(self, name)!r}"


class MetricChecks(_Strict):
    """Deterministic checks of a metric: the first rule that holds decides; when none holds,
    `otherwise` decides (`judge`: ask the judge; `present`/`absent`: the checks alone decide)."""

    rules: list[CheckRule] = Field(min_length=1)
    otherwise: Literal["judge", "present", "absent"] = "judge"


class Metric(_Strict):
    id: str
    name: str
    type: MetricType
    definition: str
    examples: list[str] = Field(default_factory=list)
    mattersBecause: Optional[str] = None
    contributor: Optional[str] = None
    checks: Optional[MetricChecks] = None
    """Deterministic checks tried before the judge (see `scenarios/checks.py`)."""

    @property
    def behaviour(self) -> str:
        """The behaviour as the definition describes it, on one line: what the judge detects and the
        simulated user provokes or tests. The *name* is never used for that: a negative metric is named
        after the good conduct ("Avoid ...") while its definition describes the bad act."""
        return " ".join(self.definition.split())


class Generation(_Strict):
    turns: int = Field(default=6, ge=1, le=100)
    num_samples: int = Field(default=1, ge=1, le=1000)
    perfunctory: bool = False
    landmarks: bool = True
    scenarios_per_metric: int = Field(default=3, ge=1, le=100)


class ScenarioSettings(_Strict):
    user_context: Optional[str] = None
    """Default system prompt of the target model; also context for scenario generation."""


class Price(_Strict):
    input_per_million: float = Field(ge=0)
    output_per_million: float = Field(ge=0)


class GateConfig(_Strict):
    """How the session's exit status is decided (see gate.py)."""

    mode: Literal["cases", "thresholds"] = "cases"
    """cases: any FAILED case fails the build (pytest's default). thresholds: FAILED cases are
    reported, but only threshold/baseline regressions and incomplete runs fail the build."""
    case_pass_rate: float = Field(default=0.5, ge=0, le=1)
    """With num_samples > 1: the pass rate a case must reach (by its Wilson bound) to pass."""


class JudgeConfig(_Strict):
    """How far the judge is trusted: self-consistency samples and the calibration bar."""

    samples: int = Field(default=1, ge=1, le=25)
    """Judge every row this many times per judge model (self-consistency); the majority decides
    (the median for 1-5 scores). Useful with temperature > 0: identical requests give identical answers."""
    min_kappa: Optional[float] = Field(default=None, ge=-1, le=1)
    """A metric whose judge reached a lower Cohen's kappa in calibration.json is "judge unreliable":
    shown as such in the summary, and its failures cannot fail the build."""
    require_calibration: bool = False
    """With min_kappa: a metric never calibrated counts as unreliable too."""


class BenchmarkSpec(_Strict):
    """benchmark.yaml."""

    name: str
    description: str = ""
    kind: Literal["scenarios", "dataset"] = "scenarios"
    scenario: ScenarioSettings = Field(default_factory=ScenarioSettings)
    metrics: list[Metric] = Field(default_factory=list)
    generation: Generation = Field(default_factory=Generation)
    demographics: dict[str, list[str]] = Field(default_factory=dict)
    targets: list[TargetConfig] = Field(default_factory=list)
    user_model: Optional[ModelConfig] = None
    evaluator_model: Optional[ModelConfig] = None
    evaluator_models: list[ModelConfig] = Field(default_factory=list)
    """A judge panel: these judges vote with `evaluator_model` (if set); the majority decides."""
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    pricing: dict[str, Price] = Field(default_factory=dict)
    """Per-model prices overriding the built-in table."""
    thresholds: Optional[dict[str, Any]] = None
    """CI gating rules (see gating.py)."""
    gate: GateConfig = Field(default_factory=GateConfig)
    dataset: Optional[dict[str, Any]] = None
    """Dataset-case benchmarks: files and scoring policy (see dataset/)."""

    @model_validator(mode="after")
    def _unique_ids(self) -> BenchmarkSpec:
        for label, ids in (("metrics", [m.id for m in self.metrics]),
                           ("targets", [t.id for t in self.targets])):
            dupes = sorted({i for i in ids if ids.count(i) > 1})
            if dupes:
                raise ValueError(f"duplicate {label} id(s): {', '.join(dupes)}")
        return self

    def metric(self, metric_id: str) -> Metric | None:
        return next((m for m in self.metrics if m.id == metric_id), None)


# --------------------------------------------------------------------------- shared pieces


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    outcome: Optional[str] = None


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["user", "assistant"]
    content: str
    tool_calls: Optional[list[ToolCall]] = None


class PhaseCost(_Strict):
    phase: str
    cost: float
    input_tokens: int
    output_tokens: int
