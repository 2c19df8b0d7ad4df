"""benchmark.yaml: its pydantic models, finding benchmarks on disk and validating what they hold.

The models: the benchmark, its roles and targets, metrics, generation and scenario settings, prices, and
the gate's rules (`thresholds:`, `gate:`, `judge:`); a metric's deterministic checks are in
`formats/checks.py`, the rows both kinds write (messages, tool calls) in `formats/results.py`.
Kind-specific rows live in the kinds (`kinds/scenarios/models.py`, `kinds/dataset/`). The JSON Schemas
in `pytest_evalbench/schemas/` are generated from these models. The kinds' loaders validate their own
files with `validate_as` and `warn_unknown`; every problem becomes one `InputError` naming file, row and
field.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import AfterValidator, BaseModel, Field, ValidationError, field_validator, model_validator

from pytest_evalbench.base.errors import ConfigError, EvalbenchWarning, InputError, field_path
from pytest_evalbench.base.inputs import read_yaml
from pytest_evalbench.base.numbers import DollarsPerMillion, Probability
from pytest_evalbench.base.safe_text import MASK, check_base_url, header_problem, redact_data, secret_params, strip_credentials
from pytest_evalbench.formats import (
    MAX_ID_LENGTH,
    Input,
    Int,
    Num,
    OneLine,
    PlainText,
    Strict,
    check_id,
    plain_text,
    unknown_keys,
)
from pytest_evalbench.formats.checks import MetricChecks

Rate = Optional[Num]  # a YAML `true` is not a rate


class MetricRule(Strict):
    """`thresholds.per_metric.<id>`: rules for one metric on every target."""

    min_pass_rate: Rate = Field(default=None, ge=0, le=1)
    max_drop: Rate = Field(default=None, ge=0, le=1)
    """Fail when the metric's paired drop vs the baseline exceeds this AND is significant after the
    run's multiplicity correction (wins over the target's and the global max_drop)."""


class TargetRule(Strict):
    min_positive_pass_rate: Rate = Field(default=None, ge=0, le=1)
    min_negative_pass_rate: Rate = Field(default=None, ge=0, le=1)
    max_drop: Rate = Field(default=None, ge=0, le=1)
    """Per metric (and for the pooled per-target test): observed drop > max_drop AND significant."""


class ThresholdRules(TargetRule):
    """`thresholds:` of benchmark.yaml. Top-level rules apply to every target; a `per_target`
    entry overrides them field by field; `per_metric` rules apply to that metric on every target
    (its max_drop wins over the target's and the global one). Unknown keys are rejected, so a typo
    fails before any LLM call."""

    per_target: dict[str, TargetRule] = Field(default_factory=dict)
    per_metric: dict[str, MetricRule] = Field(default_factory=dict)
    decision: Literal["interval", "point"] = "interval"
    """How a min rule decides: `interval` (breached when the rate's 95% interval lies below the minimum,
    held when it lies at or above it, else inconclusive) or `point` (the rate itself against the minimum)."""

    def for_target(self, target: str) -> TargetRule:
        own = self.per_target.get(target)
        merged = {name: getattr(self, name) for name in TargetRule.model_fields}
        if own is not None:
            merged.update(own.model_dump(exclude_none=True))
        return TargetRule(**merged)

    def count(self) -> int:
        """How many rule values are set."""
        data = self.model_dump(exclude_none=True, exclude={"decision"})
        nested = [v for group in ("per_target", "per_metric") for entry in data.pop(group, {}).values()
                  for v in entry.values()]
        return len(data) + len(nested)


class GateConfig(Input):
    """How the session's exit status is decided (see gate/decision.py)."""

    mode: Literal["cases", "thresholds"] = "cases"
    """cases: a failed case fails the build (with num_samples > 1: a case whose per-case verdict is
    "fail"). thresholds: failed cases are reported, but only threshold/baseline regressions and
    incomplete runs fail the build."""
    case_pass_rate: Num = Field(default=0.5, ge=0, le=1)
    """With num_samples > 1: the pass rate a case must reach (by its Wilson bound) to pass."""
    fail_inconclusive: bool = False
    """An inconclusive min rule fails the build (exit 6), and with num_samples > 1 and mode cases an
    inconclusive case does too."""
    min_rows: Int = Field(default=10, ge=1)
    """A selection (node ids, -k, --lf...) gates a min rule only over at least this many rows; with fewer,
    the rule is not evaluated and the selection is gated by its cases."""
    correction: Literal["holm", "bh"] = "holm"
    """Multiplicity correction over all baseline comparisons of a run: Holm (family-wise error
    rate) or Benjamini-Hochberg (false discovery rate)."""
    alpha: Num = Field(default=0.05, gt=0, lt=1)
    """Significance level of the adjusted p-values."""


class JudgeConfig(Input):
    """How far the judge is trusted: self-consistency samples and the calibration bar."""

    samples: Int = Field(default=1, ge=1, le=25)
    """Judge every row this many times per judge model (self-consistency); the majority decides
    (the median for 1-5 scores). Useful with temperature > 0: identical requests give identical answers."""
    min_kappa: Optional[Num] = Field(default=None, ge=-1, le=1)
    """A metric whose judge reached a lower Cohen's kappa in calibration.json is "judge unreliable":
    shown as such in the summary, and its failures cannot fail the build."""
    require_calibration: bool = False
    """With min_kappa: a metric never calibrated counts as unreliable too."""
    prompt: JudgeStyle = "examples"
    """How the judge is prompted (a metric's `judge_prompt` overrides it for that metric). examples:
    the definition and the metric's `examples` of presence. plain: the definition only. contrast: the
    definition, with one labelled present and one labelled absent example of calibration.jsonl shown
    as earlier answered questions. `--evalbench-calibrate` reports every style's kappa per metric and
    names the best."""
    probability: bool = False
    """Ask the judge for log-probabilities (OpenAI `logprobs`; llama.cpp's server gives them) and record
    P(present) per verdict; with a threshold in calibration.json the verdict is P(present) >= threshold.
    Endpoints that give no log-probabilities keep the sampled judgment."""
    correct_rates: bool = False
    """The gate's min pass-rate rules read the rates corrected for the judge's errors (calibration.json's
    sensitivity and specificity) instead of the observed ones; an undefined correction leaves the rule
    not evaluated, with the reason."""
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}")
MetricType = Literal["positive", "negative"]
JudgeStyle = Literal["examples", "plain", "contrast"]
DEFAULT_MAX_TOKENS = {"conversation": 2048, "judge": 1024}
"""Per-role `max_tokens` when a model's `params` set none (the original pipeline's values): the
simulated user and the targets hold conversations, the judge writes a short verdict."""


# --------------------------------------------------------------------------- benchmark.yaml


def _env_name(value: str) -> str:
    if not ENV_NAME.fullmatch(value):
        raise ValueError(f"{value[:200]!r} is not an environment variable name")
    return value


EnvName = Annotated[str, AfterValidator(_env_name)]
BaseUrl = Annotated[str, AfterValidator(check_base_url)]


class EnvRef(Strict):
    """A header value read from an environment variable: `{env: NAME}` (never written anywhere)."""

    env: EnvName


HeaderValue = Union[str, EnvRef]


@dataclass(frozen=True)
class EnvValues:
    """Values of a mapping with `{env: NAME}` read from the environment (see `resolve_env`)."""

    values: dict[str, str]
    """Every entry whose value is known: literals, and `{env:}` entries whose variable is set."""
    missing: tuple[str, ...] = ()
    """Variables named by `{env:}` that are unset (or empty), in order, once each."""
    problems: tuple[str, ...] = ()
    """Why a header value read from a variable cannot be sent (never the value itself: it may be a secret)."""
    from_env: tuple[str, ...] = ()
    """The entries whose values came from the environment."""


def resolve_env(values: Mapping[str, str | EnvRef], env: Mapping[str, str], *, headers: bool) -> EnvValues:
    """The one reader of `{env: NAME}` (endpoint headers, an MCP server's `env` and `headers`): each
    unset variable listed once for the preflight (nothing is sent with a placeholder) and, for
    `headers`, a value read from a variable that an HTTP header cannot carry named as a problem."""
    out: dict[str, str] = {}
    missing: list[str] = []
    problems: list[str] = []
    from_env: list[str] = []
    for name, value in values.items():
        if not isinstance(value, EnvRef):
            out[name] = value
            continue
        read = env.get(value.env)
        if not read:
            missing += [value.env] if value.env not in missing else []
            continue
        out[name] = read
        from_env.append(name)
        problem = header_problem(read) if headers else None
        if problem is not None:
            problems.append(f"environment variable {value.env} {problem}, so it cannot be sent in an HTTP header")
    return EnvValues(out, tuple(missing), tuple(dict.fromkeys(problems)), tuple(from_env))


def _check_headers(headers: dict[str, HeaderValue]) -> dict[str, HeaderValue]:
    for name, value in headers.items():
        if not HEADER_NAME.fullmatch(name):
            raise ValueError(f"{name[:100]!r} is not an HTTP header name")
        problem = header_problem(value) if isinstance(value, str) else None
        if problem is not None:
            raise ValueError(f"header {name!r}: the value {problem}")
    return headers


Headers = Annotated[dict[str, HeaderValue], AfterValidator(_check_headers)]


def _no_credentials(params: dict[str, Any]) -> dict[str, Any]:
    """`params` go into every request body and the response cache: a key there would be stored."""
    found = secret_params(params)
    if found:
        raise ValueError(f"{', '.join(repr(f) for f in found)} looks like a credential; params are sent in the "
                         "request body and stored in the response cache. Put keys in the environment: "
                         "`api_key_env: NAME` or `headers: {Header-Name: {env: NAME}}`")
    return params


Params = Annotated[dict[str, Any], AfterValidator(_no_credentials)]


class _Endpointish:
    """A role's repr (tracebacks, debuggers) shows no URL credentials and no literal header or environment value."""

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():  # type: ignore[misc]
            if name == "base_url" and isinstance(value, str):
                yield name, strip_credentials(value)
            elif name in ("headers", "env") and isinstance(value, dict):
                yield name, {k: v if isinstance(v, EnvRef) else MASK for k, v in value.items()}
            else:
                yield name, redact_data(value)


class ModelConfig(_Endpointish, Input):
    """An OpenAI-compatible chat model: the simulated user, the judge, or a target."""

    model: str = Field(min_length=1)
    base_url: Optional[BaseUrl] = None
    """Endpoint; defaults to OPENAI_BASE_URL (then the OpenAI API)."""
    api_key_env: Optional[EnvName] = None
    """Name of the environment variable holding the key; defaults to OPENAI_API_KEY."""
    provider: Literal["openai", "local"] = "openai"
    """`local` runs the embedded llama.cpp model (the `[local]` extra) instead of an endpoint."""
    params: Params = Field(default_factory=dict)
    """Extra sampling parameters (temperature, max_tokens, seed, service_tier, ...)."""
    headers: Headers = Field(default_factory=dict)
    """HTTP headers sent with every request of this role: a literal string, or `{env: NAME}`."""
    batch: bool = False
    """Send this role's calls through the provider's Batch API (`--evalbench-batch`): half the price, minutes to hours."""
    cache_prompt: bool = False
    """Mark each request's stable prefix for the provider's prompt cache (Anthropic's `cache_control`)."""


class McpServer(_Endpointish, Input):
    """One MCP server whose tools a model target may call: a command started over stdio, or a URL
    (streamable HTTP). Its tool list and results are recorded in the cache under its `name`."""

    name: str
    command: Optional[list[Annotated[str, Field(min_length=1)]]] = Field(default=None, min_length=1)
    """The program and its arguments (no shell), started in the benchmark directory."""
    url: Optional[BaseUrl] = None
    env: dict[EnvName, HeaderValue] = Field(default_factory=dict)
    """Environment of a command's process (besides PATH, HOME, ...): a literal, or `{env: NAME}`."""
    headers: Headers = Field(default_factory=dict)
    """HTTP headers sent to a URL's server: a literal, or `{env: NAME}`."""
    timeout: Num = Field(default=30, gt=0, le=3600)
    """Seconds the server has to start and list its tools, and to answer each tool call."""

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        return check_id(value, "MCP server name")

    @model_validator(mode="after")
    def _command_or_url(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server needs exactly one of `command` (stdio) and `url` (streamable HTTP)")
        return self


class ToolsConfig(Input):
    """`targets[].tools`: the tools a model target is offered, and the bounds of its tool loop."""

    mcp: list[McpServer] = Field(min_length=1)
    max_rounds: Int = Field(default=8, ge=1, le=100)
    """Rounds of tool calls the target may make before one reply; then the reply ends with a note."""
    max_result_chars: Int = Field(default=20_000, ge=100, le=10_000_000)
    """Longer tool results are cut, with a note, before the model, the transcript or the cache sees them."""

    @model_validator(mode="after")
    def _unique_names(self) -> ToolsConfig:
        names = [server.name for server in self.mcp]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate MCP server name(s): {', '.join(dupes)}")
        return self


class TargetConfig(_Endpointish, Input):
    """A system under test: a model endpoint, or the team's own app (see hookspecs)."""

    id: str
    model: Optional[str] = None
    base_url: Optional[BaseUrl] = None
    api_key_env: Optional[EnvName] = None
    provider: Literal["openai", "local"] = "openai"
    system_prompt: Optional[str] = None
    params: Params = Field(default_factory=dict)
    headers: Headers = Field(default_factory=dict)
    cache_prompt: bool = False
    tools: Optional[ToolsConfig] = None
    """A model target's tools, from MCP servers (see kinds/tools.py)."""
    batch: bool = False  # a model target's calls through the provider's Batch API (`ModelConfig.batch`)
    traces: Optional[Literal["opentelemetry"]] = None
    """An app target's OpenTelemetry spans become its reply's tool calls, model calls and usage."""

    @model_validator(mode="after")
    def _tools_need_a_model(self) -> TargetConfig:
        if self.tools is not None and self.model is None:
            raise ValueError("`tools` are offered to a model: this target has no `model` (an app calls its own tools)")
        return self

    @field_validator("id")
    @classmethod
    def _safe_id(cls, value: str) -> str:
        return check_id(value, "target id")

    def as_model(self) -> ModelConfig:
        """The endpoint part of a model target."""
        assert self.model is not None
        return ModelConfig(model=self.model, base_url=self.base_url, api_key_env=self.api_key_env,
                           provider=self.provider, params=self.params, headers=self.headers, batch=self.batch,
                           cache_prompt=self.cache_prompt)


class MetricSource(Input):
    benchmark: Optional[str] = None
    metric_id: Optional[str] = None


def not_blank(value: str) -> str:
    """A text the run depends on (a metric's definition is all the judge is given) cannot be blank."""
    if not value.strip():
        raise ValueError("is empty: the judge would have nothing to judge; write what the behaviour is")
    return value


class Metric(Input):
    id: str
    name: OneLine = Field(min_length=1)
    type: MetricType
    definition: Annotated[str, AfterValidator(not_blank), AfterValidator(plain_text)]
    """What the judge detects and the simulated user provokes (not blank)."""
    examples: list[PlainText] = Field(default_factory=list)
    mattersBecause: Optional[PlainText] = None
    """"This matters because ..." (impactbench's metric metadata); shown with failures."""
    matters_because: Optional[PlainText] = None
    """The same sentence as impactbench-web's bridge spells it."""
    contributor: Optional[OneLine] = None
    source: Optional[MetricSource] = None
    """Where a curated metric was copied from (impactbench's nutritional-label benchmarks)."""
    seed_scenarios: list[PlainText] = Field(default_factory=list)
    """Titles of hand-submitted seed scenarios (impactbench-web); kept for authoring tools."""

    @property
    def why(self) -> str | None:
        """The metric's "matters because" sentence, whichever spelling the file used."""
        return self.mattersBecause or self.matters_because

    @field_validator("id")
    @classmethod
    def _safe_id(cls, value: str) -> str:
        return check_id(value, "metric id")

    checks: Optional[MetricChecks] = None
    """Deterministic checks tried before the judge (see `kinds/metric_judge.py`)."""
    judge_prompt: Optional[JudgeStyle] = None
    """This metric's judge prompt style, when it is not `judge.prompt` (calibration names the best style per metric)."""

    @property
    def behaviour(self) -> str:
        """The behaviour as the definition describes it, on one line: what the judge detects and the
        simulated user provokes or tests. The *name* is never used for that: a negative metric is named
        after the good conduct ("Avoid ...") while its definition describes the bad act."""
        return " ".join(self.definition.split())


def judge_prompt_style(spec: BenchmarkSpec) -> str:
    """The judge's prompt style for the baseline's identities: `judge.prompt`, then each metric's own
    style where it differs (`examples; m01: contrast`)."""
    default = spec.judge.prompt
    own = [f"{m.id}: {m.judge_prompt}" for m in spec.metrics if m.judge_prompt not in (None, default)]
    return "; ".join([default, *own])


class Generation(Input):
    turns: Int = Field(default=6, ge=1, le=100)
    num_samples: Int = Field(default=1, ge=1, le=1000)
    sampling: Literal["fixed", "sequential"] = "fixed"
    perfunctory: bool = False
    landmarks: bool = True
    scenarios_per_metric: Int = Field(default=3, ge=1, le=100)


class ScenarioSettings(Input):
    user_context: Optional[str] = None
    """Default system prompt of the target model; also context for scenario generation."""
    implicit_context: Optional[str] = None
    """Who the users may be without saying so (minors, people in crisis, ...): context for writing
    scenarios, as impactbench-web's `scenario_implicit_context`. Like impactbench, it is never put
    into the target's system prompt (the target must infer it) nor into the simulated user's."""


class Price(Input):
    """Dollars per million tokens (prompt-cache reads and writes: the input price unless given); `batch`,
    `flex`: the share of every price those tiers cost."""
    input_per_million: DollarsPerMillion
    output_per_million: DollarsPerMillion
    cached_input_per_million: Optional[DollarsPerMillion] = None
    cache_write_per_million: Optional[DollarsPerMillion] = None
    batch: Probability = 0.5
    flex: Probability = 0.5


class BenchmarkSpec(Input):
    """benchmark.yaml."""

    name: OneLine = Field(min_length=1)
    description: PlainText = ""
    kind: Literal["scenarios", "dataset"] = "scenarios"
    scenario: ScenarioSettings = Field(default_factory=ScenarioSettings)
    metrics: list[Metric] = Field(default_factory=list)
    generation: Generation = Field(default_factory=Generation)
    demographics: dict[OneLine, list[OneLine]] = Field(default_factory=dict)
    targets: list[TargetConfig] = Field(default_factory=list)
    user_model: Optional[ModelConfig] = None
    evaluator_model: Optional[ModelConfig] = None
    evaluator_models: list[ModelConfig] = Field(default_factory=list)
    """A judge panel: these judges vote with `evaluator_model` (if set); the majority decides."""
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    pricing: dict[str, Price] = Field(default_factory=dict)
    """Per-model prices overriding the built-in table."""
    thresholds: Optional[ThresholdRules] = None
    """CI gating rules (see gate/)."""
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

    def judge_style(self, metric: Metric) -> JudgeStyle:
        """The judge prompt style the metric's rows are judged with (`judge_prompt`, else `judge.prompt`)."""
        return metric.judge_prompt or self.judge.prompt

    def judge_styles(self) -> dict[str, JudgeStyle]:
        """Metric id -> `judge_style` of each metric."""
        return {m.id: self.judge_style(m) for m in self.metrics}


# --------------------------------------------------------------------------- shared pieces


class PhaseCost(Strict):
    """One phase of a cost.json: the priced usage behind the current results."""

    phase: str
    cost: float
    input_tokens: int
    output_tokens: int
    cached_tokens: int = 0
    """Input tokens read from the provider's prompt cache, which `saved` dollars against the input price."""
    saved: float = 0.0
    cached_replays_counted: bool = True
    """Always true: calls replayed from the cache are counted at their price, so cost.json is what the
    results cost to produce, not what this session spent (the terminal summary shows that)."""


NAME_RE = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_ID_LENGTH - 1}}}")
"""A benchmark or data file name: the id rule (always `fullmatch`ed: a trailing newline is no name)."""
SPEC_FILE = "benchmark.yaml"


def available_benchmarks(root: Path) -> list[str]:
    """Names of the directories under `root` that hold a benchmark.yaml, sorted."""
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / SPEC_FILE).is_file())


def resolve_benchmark_dir(root: Path, name: str, option: str = "--benchmark=") -> Path:
    """`benchmarks/<name>` for a safe, existing name; the error lists what exists.

    `option` prefixes the name in the error: how the user spelled it (a pytest option, or a
    command's argument when empty)."""
    if not NAME_RE.fullmatch(name) or name in {".", ".."}:
        shown = repr(name[:MAX_ID_LENGTH]) + ("…" if len(name) > MAX_ID_LENGTH else "")
        raise ConfigError(f"{option}{shown} is not a benchmark name (1-{MAX_ID_LENGTH} letters, digits, '.', "
                          "'_', '-'; no paths)")
    path = root / name
    if not (path / SPEC_FILE).is_file():
        names = available_benchmarks(root)
        have = ", ".join(names) if names else f"none (no {root}/<name>/{SPEC_FILE} found)"
        raise ConfigError(f"unknown benchmark {name!r}; available: {have}")
    return path


def _located(exc: ValidationError, data: Any) -> dict[str, tuple[str, str]]:
    """Field path (list entries by id) -> (the path by positions, message), one per field (a union's
    alternatives would otherwise repeat a field); `data` is what was validated."""
    out: dict[str, tuple[str, str]] = {}
    for err in exc.errors():
        loc = err.get("loc", ())
        msg = err.get("msg", "invalid").removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden":
            msg = "unknown key (typo?)"
        out.setdefault(field_path(loc, data), (field_path(loc, data, by_id=False), msg))
    return out


def all_errors(exc: ValidationError, data: Any = None) -> list[tuple[str, str]]:
    """(field path, message) of each problem of a pydantic error, one line each, one per field; `data` is what was validated."""
    return [(loc, msg) for loc, (_, msg) in _located(exc, data).items()]


def line_of(lines: dict[str, int], where: str) -> int | None:
    """The line of a field path by positions (`metrics.1.type`), or of the nearest field holding it
    that the file has (a missing key: the entry that lacks it)."""
    while where and where not in lines:
        where = where.rpartition(".")[0]
    return lines.get(where)


def first_error(exc: ValidationError, data: Any = None) -> tuple[str, str]:
    """(field path, message) of a pydantic error, in one line; `data` is what was validated."""
    found = all_errors(exc, data)
    loc, msg = found[0]
    extra = len(found) - 1
    return loc, msg + (f" (+{extra} more error{'s' if extra > 1 else ''})" if extra else "")


def validate_as(model: type[BaseModel], data: Any, path: Path, row: str | int | None = None,
                lines: dict[str, int] | None = None) -> Any:
    """`model.model_validate(data)` with its errors turned into one InputError that shows them all
    (each with its field; with `lines`, the field paths' lines of a YAML file, each with its line)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        if lines is not None:
            found = sorted((InputError(path, msg, row=line_of(lines, positions), field=loc or None)
                            for loc, (positions, msg) in _located(exc, data).items()), key=lambda e: e.row or 0)
            raise InputError.gather(found, len(found)) from None
        (loc, msg), *rest = all_errors(exc, data)
        raise InputError(path, msg, row=row, field=loc or None,
                         also=[(where or None, text) for where, text in rest]) from None


def load_spec(bench_dir: Path) -> BenchmarkSpec:
    """Parse and validate benchmark.yaml."""
    path = bench_dir / SPEC_FILE
    lines: dict[str, int] = {}
    data = read_yaml(path, lines)
    if not isinstance(data, dict):
        raise InputError(path, "expected a mapping at the top level")
    spec: BenchmarkSpec = validate_as(BenchmarkSpec, data, path, lines=lines)
    warn_unknown(path, unknown_keys(spec))
    return spec


def warn_unknown(path: Path, keys: Iterable[str], rows: dict[str, list[str]] | None = None) -> None:
    """One warning per file for the unknown keys it carries (kept, never used); `rows` maps a key
    to the rows that carry it, for row files."""
    keys = list(dict.fromkeys(keys))
    if not keys:
        return
    def where(key: str) -> str:
        found = (rows or {}).get(key) or []
        return f"{key} (in {len(found)} row{'s' if len(found) > 1 else ''}, first row {found[0]})" if found else key
    warnings.warn(EvalbenchWarning(f"{path}: unknown key{'s' if len(keys) > 1 else ''} kept and ignored: "
                                   + ", ".join(where(k) for k in keys)), stacklevel=2)
