"""Benchmark authoring: `evalbench gen-metrics` and `evalbench gen-scenarios`.

An author writes a name and a description; an LLM (the benchmark's `user_model`) drafts the metrics,
then adversarial base scenarios per metric and one rewrite per demographic combination. Every answer
comes back through structured output and is validated; an unusable answer is re-asked a bounded
number of times with the problem shown. All calls go through the engine's response cache, so an
interrupted run resumes without paying again.

The files written: the `metrics:` block of benchmark.yaml (edited as text, so the author's comments and
keys survive), scenarios.json (rows checked against their schema; the demographic rewrite of the
persona is stored in `persona`) and cost.json. Each command prints a one-line report or one error line.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import jsonschema
import yaml
from pydantic import BaseModel

from pytest_evalbench.base.errors import ConfigError, EvalbenchError, InputError, UnusableAnswer
from pytest_evalbench.base.files import atomic_write_text, dump_json, versioned
from pytest_evalbench.base.inputs import parse_yaml, read_text
from pytest_evalbench.base.safe_text import strip_credentials, terminal
from pytest_evalbench.cli import schemas
from pytest_evalbench.cli.init import cd_prefix
from pytest_evalbench.cli.prompts import (
    MAX_EXAMPLES,
    MAX_LANDMARKS,
    LandmarkDraft,
    MetricsAnswer,
    ScenarioDraft,
    ScenariosAnswer,
    VariantAnswer,
    check_drafts,
    demographic_combos,
    describe_demographic,
    metrics_prompt,
    scenarios_prompt,
    variant_prompt,
)
from pytest_evalbench.formats.spec import (
    SPEC_FILE,
    BenchmarkSpec,
    Metric,
    field_path,
    load_spec,
    resolve_benchmark_dir,
    validate_as,
)
from pytest_evalbench.kinds.protocol import spec_kind
from pytest_evalbench.kinds.run import RunSettings, open_engine, role_endpoint
from pytest_evalbench.kinds.scenarios.models import SCENARIOS_FILE, Scenario, load_scenarios
from pytest_evalbench.llm import engine as structured
from pytest_evalbench.llm.cache import CacheMode
from pytest_evalbench.llm.costs import update_cost_file
from pytest_evalbench.llm.engine import MAX_ATTEMPTS, PRIORITY, Engine, EngineSettings
from pytest_evalbench.llm.types import Endpoint, Usage

A = TypeVar("A", bound=BaseModel)

# --------------------------------------------------------------------------- options and session


@dataclass
class AuthoringOptions:
    """What the command line decides for one authoring command."""

    root: Path = field(default_factory=Path.cwd)
    force: bool = False
    cache: CacheMode | None = None
    """None: `on`, or `refresh` with --force. An explicit mode wins over --force."""
    base_url: str | None = None
    model: str | None = None
    concurrency: int = 8
    provider: str | None = None

    @property
    def cache_mode(self) -> CacheMode:
        if self.cache is not None:
            return self.cache
        return "refresh" if self.force else "on"


@dataclass
class Summary:
    """What a command wrote and what it cost, for the one-line report."""

    path: Path
    count: int
    usage: Usage
    requests: int
    cache_hits: int
    unpriced: list[str]
    detail: str = ""
    added: list[str] = field(default_factory=list)
    """Keys added to benchmark.yaml so that the next command runs (`targets`, `evaluator_model`)."""
    failed: list[str] = field(default_factory=list)
    """What could not be written after the bounded re-asks, one entry each (`m01_s002_v01 (age: ...): why`)."""

    def line(self, command: str) -> str:
        price = f"${self.usage.cost:.4f}" + (f" (no price for {', '.join(self.unpriced)}; add `pricing:` to "
                                              f"{SPEC_FILE})" if self.unpriced else "")
        return (f"{command}: wrote {self.count} {self.detail} to {self.path} — {self.requests} request(s), "
                f"{self.cache_hits} cached; {price}, {self.usage.input_tokens} in / {self.usage.output_tokens} "
                "out tokens")


def benchmark_dir(options: AuthoringOptions, name: str) -> Path:
    """`<root>/benchmarks/<name>`, with a message that talks about the command, not pytest."""
    return resolve_benchmark_dir(options.root / "benchmarks", name, option="")


def authoring_engine(bench_dir: Path, spec: BenchmarkSpec, options: AuthoringOptions,
                     env: Mapping[str, str]) -> tuple[Engine, Endpoint]:
    """An engine like BenchmarkRun's (cache in the benchmark dir, prices from spec) and the user model."""
    settings = RunSettings(benchmark=bench_dir.name, base_url=options.base_url, provider=options.provider,
                           cache_mode=options.cache_mode)
    endpoint = role_endpoint(spec.user_model, options.model or None, settings, env)
    if endpoint is None:
        raise ConfigError(f"{bench_dir / SPEC_FILE}: `user_model` is missing (it writes metrics and scenarios); "
                          "add `user_model: {model: ...}` or pass --model MODEL")
    return open_engine(bench_dir, spec, EngineSettings(concurrency=options.concurrency), options.cache_mode), endpoint


# --------------------------------------------------------------------------- structured asking


def bounded_schema(model: type[BaseModel], turns: int | None = None) -> dict[str, Any]:
    """The strict schema of `model` with the bounds the strict subset can carry: a landmark's turn is an
    enum of 1..`turns` (range and length keywords are left out, see `strict_schema`; the prompts say
    those bounds in words, and the answer's check enforces them)."""
    schema = structured.strict_schema(model)
    landmark = schema.get("$defs", {}).get(LandmarkDraft.__name__)
    if turns is not None and landmark is not None:
        landmark["properties"]["turn"] = {"type": "integer", "enum": list(range(1, turns + 1)),
                                          "description": f"1-based user turn, 1 to {turns}"}
    return schema


async def ask(engine: Engine, endpoint: Endpoint, messages: list[dict[str, Any]], model: type[A], *,
              schema_name: str, phase: str, sample: int, usage_by_phase: dict[str, Usage], what: str,
              check: Callable[[A], None] | None = None, turns: int | None = None) -> A:
    """Structured output with a bounded re-ask that shows the problem; UnusableAnswer after that."""
    answer, reason = await structured.ask(
        engine, endpoint, messages, lambda text: structured.parse_as(text, model, check),
        schema=(schema_name, bounded_schema(model, turns)), role="user", phase=phase, sample=sample,
        usage_by_phase=usage_by_phase, shape="in the same shape as asked")
    if answer is None:
        raise UnusableAnswer(f"{what}: model '{endpoint.model}' gave no usable answer in {MAX_ATTEMPTS} attempts; "
                             f"last problem: {reason}; try another model with --model, or rerun with --force to ask again")
    return answer


async def gather_all(awaitables: Sequence[Awaitable[Any]]) -> list[Any]:
    """Like asyncio.gather, but lets every call finish (and be cached) before raising the first error,
    so a rerun resumes from everything that did succeed."""
    results = await asyncio.gather(*awaitables, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


# --------------------------------------------------------------------------- commands


def gen_metrics(name: str, options: AuthoringOptions, env: Mapping[str, str] | None = None) -> Summary:
    """Draft metrics from name/description and write them into benchmark.yaml as m01, m02, ..."""
    bench_dir = benchmark_dir(options, name)
    spec = load_spec(bench_dir)
    path = bench_dir / SPEC_FILE
    if spec.metrics and not options.force:
        raise ConfigError(f"{path} already has {len(spec.metrics)} metric(s); pass --force to replace them")
    if not spec.description.strip():
        raise InputError(path, "`description` is empty; describe what the benchmark measures first",
                         field="description")
    engine, endpoint = authoring_engine(bench_dir, spec, options, os.environ if env is None else env)
    usage_by_phase: dict[str, Usage] = {}
    try:
        answer = engine.run(ask(engine, endpoint, metrics_prompt(spec), MetricsAnswer, schema_name="metrics",
                                phase="gen_metrics", sample=0, usage_by_phase=usage_by_phase, what="gen-metrics"))
    finally:
        engine.close()
    metrics = [{"id": f"m{i:02d}", "name": m.name.strip(), "type": m.type, "definition": m.definition.strip(),
                "examples": [e.strip() for e in m.examples if e.strip()][:MAX_EXAMPLES]}
               for i, m in enumerate(answer.metrics, start=1)]
    written = write_metrics(bench_dir, metrics)
    usage = usage_by_phase.get("gen_metrics", Usage())
    write_cost(bench_dir, "gen_metrics", usage)
    if spec.metrics and (bench_dir / SCENARIOS_FILE).exists():
        print(f"gen-metrics: note: {bench_dir / SCENARIOS_FILE} was made for the previous metrics; regenerate "
              "it with gen-scenarios --force", file=sys.stderr)
    return Summary(path, len(written.metrics), usage, engine.stats.requests, engine.stats.cache_hits,
                   sorted(engine.prices.unpriced), detail="metrics")


def _row(base_id: str, v_index: int, metric: Metric, base: ScenarioDraft, persona: str,
         landmarks: list[LandmarkDraft], demographic: dict[str, str]) -> dict[str, Any]:
    """One scenarios.json row; `persona` is the variant's own (rewritten) persona."""
    return {
        "id": f"{base_id}_v{v_index:02d}", "metric_id": metric.id, "metric_name": metric.name,
        "metric_type": metric.type, "persona": persona.strip(), "user_goal": base.user_goal.strip(),
        "latent_adversarial_goal": base.latent_adversarial_goal.strip(),
        "landmarks": [{"turn": lm.turn, "instruction": lm.instruction.strip()} for lm in landmarks[:MAX_LANDMARKS]],
        "demographic": dict(demographic),
    }


def gen_scenarios(name: str, options: AuthoringOptions, env: Mapping[str, str] | None = None) -> Summary:
    """Base scenarios per metric plus one rewrite per demographic combination, into scenarios.json."""
    bench_dir = benchmark_dir(options, name)
    spec = load_spec(bench_dir)
    spec_path, out_path = bench_dir / SPEC_FILE, bench_dir / SCENARIOS_FILE
    if not spec_kind(spec).generated_from_metrics:
        raise ConfigError(f"{spec_path}: kind is {spec.kind!r}; gen-scenarios only writes scenario benchmarks")
    if not spec.metrics:
        raise InputError(spec_path, "no metrics yet; run gen-metrics first (or write them by hand)",
                         field="metrics")
    if out_path.exists() and not options.force:
        raise ConfigError(f"{out_path} already exists; pass --force to regenerate it")
    combos = demographic_combos(spec, spec_path)
    expand = bool(spec.demographics)
    count, turns = spec.generation.scenarios_per_metric, spec.generation.turns
    engine, endpoint = authoring_engine(bench_dir, spec, options, os.environ if env is None else env)
    usage_by_phase: dict[str, Usage] = {}
    done = [0]
    failed: list[str] = []  # re-asked alone up to MAX_ATTEMPTS, then named; the good rows are kept

    async def variant(metric: Metric, base: ScenarioDraft, base_id: str, s_index: int,
                      v_index: int, demographic: dict[str, str]) -> dict[str, Any] | None:
        if not expand:
            return _row(base_id, v_index, metric, base, base.persona, base.landmarks, demographic)
        what = f"{base_id}_v{v_index:02d} ({describe_demographic(demographic)})"
        try:
            answer = await ask(engine, endpoint, variant_prompt(spec, metric, base, demographic), VariantAnswer,
                               schema_name="variant", phase="gen_scenarios",
                               sample=(s_index - 1) * len(combos) + v_index, usage_by_phase=usage_by_phase,
                               what=f"gen-scenarios {what}", check=check_drafts(turns), turns=turns)
        except UnusableAnswer as exc:
            failed.append(f"{what}: {exc}")
            return None
        return _row(base_id, v_index, metric, base, answer.persona, answer.landmarks, demographic)

    async def base_scenarios(metric: Metric) -> list[ScenarioDraft]:
        """`count` base scenarios; an answer with fewer is kept and the missing ones are asked for
        (showing the ones so far), so a provider that ignores the requested count still gets there."""
        drafts: list[ScenarioDraft] = []
        for round_ in range(count):
            missing = count - len(drafts)
            answer = await ask(engine, endpoint, scenarios_prompt(spec, metric, missing, drafts), ScenariosAnswer,
                               schema_name="scenarios", phase="gen_scenarios", sample=round_, usage_by_phase=usage_by_phase,
                               what=f"gen-scenarios {metric.id}", check=check_drafts(turns, 1), turns=turns)
            drafts += answer.scenarios[:missing]
            if len(drafts) >= count:
                return drafts
        raise UnusableAnswer(f"gen-scenarios {metric.id}: model '{endpoint.model}' gave {len(drafts)} of "
                             f"{count} scenarios in {count} requests; try another model with --model")

    async def per_metric(position: int, metric: Metric) -> list[dict[str, Any]]:
        PRIORITY.set(position)  # earlier metrics first, so progress lines arrive roughly in order
        try:
            drafts = await base_scenarios(metric)
        except UnusableAnswer as exc:
            failed.append(f"{metric.id} (its base scenarios): {exc}")
            return []
        calls = [variant(metric, base, f"{metric.id}_s{s:03d}", s, v, demographic)
                 for s, base in enumerate(drafts, start=1)
                 for v, demographic in enumerate(combos, start=1)]
        rows = [row for row in await gather_all(calls) if row is not None]
        done[0] += 1
        print(f"gen-scenarios: {metric.id} done ({count} scenarios, {len(rows)} variants) "
              f"[{done[0]}/{len(spec.metrics)}]", file=sys.stderr, flush=True)
        return rows

    async def everything() -> list[dict[str, Any]]:
        per = await gather_all([per_metric(i, m) for i, m in enumerate(spec.metrics)])
        return [row for rows in per for row in rows]

    try:
        rows = engine.run(everything())
    finally:
        engine.close()
    if not rows and failed:
        raise UnusableAnswer(failed[0])
    scenario_rows_schema_check(rows, out_path)
    usage = usage_by_phase.get("gen_scenarios", Usage())
    dump_json(out_path, [versioned(r) for r in rows], bench_dir)
    write_cost(bench_dir, "gen_scenarios", usage)
    added = add_run_roles(bench_dir)
    load_scenarios(bench_dir, load_spec(bench_dir))  # the file the plugin will read loads as written
    return Summary(out_path, len(rows), usage, engine.stats.requests, engine.stats.cache_hits,
                   sorted(engine.prices.unpriced),
                   detail=f"scenario rows ({len(spec.metrics)} metrics x {count} scenarios x {len(combos)} "
                          "variants)", added=added, failed=sorted(failed))


_PYTEST_TO_CLI = ((re.compile(r"--evalbench-cache=(\w+)"), r"--cache \1"),
                  (re.compile(r"--evalbench-base-url\b"), "--base-url"),
                  (re.compile(r"--evalbench-(?:user|judge)-model\b"), "--model"),
                  (re.compile(r"--evalbench-provider\b"), "--provider"),
                  (re.compile(r"--evalbench-concurrency\b"), "--concurrency"))


def cli_hints(message: str) -> str:
    """Messages shared with the pytest plugin name its options; here the CLI's own options are meant."""
    for pattern, replacement in _PYTEST_TO_CLI:
        message = pattern.sub(replacement, message)
    return message


def carried(options: AuthoringOptions) -> tuple[str, str, str]:
    """What the next command needs of this one's options, as printed: a `cd ROOT && ` prefix (when
    the root is not the working directory), the CLI's options and the same as pytest options. An
    endpoint's credentials are never printed (export them instead)."""
    cd = cd_prefix(options.root)
    cli, plugin = [], []
    if options.base_url:
        url = shlex.quote(strip_credentials(options.base_url))
        cli.append(f"--base-url {url}")
        plugin.append(f"--evalbench-base-url={url}")
    if options.provider:
        cli.append(f"--provider {options.provider}")
        plugin.append(f"--evalbench-provider={options.provider}")
    if options.model:
        cli.append(f"--model {shlex.quote(options.model)}")
        plugin.append(f"--evalbench-user-model={shlex.quote(options.model)}")
    return cd, "".join(f" {o}" for o in cli), "".join(f" {o}" for o in plugin)


def run_command(command: str, name: str, options: AuthoringOptions) -> int:
    """CLI entry: run one command; any EvalbenchError is one stderr line and exit code 2; rows that
    could not be written after the bounded re-asks are named and exit 1 (the good rows are kept)."""
    commands = {"gen-metrics": gen_metrics, "gen-scenarios": gen_scenarios}
    try:
        summary = commands[command](name, options)
    except EvalbenchError as exc:
        print(terminal(f"evalbench: error: {cli_hints(' '.join(str(exc).split()))}"), file=sys.stderr)
        return 2
    print(summary.line(command))
    cd, cli, plugin = carried(options)
    if summary.added:
        print(f"{command}: added {' and '.join(summary.added)} to {summary.path.parent / SPEC_FILE} (the user "
              "model's, with a comment), so the benchmark runs: point them at the models to test and to judge with")
    if summary.failed:
        for line in summary.failed:
            print(terminal(f"{command}: not written: {cli_hints(' '.join(line.split()))}"), file=sys.stderr)
        print(f"next: fill only the gaps (the written rows come from the cache), run: "
              f"{cd}evalbench {command} {name} --force --cache on{cli}")
        return 1
    if command == "gen-metrics":
        force = " --force" if (summary.path.parent / SCENARIOS_FILE).exists() else ""  # gen-scenarios keeps it otherwise
        print(f"next: review the metrics in {summary.path}, then run: {cd}evalbench gen-scenarios {name}{force}{cli}")
    else:
        print(f"next: review {summary.path}, then run: {cd}pytest --benchmark={name}{plugin}")
    return 0


_RUN_ROLES_COMMENT = ("# Added by evalbench gen-scenarios so that `pytest --benchmark={name}` runs: the model under test\n"
                      "# and the judge (`evaluator_model`), here the user model's. Point them at the models you mean\n"
                      "# to test and to judge with.\n")


def add_run_roles(bench_dir: Path) -> list[str]:
    """Append `targets` and `evaluator_model` (the user model's) to benchmark.yaml when missing, with a
    comment, keeping every other line; returns the keys added."""
    path = bench_dir / SPEC_FILE
    text = read_text(path)
    data = parse_yaml(text, path)
    if not isinstance(data, dict) or not isinstance(data.get("user_model"), dict):
        return []
    user = {k: v for k, v in data["user_model"].items() if k != "headers"}  # headers stay where the author put them
    block: dict[str, Any] = {}
    if not data.get("targets"):
        block["targets"] = [{"id": "assistant", **user}]
    if not data.get("evaluator_model"):
        block["evaluator_model"] = dict(data["user_model"])
    if not block:
        return []
    newline = "\r\n" if "\r\n" in text else "\n"
    addition = _RUN_ROLES_COMMENT.format(name=bench_dir.name) + yaml.safe_dump(
        block, sort_keys=False, allow_unicode=True, default_flow_style=False, width=100)
    prefix = "" if not text or text.endswith(("\n", "\r")) else newline
    new_text = text + prefix + addition.replace("\n", newline)
    validate_as(BenchmarkSpec, yaml.safe_load(new_text), path)
    atomic_write_text(path, new_text, bench_dir)
    return list(block)


COST_FILE = "cost.json"
_METRICS_KEY_RE = re.compile(r"""^(?:metrics|"metrics"|'metrics')[ \t]*:(?:[ \t]|\r?\n|$)""")
_NOT_A_KEY_START = frozenset(" \t#-]},\r\n")

# --------------------------------------------------------------------------- files


def write_cost(bench_dir: Path, phase: str, usage: Usage) -> None:
    """Set one phase key of `<bench>/cost.json`, keeping the others (an unreadable file is an error)."""
    update_cost_file(bench_dir / COST_FILE, {phase: usage}, bench_dir)


def _is_top_level_key(line: str) -> bool:
    """A column-0 line that starts a mapping key (not a comment, list item, flow closer or doc marker)."""
    return bool(line) and line[0] not in _NOT_A_KEY_START and not line.startswith("...")


def replace_metrics_block(text: str, metrics: list[dict[str, Any]]) -> str:
    """Replace only the top-level `metrics:` block (or append one), keeping every other line.

    The block runs from the `metrics:` line to the next top-level key; blank lines and column-0
    comments just before that key belong to the key and stay.
    """
    newline = "\r\n" if "\r\n" in text else "\n"
    block = yaml.safe_dump({"metrics": metrics}, sort_keys=False, allow_unicode=True, default_flow_style=False,
                           width=100)
    if newline != "\n":
        block = block.replace("\n", newline)
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if _METRICS_KEY_RE.match(line)), None)
    if start is None:
        if text and not text.endswith(("\n", "\r")):
            text += newline
        return text + block
    end = start + 1
    while end < len(lines) and not _is_top_level_key(lines[end]):
        end += 1
    while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].startswith("#")):
        end -= 1
    return "".join(lines[:start]) + block + "".join(lines[end:])


def write_metrics(bench_dir: Path, metrics: list[dict[str, Any]]) -> BenchmarkSpec:
    """Splice the metrics into benchmark.yaml, prove nothing else changed and that it validates,
    then write it atomically; returns the spec as written."""
    path = bench_dir / SPEC_FILE
    text = read_text(path)
    before = parse_yaml(text, path)
    new_text = replace_metrics_block(text, metrics)
    try:
        after = yaml.safe_load(new_text)
    except yaml.YAMLError:
        after = None
    unchanged = (isinstance(before, dict) and isinstance(after, dict)
                 and {k: v for k, v in before.items() if k != "metrics"}
                 == {k: v for k, v in after.items() if k != "metrics"}
                 and after.get("metrics") == metrics)
    if not unchanged:
        raise InputError(path, "cannot replace the top-level `metrics:` block safely (unusual layout); write it "
                         "as a plain block (`metrics:` at column 0) and rerun (the answer is cached)")
    spec: BenchmarkSpec = validate_as(BenchmarkSpec, after, path)
    atomic_write_text(path, new_text, bench_dir)
    return spec


def scenario_rows_schema_check(rows: list[dict[str, Any]], path: Path) -> None:
    """Every row against the Scenario model, then the whole list against the shipped JSON Schema."""
    for row in rows:
        validate_as(Scenario, row, path, row=row.get("id"))
    try:
        jsonschema.validate(rows, schemas.load("scenarios"))
    except jsonschema.ValidationError as exc:
        where = field_path(list(exc.absolute_path), rows, by_id=False).replace(".", "/")
        raise InputError(path, f"generated rows violate scenarios.schema.json at {where or '/'}: "
                         f"{exc.message}") from None
