"""`evalbench rejudge NAME`: judge every stored transcript k more times, without calling a target
or the simulated user, and write how far the new judgments agree (runs/<target>/rejudge.json).

The new calls are ordinary judge calls through the engine (cached, priced, budgeted, redacted), but
under vote indices no run uses (`FIRST_VOTE` and up, above `judge: {samples}`'s maximum of 25), so
the stored judgments' cache entries never answer them; a second rejudge with the same k replays the
first one's answers unless `--cache refresh` asks again. Rows a deterministic check decided, and
conversations without an assistant reply, are not re-judged (counted as `skipped`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pytest_evalbench.base.errors import ConfigError
from pytest_evalbench.base.files import results_lock, versioned, write_json
from pytest_evalbench.formats.spec import SPEC_FILE, BenchmarkSpec, load_spec, resolve_benchmark_dir
from pytest_evalbench.kinds.judges import vote_sample
from pytest_evalbench.kinds.labels import contrast_examples
from pytest_evalbench.kinds.metric_judge import Example, judge
from pytest_evalbench.kinds.protocol import spec_kind
from pytest_evalbench.kinds.run import DEFAULT_MAX_TOKENS, RunSettings, open_engine, resolve_endpoint, role_endpoint
from pytest_evalbench.kinds.scenarios.aggregate import (
    RejudgedCase,
    RejudgedTranscript,
    RejudgeReport,
    rejudge_by_metric,
    rejudged,
)
from pytest_evalbench.kinds.scenarios.models import ConversationRow, ScoreRow
from pytest_evalbench.kinds.scenarios.store import RUNS_DIR, Known, read_file_rows
from pytest_evalbench.llm.engine import Engine
from pytest_evalbench.llm.types import Endpoint, EngineSettings, Usage

FIRST_VOTE = 1000
"""Vote index of the first re-judgment (`panel.vote_sample`): above any `judge: {samples}` of a run."""
RESULT_FILE = "rejudge.json"


@dataclass
class RejudgeOptions:
    """What the command line decides."""

    root: Path
    samples: int = 3
    temperature: float | None = None
    cache: str = "on"
    base_url: str | None = None
    judge_model: str | None = None
    concurrency: int = 8
    max_cost: float | None = None
    targets: list[str] = field(default_factory=list)


@dataclass
class RejudgeResult:
    reports: list[tuple[Path, RejudgeReport]]
    requests: int
    cache_hits: int
    usage: Usage
    """Priced usage of the new judgments, cached replays included."""
    spent: float
    """Dollars sent over the network by this command (cache hits cost nothing now)."""


def judges_of(spec: BenchmarkSpec, settings: RunSettings, env: Mapping[str, str], temperature: float | None,
              bench_dir: Path) -> list[Endpoint]:
    """The run's judge panel (as `BenchmarkRun` resolves it), with `temperature` if given."""
    first = role_endpoint(spec.evaluator_model, settings.judge_model, settings, env,
                          max_tokens=DEFAULT_MAX_TOKENS["judge"])
    panel = [] if settings.judge_model else [resolve_endpoint(c, settings, env, max_tokens=DEFAULT_MAX_TOKENS["judge"])
                                             for c in spec.evaluator_models]
    judges = ([first] if first else []) + panel
    if not judges:
        raise ConfigError(f"{bench_dir / SPEC_FILE}: no `evaluator_model` to re-judge with; add it or pass --judge-model")
    missing = sorted({name for j in judges for name in j.missing_env})
    if missing and settings.cache_mode != "replay":
        raise ConfigError(f"environment variable{'s' if len(missing) > 1 else ''} not set: {', '.join(missing)} "
                          "(needed by the judge)")
    if temperature is not None:
        judges = [dataclasses.replace(j, params={**j.params, "temperature": temperature}) for j in judges]
    return judges


def stored_runs(bench_dir: Path, targets: list[str]) -> list[Path]:
    """runs/<target>/ of every target with both stored files; a clear error when there is none."""
    runs = bench_dir / RUNS_DIR
    found = [d for d in sorted(runs.iterdir()) if (d / "scores.json").is_file() and (d / "conversations.json").is_file()] \
        if runs.is_dir() else []
    if targets:
        unknown = sorted(set(targets) - {d.name for d in found})
        if unknown:
            raise ConfigError(f"no stored run for target {', '.join(repr(t) for t in unknown)} in {runs}; stored: "
                              f"{', '.join(d.name for d in found) or 'none'}")
        found = [d for d in found if d.name in targets]
    if not found:
        raise ConfigError(f"no stored run to re-judge: {runs} has no <target>/scores.json with its "
                          f"conversations.json; run `pytest --benchmark={bench_dir.name}` first")
    return found


async def _rejudge_target(run_dir: Path, spec: BenchmarkSpec, known: Known, judges: list[Endpoint], k: int,
                          engine: Engine, usage_by_phase: dict[str, Usage], contrast: dict[str, list[Example]]
                          ) -> tuple[list[RejudgedCase], int]:
    conversations = {(str(r["id"]), int(r.get("sample") or 0)): r
                     for r in read_file_rows(run_dir, "conversations.json", known)}
    work: list[tuple[ScoreRow, ConversationRow]] = []
    skipped = 0
    for raw in read_file_rows(run_dir, "scores.json", known):
        row = ScoreRow.model_validate(raw)
        conversation = conversations.get((row.id, row.sample))
        if row.decided_by == "check" or conversation is None or spec.metric(row.metric_id) is None:
            skipped += 1
            continue
        parsed = ConversationRow.model_validate(conversation)
        if not any(m.role == "assistant" for m in parsed.transcript):
            skipped += 1
            continue
        work.append((row, parsed))

    async def votes(row: ScoreRow, conversation: ConversationRow) -> list[bool | None]:
        metric = spec.metric(row.metric_id)
        assert metric is not None
        asks = [judge(metric, conversation.transcript, evaluator=j, engine=engine,
                      sample=vote_sample(row.sample, FIRST_VOTE + i), usage_by_phase=usage_by_phase,
                      style=spec.judge_style(metric), contrast=contrast.get(metric.id, ()))
                for j in judges for i in range(k)]
        return [v.present for v in await asyncio.gather(*asks)]

    answers = await asyncio.gather(*[votes(row, conv) for row, conv in work])
    cases: dict[str, RejudgedCase] = {}
    for (row, _), new in zip(work, answers):
        case = cases.setdefault(row.id, RejudgedCase(id=row.id, metric_id=row.metric_id, samples=[], judge_noise=False))
        transcript: RejudgedTranscript = rejudged(row.sample, row.present, new)
        case.samples.append(transcript)
        case.judge_noise = case.judge_noise or transcript.split
    return list(cases.values()), skipped


def rejudge(name: str, options: RejudgeOptions, env: Mapping[str, str]) -> RejudgeResult:
    """Re-judge every stored run of benchmark `name` and write each target's rejudge.json."""
    bench_dir = resolve_benchmark_dir(options.root / "benchmarks", name, option="")
    spec = load_spec(bench_dir)
    if spec_kind(spec).judged != "metrics":  # the registry names kinds; a kind says what its judge decides
        raise ConfigError(f"{bench_dir / SPEC_FILE}: kind is {spec.kind!r}; rejudge re-judges scenario transcripts")
    run_dirs = stored_runs(bench_dir, options.targets)
    settings = RunSettings(benchmark=name, judge_model=options.judge_model, base_url=options.base_url,
                           cache_mode=options.cache)
    judges = judges_of(spec, settings, env, options.temperature, bench_dir)
    engine = open_engine(bench_dir, spec, EngineSettings(concurrency=options.concurrency, max_cost=options.max_cost),
                         options.cache)
    known = Known({m.id: (m.name, m.type) for m in spec.metrics})
    usage_by_phase: dict[str, Usage] = {}
    reports: list[tuple[Path, RejudgeReport]] = []
    try:
        for run_dir in run_dirs:
            cases, skipped = engine.run(_rejudge_target(run_dir, spec, known, judges, options.samples, engine, usage_by_phase,
                                                                 contrast_examples(bench_dir, spec)))
            temperature = judges[0].params.get("temperature")
            reports.append((run_dir / RESULT_FILE, RejudgeReport(
                target=run_dir.name, k=options.samples, judges=[j.model for j in judges],
                temperature=float(temperature) if isinstance(temperature, (int, float)) else None,
                created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), skipped=skipped, cases=cases,
                by_metric=rejudge_by_metric(cases))))
    finally:
        engine.close()
    with results_lock(bench_dir):
        for path, report in reports:
            write_json(path, versioned(report.model_dump(mode="json")), bench_dir)
    return RejudgeResult(reports, engine.stats.requests, engine.stats.cache_hits, usage_by_phase.get("evaluate", Usage()),
                         engine.stats.spent)


def summary_lines(result: RejudgeResult, base: Path) -> list[str]:
    """What the command prints: per target and metric the agreements, then the cases with judge noise."""
    def num(v: float | None) -> str:
        return "n/a" if v is None else f"{v:.2f}"

    lines: list[str] = []
    for path, report in result.reports:
        n = sum(len(c.samples) for c in report.cases)
        lines.append(f"rejudge {report.target}: {n} stored transcript{'s' if n != 1 else ''} judged {report.k} more "
                     f"time{'s' if report.k != 1 else ''} by {', '.join(report.judges)} ({report.skipped} skipped: "
                     "decided by a check or no reply)")
        for metric, m in report.by_metric.items():
            lines.append(f"  {metric}: new judgments agree with each other {num(m.self_agreement)}, with the stored "
                         f"judgment {num(m.stored_agreement)}; {m.split} of {m.transcripts} transcripts split, "
                         f"{m.flipped} flipped")
        noisy = [c for c in report.cases if c.judge_noise]
        for case in noisy[:50]:
            split = sum(1 for t in case.samples if t.split)
            lines.append(f"  judge noise: {case.id} ({case.metric_id}): {split} of {len(case.samples)} transcripts split")
        if len(noisy) > 50:
            lines.append(f"  ... and {len(noisy) - 50} more cases with judge noise (see {RESULT_FILE})")
        lines.append(f"  wrote {_shown(path, base)}")
    lines.append(f"llm: {result.requests} judge requests sent by this command, {result.cache_hits} answered from the "
                 f"cache (replaying an earlier rejudge's judgments); ${result.spent:.4f} spent now, "
                 f"${result.usage.cost:.4f} priced usage, {result.usage.input_tokens} in / "
                 f"{result.usage.output_tokens} out tokens")
    return lines


def _shown(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


