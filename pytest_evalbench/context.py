"""The per-process run context both kinds share: engine and cache, role endpoints, targets.

The pytest layer builds one `BenchmarkRun` per process; the kind (see `kinds.py`) asks it for the
engine, the user model, the judge and the targets. Nothing here imports pytest.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .llm.cache import ResponseCache
from .llm.engine import Engine, EngineSettings
from .llm.pricing import PriceTable
from .llm.types import Endpoint
from .settings import RunSettings
from .spec import BenchmarkSpec, ModelConfig, TargetConfig
from .targets import AppTarget, ModelTarget, Target

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
CACHE_DIR = ".evalbench-cache"
"""The response cache's default directory, inside the benchmark directory."""


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


SHARDS_DIR = "shards"


def shard_dir(bench_dir: Path, shard: tuple[int, int]) -> Path:
    """benchmarks/NAME/shards/K-of-N: one CI shard's result files (combined by `evalbench merge`)."""
    return bench_dir / SHARDS_DIR / f"{shard[0]}-of-{shard[1]}"


class BenchmarkRun:
    """A loaded benchmark plus engine, endpoints and targets for this process."""

    def __init__(self, bench_dir: Path, spec: BenchmarkSpec, settings: RunSettings,
                 make_app: Callable[[TargetConfig], Any] | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.bench_dir = bench_dir
        self.spec = spec
        self.settings = settings
        self.output_dir = shard_dir(bench_dir, settings.shard) if settings.shard else bench_dir
        """Where result files go: the benchmark directory, or a shard's own directory under it."""
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
