"""Run settings, endpoint resolution and the per-case pipeline (simulate, then judge).

This is the seam between the pytest layer and the core: the plugin builds a `BenchmarkRun` once
per process and asks it for the coroutine of each selected case; nothing here imports pytest.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .judge import judge
from .llm.cache import ResponseCache
from .llm.engine import Engine, EngineSettings
from .llm.pricing import PriceTable
from .llm.types import Endpoint, Usage
from .models import BenchmarkSpec, ModelConfig, Scenario, TargetConfig, derive_pass
from .simulate import simulate
from .targets import AppTarget, ModelTarget, Target

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
CACHE_DIR = ".evalbench-cache"
"""The response cache's default directory, inside the benchmark directory."""


@dataclass
class RunSettings:
    """Everything the command line decides (resolved once, on the controller)."""

    benchmark: str
    targets: list[str] = field(default_factory=list)
    user_model: str | None = None
    judge_model: str | None = None
    base_url: str | None = None
    provider: str | None = None
    cache_mode: str = "on"
    cache_dir: Path | None = None
    engine: EngineSettings = field(default_factory=EngineSettings)


@dataclass(frozen=True)
class ScenarioCase:
    """One test item of a scenario benchmark: scenario row × target × sample."""

    scenario: Scenario
    target_id: str
    sample: int
    index: int

    @property
    def name(self) -> str:
        return f"{self.scenario.id}[{self.target_id}-s{self.sample}]"

    @property
    def conv_id(self) -> str:
        return f"{self.scenario.id}__{self.target_id}"


@dataclass
class CaseRecord:
    """What one item produced; travels from worker to controller as `to_json()`."""

    benchmark: str
    target_id: str
    conversation: dict[str, Any] | None
    score: dict[str, Any] | None
    usage: dict[str, Usage]
    status: str  # passed | failed | unscored

    def to_json(self) -> dict[str, Any]:
        return {"benchmark": self.benchmark, "target_id": self.target_id, "conversation": self.conversation,
                "score": self.score, "usage": {k: v.to_json() for k, v in self.usage.items()},
                "status": self.status}


def select_targets(spec: BenchmarkSpec, requested: list[str]) -> list[TargetConfig]:
    """`--evalbench-target` values: an existing target id selects it; `id=model` or a bare model
    name replaces the list with new targets that inherit the first target's endpoint settings."""
    if not requested:
        return list(spec.targets)
    by_id = {t.id: t for t in spec.targets}
    base = spec.targets[0] if spec.targets else None
    chosen: list[TargetConfig] = []
    for value in requested:
        if value in by_id:
            chosen.append(by_id[value])
            continue
        target_id, _, model = value.partition("=") if "=" in value else (value.replace("/", "-"), "", value)
        inherit = base.model_dump(exclude={"id", "model"}) if base else {}
        chosen.append(TargetConfig(id=target_id, model=model, **inherit))
    return chosen


def resolve_endpoint(config: ModelConfig, settings: RunSettings, env: Mapping[str, str], *,
                     model_override: str | None = None) -> Endpoint:
    """CLI > benchmark.yaml > OPENAI_BASE_URL / OPENAI_API_KEY."""
    key_source = config.api_key_env or "OPENAI_API_KEY"
    provider = settings.provider or config.provider
    return Endpoint(
        model=model_override or config.model,
        base_url=settings.base_url or config.base_url or env.get("OPENAI_BASE_URL") or None,
        provider=provider,
        params=dict(config.params),
        api_key=env.get(key_source) or None,
        key_source=key_source,
    )


def role_endpoint(config: ModelConfig | None, override: str | None, settings: RunSettings,
                  env: Mapping[str, str]) -> Endpoint | None:
    """The user model or judge: benchmark.yaml's entry, or the command line's model alone; None if neither."""
    if config is None and override is None:
        return None
    return resolve_endpoint(config or ModelConfig(model=override or ""), settings, env, model_override=override)


def open_engine(bench_dir: Path, spec: BenchmarkSpec, engine: EngineSettings, cache_mode: str,
                cache_dir: Path | None = None) -> Engine:
    """An engine with the benchmark's response cache and the spec's price overrides."""
    prices = PriceTable({m: (p.input_per_million, p.output_per_million) for m, p in spec.pricing.items()})
    return Engine(engine, ResponseCache(cache_dir or bench_dir / CACHE_DIR, cache_mode), prices)  # type: ignore[arg-type]


class BenchmarkRun:
    """A loaded benchmark plus engine, endpoints and targets for this process."""

    def __init__(self, bench_dir: Path, spec: BenchmarkSpec, settings: RunSettings,
                 make_app: Callable[[TargetConfig], Any] | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.bench_dir = bench_dir
        self.spec = spec
        self.settings = settings
        env = os.environ if env is None else env
        self.engine = open_engine(bench_dir, spec, settings.engine, settings.cache_mode, settings.cache_dir)
        self.user = role_endpoint(spec.user_model, settings.user_model, settings, env)
        self.evaluator = role_endpoint(spec.evaluator_model, settings.judge_model, settings, env)
        self.target_configs = select_targets(spec, settings.targets)
        if not self.target_configs and spec.kind == "scenarios":
            raise ConfigError(f"{bench_dir / 'benchmark.yaml'}: no targets; add a `targets:` list or pass "
                              "--evalbench-target=MODEL")
        self.targets: dict[str, Target] = {}
        for cfg in self.target_configs:
            app = make_app(cfg) if make_app else None
            if app is not None:
                self.targets[cfg.id] = AppTarget(cfg.id, app, cfg.model)
            elif cfg.model:
                self.targets[cfg.id] = ModelTarget(cfg.id, resolve_endpoint(cfg.as_model(), settings, env),
                                                   cfg.system_prompt or spec.scenario.user_context
                                                   or DEFAULT_SYSTEM_PROMPT, self.engine)
            else:
                raise ConfigError(f"{bench_dir / 'benchmark.yaml'}: target '{cfg.id}' has no `model` and no "
                                  "pytest_evalbench_make_target hook returned an app for it")

    def meta(self) -> dict[str, Any]:
        """What a baseline must match to be comparable: benchmark, models, judge."""
        return {"benchmark": self.spec.name,
                "user_model": self.user.model if self.user else None,
                "judge_model": self.evaluator.model if self.evaluator else None,
                "targets": {t.id: t.model for t in self.target_configs}}

    def require(self, endpoint: Endpoint | None, key: str) -> Endpoint:
        if endpoint is None:
            raise ConfigError(f"{self.bench_dir / 'benchmark.yaml'}: `{key}` is missing "
                              f"(or pass --evalbench-{'user' if key == 'user_model' else 'judge'}-model)")
        return endpoint

    def scenario_cases(self, scenarios: list[Scenario]) -> list[ScenarioCase]:
        """Items in a fixed order: scenario row, then target, then sample."""
        cases: list[ScenarioCase] = []
        for scenario in scenarios:
            for cfg in self.target_configs:
                for sample in range(self.spec.generation.num_samples):
                    cases.append(ScenarioCase(scenario, cfg.id, sample, len(cases)))
        return cases

    async def run_case(self, case: Any) -> Any:
        """The pipeline of one item, by benchmark kind; returns an object with `to_json()`."""
        if isinstance(case, ScenarioCase):
            return await self.run_scenario(case)
        from .dataset.runner import run_case

        return await run_case(case, benchmark=self.spec.name, policy=self.policy, engine=self.engine,
                              evaluator=self.require(self.evaluator, "evaluator_model"),
                              target=self.targets.get(case.case.agent_name))

    @functools.cached_property
    def dataset(self) -> Any:
        """The `dataset:` block of a dataset benchmark (validated once per process)."""
        from .dataset.benchmark import dataset_settings

        return dataset_settings(self.bench_dir, self.spec)

    @property
    def policy(self) -> Any:
        """The scoring policy of a dataset benchmark."""
        from .dataset.benchmark import policy_of

        return policy_of(self.dataset)

    async def run_scenario(self, case: ScenarioCase) -> CaseRecord:
        """Simulate the conversation and judge it; LLM failures propagate (item ERROR)."""
        scenario = case.scenario
        metric = self.spec.metric(scenario.metric_id)
        assert metric is not None  # loading checked it
        target = self.targets[case.target_id]
        ledger: dict[str, Usage] = {}
        transcript = await simulate(scenario, metric, self.spec.generation,
                                    user=self.require(self.user, "user_model"), target=target,
                                    engine=self.engine, sample=case.sample, ledger=ledger)
        if not any(m.role == "assistant" for m in transcript.messages):
            verdict_present, justification = None, ("unscored: the simulated user ended the conversation "
                                                    "before the target replied")
        else:
            verdict = await judge(metric, transcript.messages, evaluator=self.require(self.evaluator,
                                  "evaluator_model"), engine=self.engine, sample=case.sample, ledger=ledger)
            verdict_present, justification = verdict.present, verdict.justification
        passed, score = derive_pass(verdict_present, metric.type)
        conversation = {
            **scenario.model_dump(mode="json", exclude={"user_persona"}),
            "persona": scenario.effective_persona,
            "conv_id": case.conv_id,
            "target": {"id": case.target_id, "model": target.model},
            "transcript": [m.model_dump(mode="json", exclude_none=True) for m in transcript.messages],
            "sample": case.sample,
        }
        score_row = {
            "id": scenario.id, "metric_id": metric.id, "metric_name": metric.name, "metric_type": metric.type,
            "target_model": case.target_id, "conv_id": case.conv_id, "present": verdict_present,
            "passed": passed, "score": score, "justification": justification, "sample": case.sample,
        }
        status = "unscored" if passed is None else ("passed" if passed else "failed")
        return CaseRecord(self.spec.name, case.target_id, conversation, score_row, ledger, status)
