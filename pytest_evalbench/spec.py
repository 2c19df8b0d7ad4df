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


class Metric(_Strict):
    id: str
    name: str
    type: MetricType
    definition: str
    examples: list[str] = Field(default_factory=list)
    mattersBecause: Optional[str] = None
    contributor: Optional[str] = None


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
    """One phase of a cost.json: the priced usage behind the current results."""

    phase: str
    cost: float
    input_tokens: int
    output_tokens: int
    cached_replays_counted: bool = True
    """Always true: calls replayed from the cache are counted at their price, so cost.json is what the
    results cost to produce, not what this session spent (the terminal summary shows that)."""
