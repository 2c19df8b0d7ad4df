"""The one summary object every human-facing output (terminal, HTML, Markdown, history) renders.

Built once per session on the controller from the kind's results (`kinds.KindResults`), the
gate's decision (through `gate_view`), the run's metadata and the engine's counters. Renderers
read this object only; none of them recomputes a number, so the three outputs always agree.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..gate.compare import metric_counts
from ..gate.rows import OutcomeRow
from ..gate.stats import Z95, RateEstimate, newcombe_diff_interval
from ..kinds import KindResults
from ..llm.engine import EngineStats
from ..provenance import carried_label, git_commit, unit_key
from .gate_view import GateView

if TYPE_CHECKING:
    from ..dataset.summary import AgentComparison, AgentSummary, CaseResult
    from ..scenarios.models import ConversationRow, ScoreRow

VARIANT_SUFFIX = "_v"
PASS_RATE = "pass rate"
"""The metric name of a dataset agent's case pass rate in rate rows (its evals are means, not rates)."""


@dataclass
class RateRow:
    """One target × metric pass rate with its 95% interval and, with a baseline, the change."""

    target: str
    metric: str
    name: str | None
    type: str | None
    k: int
    n: int
    rate: float | None
    low: float
    high: float
    baseline: float | None = None
    change: float | None = None
    change_low: float | None = None
    change_high: float | None = None
    significant_drop: bool = False
    flips_down: int | None = None
    flips_up: int | None = None
    measured: bool = True
    """False when no row behind this rate was scored in this session (carried over from earlier runs)."""
    carried_from: str | None = None
    """With `measured` False: the session the rows come from, e.g. `2026-11-24T10:00Z abc1234`."""
    gate_k: int | None = None
    gate_n: int | None = None
    gate_rate: float | None = None
    """The numbers the gate used, where they differ from the observed k/n (e.g. an unreliable judge's rows left out)."""
    gate_note: str | None = None
    """Why the gate's numbers differ from the observed ones, e.g. `m02's judge is unreliable`."""

    def provenance_label(self) -> str:
        """'' for a rate measured in this session; otherwise a label every surface shows beside it."""
        if self.measured:
            return ""
        return "carried over" + (f" from {self.carried_from}" if self.carried_from else "")


@dataclass
class CostView:
    """What the run cost: this session's network spend and the priced total of the results."""

    spent: float
    """Dollars sent over the network in this session (cache hits cost nothing now)."""
    total: float
    """Priced usage of every call behind this session's items, cached replays included."""
    requests: int
    cache_hits: int
    retries: int
    input_tokens: int
    output_tokens: int
    unpriced: list[str]
    phases: dict[str, dict[str, Any]] = field(default_factory=dict)
    """`phase:role` -> tokens and priced cost (cached replays included)."""

    @property
    def note(self) -> str:
        """One sentence saying whether cached replays are counted, and what has no price."""
        text = (f"${self.spent:.4f} spent this run; ${self.total:.4f} priced usage of the results, "
                f"cached replays included (as in cost.json)")
        if self.unpriced:
            text += "; no price for " + ", ".join(self.unpriced) + " (counted as $0; add `pricing:` to benchmark.yaml)"
        return text


@dataclass
class DemographicGap:
    """The best and worst value of one demographic axis and the 95% interval of their difference."""

    best: str
    worst: str
    low: float
    high: float


@dataclass
class DemographicGroup:
    """One target × metric × demographic axis: the pass rate per axis value."""

    target: str
    metric: str
    metric_name: str | None
    axis: str
    values: list[tuple[str, RateEstimate]]
    flagged: bool = False
    """The best and worst value differ beyond noise (`gap` excludes 0)."""
    gap: DemographicGap | None = None


@dataclass
class TranscriptView:
    """One conversation with its judgments and the status they add up to (shown, never decided here)."""

    conversation: ConversationRow
    status: str
    judgments: list[ScoreRow]


@dataclass
class ScenarioView:
    """A scenario run for people: demographics, every transcript, and the baseline's warnings."""

    demographics: list[DemographicGroup]
    transcripts: list[TranscriptView]
    """At most `MAX_TRANSCRIPTS`, failed and unscored first."""
    warnings: list[str]
    transcripts_total: int = 0
    """How many conversations the run files hold in all."""

    def to_json(self) -> dict[str, Any]:
        return {"demographics": [{**asdict(g), "values": [{"value": v, **est.to_dict()} for v, est in g.values]}
                                 for g in self.demographics],
                "transcripts": [{"conversation": t.conversation.to_json(), "status": t.status,
                                 "judgments": [j.to_json() for j in t.judgments]} for t in self.transcripts],
                "transcripts_total": self.transcripts_total, "warnings": self.warnings}


@dataclass
class DatasetView:
    """A dataset run for people: the per-agent summaries and per-case rows as the kind made them, the
    per-agent per-eval means with intervals, and the comparative pairs."""

    agents: list[AgentSummary]
    evals: list[dict[str, Any]]
    cases: list[CaseResult]
    comparisons: list[AgentComparison]

    def to_json(self) -> dict[str, Any]:
        return {"agents": [a.to_json() for a in self.agents], "evals": self.evals,
                "cases": [c.to_json() for c in self.cases],
                "comparisons": [c.model_dump(mode="json") for c in self.comparisons]}


@dataclass
class RunSummary:
    """Everything people read about one run."""

    benchmark: str
    kind: str
    title: str
    created: str
    plugin_version: str
    commit: str | None
    models: dict[str, list[str]]
    cost: CostView
    gate: GateView
    rates: list[RateRow]
    recorded: int
    errored: int
    failed: int
    errors: list[str] = field(default_factory=list)
    """Item errors collapsed by message: `"500 items: <message>"`, most frequent first."""
    scenario: ScenarioView | None = None
    dataset: DatasetView | None = None
    files: list[tuple[str, str]] = field(default_factory=list)
    """(what, path) of every result file this session wrote, in the order written."""
    notes: list[str] = field(default_factory=list)
    """Lines about completeness, dropped rows and the judge's reliability, shown as they are."""
    history: list[dict[str, Any]] = field(default_factory=list)
    commands: dict[str, str] = field(default_factory=dict)
    """Pasteable commands (`commands.session_commands`): `flipped`, `failed`, `record`."""
    scope: str = "full"
    """`full`: every case of the configured benchmark was selected; `selection`: a node id, -k, -m,
    --lf, a shard or --evalbench-target chose fewer (the gate reads the rows the session measured)."""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["cost"]["note"] = self.cost.note
        if self.dataset is not None:
            data["dataset"] = self.dataset.to_json()
        if self.scenario is not None:
            data["scenario"] = self.scenario.to_json()
        return data

    def rate_table(self) -> dict[str, dict[str, float | None]]:
        """{target: {metric: rate}}: the shape history lines and trend charts use."""
        table: dict[str, dict[str, float | None]] = defaultdict(dict)
        for row in self.rates:
            table[row.target][row.metric] = None if row.rate is None else round(row.rate, 4)
        return dict(table)


# --------------------------------------------------------------------------- building


def collapse_errors(messages: dict[str, str]) -> list[str]:
    """Identical error messages across items become one line: `"500 items: <message>"`."""
    counts = Counter(messages.values())
    return [f"{n} item{'s' if n != 1 else ''}: {msg}" for msg, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def models_of(meta: dict[str, Any]) -> dict[str, list[str]]:
    """Models per role from the run's metadata (`BenchmarkRun.meta()`)."""
    roles: dict[str, list[str]] = {}
    targets = meta.get("targets") or {}
    if targets:
        roles["target"] = [f"{tid}={model}" if tid != model else str(model) for tid, model in sorted(targets.items())]
    for role, key in (("user", "user_model"), ("judge", "judge_model")):
        if meta.get(key):
            roles[role] = [str(meta[key])]
    return roles


def cost_view(stats: EngineStats) -> CostView:
    usage = list(stats.usage.values())
    return CostView(spent=round(stats.spent, 6), total=round(sum(u.cost for u in usage), 6),
                    requests=stats.requests, cache_hits=stats.cache_hits, retries=stats.retries,
                    input_tokens=sum(u.input_tokens for u in usage), output_tokens=sum(u.output_tokens for u in usage),
                    unpriced=sorted(stats.unpriced),
                    phases={k: v.to_json() for k, v in sorted(stats.usage.items())})


def scenario_rates(written: KindResults, comparison: dict[str, Any] | None) -> list[RateRow]:
    """Per target × metric: the rate of the rows this session measured or, where it measured none,
    the rate carried over from earlier sessions (`measured` False, naming the session)."""
    current: list[OutcomeRow] = []
    carried: list[OutcomeRow] = []
    for score in written.scores:
        unit = score.outcome_row()
        measured = written.measured is None or unit_key(unit.target, unit.id, unit.sample) in written.measured
        (current if measured else carried).append(unit)
    counts = metric_counts([], current)
    changes = {(e["target"], e["metric_id"]): e for e in (comparison or {}).get("entries", [])}
    rows = []
    for target in sorted(counts):
        for mid in sorted(counts[target]):
            entry = counts[target][mid]
            est = RateEstimate.of(entry.n_passed, entry.n_total)
            row = RateRow(target, mid, entry.metric_name, entry.metric_type, est.k, est.n, est.rate,
                          est.low, est.high)
            change = changes.get((target, mid))
            if change is not None:
                paired = change.get("paired") or {}
                row.baseline = (change.get("baseline") or {}).get("rate")
                row.change = change.get("change")
                row.change_low = paired.get("low", change.get("change_low"))
                row.change_high = paired.get("high", change.get("change_high"))
                row.significant_drop = bool(change.get("significant_drop"))
                row.flips_down, row.flips_up = paired.get("b"), paired.get("c")
            rows.append(row)
    old = metric_counts([], carried)
    keys: dict[tuple[str, str], list[str]] = defaultdict(list)
    for unit in carried:
        keys[(unit.target, unit.metric_id)].append(unit_key(unit.target, unit.id, unit.sample))
    for target in sorted(old):
        for mid in sorted(set(old[target]) - set(counts.get(target, {}))):
            entry = old[target][mid]
            est = RateEstimate.of(entry.n_passed, entry.n_total)
            rows.append(RateRow(target, mid, entry.metric_name, entry.metric_type, est.k, est.n, est.rate, est.low,
                                est.high, measured=False, carried_from=carried_label(keys[(target, mid)], written.sessions)))
    return sorted(rows, key=lambda r: (r.target, r.metric))


def demographic_groups(scores: Iterable[ScoreRow], conversations: Iterable[ConversationRow]) -> list[DemographicGroup]:
    """Pass rate per target × metric × demographic axis value, with intervals, and a flag where the
    best and worst value differ beyond noise (their 95% Newcombe difference interval excludes 0).
    Rows without a demographic are not kept; equal demographics share one dict (a benchmark has a
    few variants, and 100,000 rows)."""
    demo: dict[str, dict[str, str]] = {}
    variants: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
    for c in conversations:
        if c.demographic:
            demo[c.id] = variants.setdefault(tuple(c.demographic.items()), c.demographic)
        else:
            demo.pop(c.id, None)
    counts: dict[tuple[str, str, str], dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    names: dict[str, str] = {}
    for row in scores:
        if row.passed is None:
            continue
        names.setdefault(row.metric_id, row.metric_name or "")
        for axis, value in demo.get(row.id, {}).items():
            k_n = counts[(row.target_model, row.metric_id, axis)][str(value)]
            k_n[0] += row.passed
            k_n[1] += 1
    out = []
    for (target, mid, axis), by_value in sorted(counts.items()):
        values = [(v, RateEstimate.of(k, n)) for v, (k, n) in sorted(by_value.items())]
        group = DemographicGroup(target, mid, names.get(mid), axis, values)
        scored = [(v, est) for v, est in values if est.n]
        if len(scored) > 1:
            best = max(scored, key=lambda v: v[1].rate or 0.0)
            worst = min(scored, key=lambda v: v[1].rate or 0.0)
            low, high = newcombe_diff_interval(worst[1].k, worst[1].n, best[1].k, best[1].n, Z95)
            group.gap = DemographicGap(best[0], worst[0], low, high)
            group.flagged = low > 0
        out.append(group)
    return out


MAX_TRANSCRIPTS = 2000
"""Conversations the report shows at most: every failed and unscored one first (up to this many),
then passed ones; a run of 100,000 items would otherwise be a report nobody can open."""


def transcripts(scores: Iterable[ScoreRow], conversations: Iterable[ConversationRow],
                limit: int = MAX_TRANSCRIPTS) -> tuple[list[TranscriptView], int]:
    """Conversations with their judgments (verdict and justification), sorted by target and id: at
    most `limit`, failed and unscored first; and how many conversations there are in all. (A
    conversation's shown status summarises its rows' verdicts; it decides nothing.) Two passes over
    `scores` (they may stream from disk): statuses first, then the judgments of shown conversations."""
    statuses: dict[tuple[str, int], str] = {}
    for row in scores:
        key = (row.conv_id, row.sample)
        status = "unscored" if row.passed is None else "passed" if row.passed else "failed"
        before = statuses.get(key)
        statuses[key] = status if before is None else ("unscored" if "unscored" in (before, status) else
                                                       "failed" if "failed" in (before, status) else "passed")
    problems = sorted(k for k, v in statuses.items() if v != "passed")
    passed = sorted(k for k, v in statuses.items() if v == "passed")
    shown = set(problems[:limit]) | set(passed[:max(0, limit - len(problems))])
    del problems, passed
    judgments: dict[tuple[str, int], list[ScoreRow]] = {key: [] for key in shown}
    for row in scores:
        judged = judgments.get((row.conv_id, row.sample))
        if judged is not None:
            judged.append(row)
    out: list[TranscriptView] = []
    total = 0
    for conv in conversations:
        total += 1
        key = (conv.conv_id, conv.sample)
        if key not in shown and (key in statuses or len(out) >= limit):
            continue  # never judged: unscored, shown while there is room
        out.append(TranscriptView(conv, statuses.get(key, "unscored"), judgments.get(key, [])))
    out.sort(key=lambda v: (v.conversation.target.id, v.conversation.conv_id, v.conversation.sample))
    return out, total


def mean_interval(values: list[float], bounds: tuple[float, float] = (1.0, 5.0)) -> dict[str, Any]:
    """Mean with a normal-approximation 95% interval, clipped to the scale's `bounds` (shown with n:
    for tiny n the interval is rough)."""
    n = len(values)
    if not n:
        return {"mean": None, "low": None, "high": None, "n": 0}
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    half = Z95 * sd / math.sqrt(n)
    return {"mean": round(mean, 4), "low": round(max(bounds[0], mean - half), 4),
            "high": round(min(bounds[1], mean + half), 4), "n": n}


def dataset_view(written: KindResults) -> tuple[DatasetView, list[RateRow]]:
    """Per-agent summary, per-agent per-eval means with intervals, the per-case rows and any
    comparative pairs the kind computed (a `comparisons` list, shown as given)."""
    scores: dict[tuple[str, str], list[float]] = defaultdict(list)
    for case in written.cases:
        for metric in case.metrics:
            if metric.score is not None:
                scores[(case.agent_name, metric.eval)].append(float(metric.score))
    evals = [{"agent": agent, "eval": name, **mean_interval(values)} for (agent, name), values in sorted(scores.items())]
    rates = []
    by_agent: dict[str, dict[str, CaseResult]] = defaultdict(dict)
    for case in written.cases:
        by_agent[case.agent_name][unit_key(case.agent_name, case.case_id)] = case
    for agent in written.agents:  # the cases this session measured, else the agent's carried-over rate
        keys = by_agent[agent.agent_name]
        ran = [c for key, c in keys.items() if written.measured is not None and key in written.measured]
        scored = [c for c in ran if c.status != "unscored"]
        measured = written.measured is None or bool(ran)
        est = (RateEstimate.of(sum(1 for c in scored if c.passed), len(scored)) if ran
               else RateEstimate.of(agent.n_passed, agent.n_scored))
        rates.append(RateRow(agent.agent_name, PASS_RATE, "cases passed", None, est.k, est.n, est.rate,
                             est.low, est.high, measured=measured,
                             carried_from=None if measured else carried_label(keys, written.sessions)))
    comparisons = [c for agent in written.agents for c in agent.comparisons]
    return DatasetView(written.agents, evals, written.cases, comparisons), rates


def build_summary(*, kind: str, written: KindResults | None, gate: GateView, meta: dict[str, Any],
                  stats: EngineStats, errors: dict[str, str], recorded: int, failed: int, root: Path,
                  files: list[tuple[str, str]], notes: list[str] | None = None) -> RunSummary:
    """The summary of this session. `errors` maps node ids to their one-line error messages."""
    benchmark = str(meta.get("benchmark") or "")
    summary = RunSummary(benchmark=benchmark, kind=kind, title=f"evalbench: {benchmark}",
                         created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), plugin_version=__version__,
                         commit=git_commit(root), models=models_of(meta), cost=cost_view(stats), gate=gate, rates=[],
                         recorded=recorded, errored=len(errors), failed=failed, errors=collapse_errors(errors),
                         files=list(files), notes=list(notes or []))
    if written is None:
        return summary
    if written.view == "cases":
        summary.dataset, summary.rates = dataset_view(written)
    elif written.view == "rates":
        summary.rates = scenario_rates(written, gate.comparison)
        shown, total = transcripts(written.scores, written.conversations)
        summary.scenario = ScenarioView(demographic_groups(written.scores, written.conversations), shown,
                                        list((gate.comparison or {}).get("meta_warnings") or []), total)
    return summary
