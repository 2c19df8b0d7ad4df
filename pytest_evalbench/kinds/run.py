"""The per-process run context every kind shares: the settings the command line decides, the engine and
its cache, the role endpoints and the targets.

The pytest layer resolves its options into one `RunSettings` (the command line shares it) and builds
one `BenchmarkRun` per process; the kind asks it for the engine, the user model, the judge and the
targets, and calls `preflight` before the first call.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_evalbench.base import __version__
from pytest_evalbench.base.errors import ConfigError, InputError, LLMError
from pytest_evalbench.base.safe_text import SECRETS, check_base_url, header_problem
from pytest_evalbench.formats import MAX_ID_LENGTH, check_id
from pytest_evalbench.formats.provenance import SessionStamp
from pytest_evalbench.formats.spec import (
    DEFAULT_MAX_TOKENS,
    SPEC_FILE,
    BenchmarkSpec,
    ModelConfig,
    TargetConfig,
    ThresholdRules,
    judge_prompt_style,
    resolve_env,
)
from pytest_evalbench.kinds.targets import AppTarget, ModelTarget, Target
from pytest_evalbench.kinds.tools import McpConnection, ToolBox, ToolServerError, message_bound
from pytest_evalbench.kinds.trajectory import ArgumentMatcher, matcher_problem
from pytest_evalbench.llm.cache import ResponseCache
from pytest_evalbench.llm.costs import PriceTable, Rates
from pytest_evalbench.llm.engine import Engine
from pytest_evalbench.llm.types import Endpoint, EngineSettings

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
ROLE_OPTIONS = {"user_model": "--evalbench-user-model", "evaluator_model": "--evalbench-judge-model"}
"""The command-line option that supplies each role when benchmark.yaml has none."""
CACHE_DIR = ".evalbench-cache"
"""The response cache's default directory, inside the benchmark directory."""


def select_targets(spec: BenchmarkSpec, requested: list[str]) -> list[TargetConfig]:
    """`--evalbench-target` values: an existing target id selects it; `id=model` or a bare model
    name replaces the list with new targets that inherit the first target's endpoint settings.
    A value whose id is not safe as a file name is a ConfigError (see `parse_target_option`)."""
    if not requested:
        return list(spec.targets)
    by_id = {t.id: t for t in spec.targets}
    base = spec.targets[0] if spec.targets else None
    chosen: list[TargetConfig] = []
    for value in requested:
        if value in by_id:
            chosen.append(by_id[value])
            continue
        target_id, model = parse_target_option(value)
        inherit = base.model_dump(exclude={"id", "model"}) if base else {}
        chosen.append(TargetConfig(id=target_id, model=model, **inherit))
    return chosen


def parse_target_option(value: str) -> tuple[str, str]:
    """(target id, model) of an `--evalbench-target` value `ID=MODEL` or `MODEL` (whose id is the
    model name with other characters than letters, digits, '.', '_', '-' replaced by '-');
    ConfigError if unusable."""
    target_id, _, model = value.partition("=") if "=" in value else (re.sub(r"[^A-Za-z0-9._-]", "-", value), "", value)
    try:
        check_id(target_id, "target id")
    except ValueError as exc:
        raise ConfigError(f"--evalbench-target={value[:MAX_ID_LENGTH]!r}: {exc}") from None
    if not model.strip():
        raise ConfigError(f"--evalbench-target={value!r}: no model after '='")
    return target_id, model


def resolve_endpoint(config: ModelConfig, settings: RunSettings, env: Mapping[str, str], *,
                     model_override: str | None = None, max_tokens: int | None = None) -> Endpoint:
    """CLI > benchmark.yaml > OPENAI_BASE_URL / OPENAI_API_KEY; `max_tokens` is the role's default,
    which the config's `params` override. Unset variables the endpoint needs (an explicit
    `api_key_env`, header `{env: NAME}` values, OPENAI_API_KEY for the OpenAI API itself) are listed
    in `missing_env` for the preflight; nothing is sent with a placeholder."""
    key_source = config.api_key_env or "OPENAI_API_KEY"
    provider = settings.provider or config.provider
    base_url = settings.base_url or config.base_url or env.get("OPENAI_BASE_URL") or None
    problems: list[str] = []  # keys and header values are never quoted: they may be secrets
    if base_url is not None and not (settings.base_url or config.base_url):
        try:
            check_base_url(base_url)
        except ValueError as exc:
            problems.append(f"OPENAI_BASE_URL: {exc}")
    headers = resolve_env(config.headers, env, headers=True)
    missing = list(headers.missing)
    api_key = env.get(key_source) or None
    problem = header_problem(api_key) if api_key else None
    if problem is not None:
        problems.append(f"environment variable {key_source} {problem}, so it cannot be sent in an HTTP header")
    problems += headers.problems
    if api_key is None and (config.api_key_env or base_url is None):
        missing.insert(0, key_source)
    register_secrets(env, api_key, [base_url, config.base_url, settings.base_url], headers.values, headers.from_env)
    return Endpoint(
        model=model_override or config.model,
        base_url=base_url,
        provider=provider,
        params={**({"max_tokens": max_tokens} if max_tokens else {}), **config.params},
        api_key=api_key,
        key_source=key_source,
        headers=headers.values,
        missing_env=tuple(missing) if provider != "local" else (),
        batch=config.batch,
        env_problems=tuple(problems) if provider != "local" else (),
        cache_prompt=config.cache_prompt,
    )


def register_secrets(env: Mapping[str, str], api_key: str | None, urls: list[str | None],
                     headers: Mapping[str, str], env_headers: Iterable[str]) -> None:
    """Tell the run's redaction what this role sends: its key, URL credentials and secret headers.
    Every process resolves the same endpoints from the same files and environment, so xdist
    workers register exactly what the controller does."""
    SECRETS.add_environment(env)
    SECRETS.add(api_key)
    for url in urls:
        SECRETS.add_url(url)
    SECRETS.add_headers(headers, env_headers)


def role_endpoint(config: ModelConfig | None, override: str | None, settings: RunSettings,
                  env: Mapping[str, str], *, max_tokens: int | None = None) -> Endpoint | None:
    """The user model or judge: benchmark.yaml's entry, or the command line's model alone; None if neither."""
    if config is None and override is None:
        return None
    return resolve_endpoint(config or ModelConfig(model=override or ""), settings, env, model_override=override,
                            max_tokens=max_tokens)


def open_engine(bench_dir: Path, spec: BenchmarkSpec, engine: EngineSettings, cache_mode: str,
                cache_dir: Path | None = None) -> Engine:
    """An engine with the benchmark's response cache and the spec's price overrides."""
    prices = PriceTable({m: Rates(p.input_per_million, p.output_per_million, p.cached_input_per_million,
                                     p.cache_write_per_million, p.batch, p.flex) for m, p in spec.pricing.items()})
    return Engine(engine, ResponseCache(cache_dir or bench_dir / CACHE_DIR, cache_mode), prices)  # type: ignore[arg-type]


SHARDS_DIR = "shards"


def shard_dir(bench_dir: Path, shard: tuple[int, int]) -> Path:
    """benchmarks/NAME/shards/K-of-N: one CI shard's result files (combined by `evalbench merge`)."""
    return bench_dir / SHARDS_DIR / f"{shard[0]}-of-{shard[1]}"


class BenchmarkRun:
    """A loaded benchmark plus engine, endpoints and targets for this process."""

    def __init__(self, bench_dir: Path, spec: BenchmarkSpec, settings: RunSettings,
                 make_app: Callable[[TargetConfig], Any] | None = None,
                 env: Mapping[str, str] | None = None, matchers: Mapping[str, ArgumentMatcher] | None = None) -> None:
        self.bench_dir = bench_dir
        self.spec = spec
        self.settings = settings
        self.output_dir = shard_dir(bench_dir, settings.shard) if settings.shard else bench_dir
        """Where result files go: the benchmark directory, or a shard's own directory under it."""
        env = os.environ if env is None else env
        self.engine = open_engine(bench_dir, spec, settings.engine, settings.cache_mode, settings.cache_dir)
        self.user = role_endpoint(spec.user_model, settings.user_model, settings, env,
                                  max_tokens=DEFAULT_MAX_TOKENS["conversation"])
        self.evaluator = role_endpoint(spec.evaluator_model, settings.judge_model, settings, env,
                                       max_tokens=DEFAULT_MAX_TOKENS["judge"])
        panel = [] if settings.judge_model else [
            resolve_endpoint(cfg, settings, env, max_tokens=DEFAULT_MAX_TOKENS["judge"])
            for cfg in spec.evaluator_models]
        self.evaluators: list[Endpoint] = ([self.evaluator] if self.evaluator else []) + panel
        """Every judge of the panel (`--evalbench-judge-model` replaces the whole panel)."""
        self.matchers: dict[str, ArgumentMatcher] = dict(matchers or {})
        """Named argument matchers of trajectory checks (the `pytest_evalbench_argument_matchers` hook)."""
        self.target_configs = select_targets(spec, settings.targets)
        self.targets: dict[str, Target] = {}
        self.connections: dict[str, McpConnection] = {}
        """Every MCP server of the selected targets, by name (one process each, shared by targets)."""
        for cfg in self.target_configs:
            app = make_app(cfg) if make_app else None
            if app is not None:
                self.targets[cfg.id] = AppTarget(cfg.id, app, cfg.model, settings.engine, engine=self.engine,
                                                 traced=cfg.traces == "opentelemetry")
            elif cfg.model:
                endpoint = resolve_endpoint(cfg.as_model(), settings, env,
                                            max_tokens=DEFAULT_MAX_TOKENS["conversation"])
                self.targets[cfg.id] = ModelTarget(cfg.id, endpoint, cfg.system_prompt or spec.scenario.user_context
                                                   or DEFAULT_SYSTEM_PROMPT, self.engine, self._toolbox(cfg, env))
            else:
                raise ConfigError(f"{bench_dir / 'benchmark.yaml'}: target '{cfg.id}' has no `model` and no "
                                  "pytest_evalbench_make_target hook returned an app for it")

    def _toolbox(self, cfg: TargetConfig, env: Mapping[str, str]) -> ToolBox | None:
        """A model target's tools; its servers are shared with other targets naming the same server
        (which must then configure it alike: its recorded traffic is keyed by its name)."""
        if cfg.tools is None:
            return None
        for server in cfg.tools.mcp:
            known = self.connections.get(server.name)
            if known is None:
                self.connections[server.name] = McpConnection(server, self.bench_dir, env, cfg.tools.max_result_chars)
            elif known.server == server:
                known.max_message = max(known.max_message, message_bound(cfg.tools.max_result_chars))
            else:
                raise ConfigError(f"{self.bench_dir / SPEC_FILE}: MCP server '{server.name}' is configured differently "
                                  f"by two targets; give them different names")
        if not self.engine.closers:
            self.engine.closers.append(self._close_servers)
        return ToolBox(cfg.id, cfg.tools, {s.name: self.connections[s.name] for s in cfg.tools.mcp}, self.engine.cached)

    async def _close_servers(self) -> None:
        await asyncio.gather(*(c.close() for c in self.connections.values()))

    @functools.cached_property
    def stamp(self) -> SessionStamp:
        """This session as the result rows it writes record it (`.sessions.json`: time and commit)."""
        return SessionStamp.now(self.bench_dir)

    def meta(self) -> dict[str, Any]:
        """What a baseline must match to be comparable: benchmark, models, judge."""
        return {"benchmark": self.spec.name,
                "user_model": self.user.model if self.user else None,
                "judge_model": self.evaluator.model if self.evaluator else None,
                **({"judge_panel": [e.model for e in self.evaluators]} if len(self.evaluators) > 1 else {}),
                "targets": {t.id: t.model for t in self.target_configs}}

    def identities(self) -> dict[str, dict[str, str]]:
        """Per target, what shapes its judgments besides the target itself (the baseline records them; a
        comparison where one changed is not comparable): judge model(s) and prompt style, simulated-user
        model and prompt settings, check rules, plugin version; hashes where long."""
        spec = self.spec
        user_prompt = {"generation": spec.generation.model_dump(mode="json", exclude={"num_samples"}),
                       "scenario": spec.scenario.model_dump(mode="json")}
        checks = {m.id: m.checks.model_dump(mode="json") for m in spec.metrics if m.checks is not None}
        style = judge_prompt_style(spec)
        shared = {"judge_model": ", ".join(e.model for e in self.evaluators) or "none",
                  "judge_prompt": style if len(style) <= IDENTITY_TEXT else identity_hash(style),
                  "user_model": self.user.model if self.user else "none",
                  "user_prompt": identity_hash(user_prompt),
                  "check_rules": identity_hash(checks) if checks else "none",
                  "plugin_version": __version__}
        return {t.id: dict(shared) for t in self.target_configs}

    def judges(self) -> list[Endpoint]:
        """The judge panel (one judge unless `evaluator_models` adds more); ConfigError if empty."""
        return self.evaluators or [self.require(None, "evaluator_model")]

    def require(self, endpoint: Endpoint | None, key: str) -> Endpoint:
        if endpoint is None:
            raise ConfigError(f"{self.bench_dir / SPEC_FILE}: this {self.spec.kind} benchmark needs `{key}` "
                              f"and it is missing: add `{key}:` to benchmark.yaml or pass {ROLE_OPTIONS[key]}=MODEL")
        return endpoint

    def preflight(self, roles: Iterable[str], outputs: Iterable[Path] = (), *, names_targets: bool) -> None:
        """Everything that would otherwise fail after money is spent, checked before the first call:
        the roles the kind needs, credentials (each unset variable named once), threshold ids and the
        directories of files to write (the baseline to compare with is read and validated once, by
        the session at configure time). `names_targets`: the kind's `thresholds_name_targets`.
        Raises ConfigError or InputError with one line."""
        spec_file = self.bench_dir / SPEC_FILE
        endpoints: dict[str, Endpoint] = {}
        for key in roles:
            endpoints[key] = self.require({"user_model": self.user, "evaluator_model": self.evaluator}[key], key)
        for target_id, target in self.targets.items():
            if isinstance(target, ModelTarget):
                endpoints[f"target '{target_id}'"] = target.endpoint
        needs = {who: (endpoint.missing_env, endpoint.env_problems) for who, endpoint in endpoints.items()}
        needs |= {f"MCP server '{name}'": (c.missing_env, c.env_problems) for name, c in self.connections.items()}
        if self.settings.cache_mode != "replay":
            self._check_credentials(needs)
        self._check_thresholds(spec_file, names_targets)
        self._check_matchers(spec_file)
        self._list_tools()
        for path in outputs:
            if not path.parent.is_dir():
                raise ConfigError(f"{path}: directory {path.parent} does not exist")

    def _check_credentials(self, needs: dict[str, tuple[tuple[str, ...], tuple[str, ...]]]) -> None:
        """`needs`: who (a role, a target, an MCP server) -> (unset variables, values that cannot be sent)."""
        users: dict[str, list[str]] = {}
        for who, (missing, _) in needs.items():
            for name in missing:
                users.setdefault(name, []).append(who)
        if users:
            names = "; ".join(f"{name} (needed by {', '.join(who)})" for name, who in users.items())
            raise ConfigError(f"environment variable{'s' if len(users) > 1 else ''} not set: {names}. Set "
                              f"{'them' if len(users) > 1 else 'it'}, or replay a recorded cache with "
                              "--evalbench-cache=replay")
        problems: dict[str, list[str]] = {}
        for who, (_, found) in needs.items():
            for problem in found:
                problems.setdefault(problem, []).append(who)
        if problems:
            raise ConfigError("; ".join(f"{problem} (needed by {', '.join(who)})" for problem, who in problems.items()))

    def _check_matchers(self, spec_file: Path) -> None:
        """Every argument matcher a metric's trajectory check names is built in or supplied by the hook."""
        for metric in self.spec.metrics:
            for index, rule in enumerate(metric.checks.rules if metric.checks else [], start=1):
                problem = None if rule.trajectory is None else matcher_problem(rule.trajectory, self.matchers)
                if problem is not None:
                    raise InputError(spec_file, problem, row=f"metric {metric.id}",
                                     field=f"checks.rules.{index}.trajectory")

    def _list_tools(self) -> None:
        """Every model target's tool list, from the cache or its servers, before the first call: a server
        that cannot start is one error here (and a replay without a recorded list is one too)."""
        for target_id, target in self.targets.items():
            if isinstance(target, ModelTarget) and target.tools is not None:
                try:
                    self.engine.run(target.tools.offered())
                except (ToolServerError, LLMError) as exc:
                    raise ConfigError(f"target '{target_id}': {exc}") from None

    def _check_thresholds(self, spec_file: Path, names_targets: bool) -> None:
        rules = self.spec.thresholds or ThresholdRules()  # validated with benchmark.yaml
        if self.spec.metrics:
            for metric_id in rules.per_metric:
                if self.spec.metric(metric_id) is None:
                    raise InputError(spec_file, f"unknown metric id {metric_id!r}; metrics: "
                                     f"{', '.join(m.id for m in self.spec.metrics)}", row="thresholds",
                                     field=f"per_metric.{metric_id}")
        if names_targets:
            known = [t.id for t in self.spec.targets] + [t.id for t in self.target_configs]
            for target_id in rules.per_target:
                if target_id not in known:
                    raise InputError(spec_file, f"unknown target id {target_id!r}; targets: "
                                     f"{', '.join(dict.fromkeys(known))}", row="thresholds",
                                     field=f"per_target.{target_id}")


IDENTITY_TEXT = 40
"""An identity longer than this is recorded as its hash."""


def identity_hash(value: Any) -> str:
    """`sha256:<12 hex>` of a JSON value (sorted keys): short, stable, and says nothing of the content."""
    text = json.dumps(value, sort_keys=True, default=str)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


@dataclass
class RunSettings:
    """Everything the command line decides (resolved once, on the controller)."""

    benchmark: str
    targets: list[str] = field(default_factory=list)
    user_model: str | None = None
    judge_model: str | None = None
    base_url: str | None = field(default=None, repr=False)  # may carry user:password@
    provider: str | None = None
    cache_mode: str = "on"
    cache_dir: Path | None = None
    engine: EngineSettings = field(default_factory=EngineSettings)
    calibrate: bool = False
    """Run the judge over calibration.jsonl instead of the benchmark (see calibration/)."""
    shard: tuple[int, int] | None = None
    """(K, N) of `--evalbench-shard=K/N`: run the K-th of N balanced parts, write under shards/K-of-N/."""
