"""The one summary object every surface of a run renders: terminal, Markdown/step summary,
report.html, JUnit properties and history.jsonl.

Built once per session on the controller from the kind's results (`kinds.KindResults`), the
gate's decision (a typed `GateVerdict`), the run's metadata, the engine's counters and the status
of each selected item. Renderers read this object only and show a rate through `RateRow.rate_text`
and a case through its documented status (`status.CASE_STATUSES`); none of them recomputes a
number, so every surface agrees (tests/integration/test_one_summary.py parses them all).
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
from ..gate.paired import Comparison
from ..gate.stats import Z95, RateEstimate, newcombe_diff_interval
from ..gate.verdict import GateVerdict
from ..kinds import KindResults
from ..llm.engine import EngineStats
from ..provenance import carried_label, git_commit, unit_key
from ..reliability import judged_unreliably
from .status import CASE_STATUSES, FAILED, JUDGE_UNRELIABLE, PASSED, UNSCORED, error_group

if TYPE_CHECKING:
    from ..dataset.summary import AgentComparison, AgentSummary, CaseResult
    from ..scenarios.models import ConversationRow, ScoreRow

VARIANT_SUFFIX = "_v"
PASS_RATE = "pass rate"
"""The metric name of a dataset agent's case pass rate in rate rows (its evals are means, not rates)."""
POSITIVE, NEGATIVE = "(positive)", "(negative)"
"""The metric names of a scenario target's pass rate over all its positive / negative metrics' rows."""


@dataclass
class CaseStatus:
    """One selected item of this session and its documented status (`CASE_STATUSES`), with why
    when it is not `passed` (the failure's first line, the unscored judgment's or error's reason)."""

    nodeid: str
    status: str
    reason: str = ""


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
    unscored: int = 0
    """Rows of this target x metric that are unscored (never in k/n): `unscored (n)` when all are."""

    def provenance_label(self) -> str:
        """'' for a rate measured in this session; otherwise a label every surface shows beside it."""
        if self.measured:
            return ""
        return "carried over" + (f" from {self.carried_from}" if self.carried_from else "")

    @property
    def gate_differs(self) -> bool:
        return self.gate_n is not None and (self.gate_k, self.gate_n) != (self.k, self.n)

    def observed_text(self) -> str:
        """`1/2 (0.50)`, `1/2 (0.50), 1 unscored` or `unscored (3)` (every row unscored)."""
        if not self.n:
            return f"unscored ({self.unscored})" if self.unscored else "0/0 (–)"
        text = f"{self.k}/{self.n} ({self.rate:.2f})" if self.rate is not None else f"{self.k}/{self.n}"
        return text + (f", {self.unscored} unscored" if self.unscored else "")

    def rate_text(self) -> str:
        """The rate as every surface shows it: observed k/n and rate; where the gate used other
        numbers, both, labelled (`observed 1/2 (0.50); gate 1/1 (1.00): m02's judge is unreliable`);
        and the provenance label of a carried-over rate."""
        text = self.observed_text()
        if self.gate_differs:
            gate = "–" if self.gate_rate is None else f"{self.gate_rate:.2f}"
            text = f"observed {text}; gate {self.gate_k}/{self.gate_n} ({gate})" + (
                f": {self.gate_note}" if self.gate_note else "")
        label = self.provenance_label()
        return f"{text} [{label}]" if label else text

    def interval_text(self) -> str:
        return f"[{self.low:.2f}, {self.high:.2f}]" if self.n else "–"


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
            text += ("; no price for " + ", ".join(self.unpriced) + " (counted as $0, so --evalbench-max-cost "
                     "cannot limit them; add `pricing:` to benchmark.yaml)")
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
    unreliable: dict[str, str] = field(default_factory=dict)

    def judgment_statuses(self) -> list[str]:
        """Each judgment's documented status, in order."""
        return [row_status(j, self.unreliable) for j in self.judgments]


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
    comparisons: list[tuple[str, AgentComparison]]
    """(agent, its comparison with `other`): the agent's scores minus the other's, paired by scenario."""
    unreliable: dict[str, str] = field(default_factory=dict)

    def status(self, case: CaseResult) -> str:
        """The case's documented status (`CASE_STATUSES`)."""
        return dataset_case_status(case, self.unreliable)

    def to_json(self) -> dict[str, Any]:
        return {"agents": [a.to_json() for a in self.agents], "evals": self.evals,
                "cases": [{**c.to_json(), "status": self.status(c)} for c in self.cases],
                "comparisons": [{"agent": agent, **c.model_dump(mode="json")} for agent, c in self.comparisons]}


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
    gate: GateVerdict
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
    cases: list[CaseStatus] = field(default_factory=list)
    """This session's selected items with their documented statuses, in node-id order."""
    kind_table: list[str] = field(default_factory=list)
    """A kind without rates or cases to show (calibration): its own table, shown as it is."""

    def status_counts(self) -> dict[str, int]:
        """Items of this session per documented status (only statuses that occur, in `CASE_STATUSES` order)."""
        counts = Counter(c.status for c in self.cases)
        return {s: counts[s] for s in CASE_STATUSES if counts[s]}

    def status_line(self) -> str:
        """`cases: 1 passed, 2 failed, 1 judge unreliable` (this session's items)."""
        return "cases: " + (", ".join(f"{n} {s}" for s, n in self.status_counts().items()) or "none")

    def problem_cases(self) -> list[CaseStatus]:
        """This session's items that did not pass, with their statuses and reasons."""
        return [c for c in self.cases if c.status != PASSED]
    commands: dict[str, str] = field(default_factory=dict)
    """Pasteable commands (`commands.session_commands`): `flipped`, `failed`, `record`."""
    scope: str = "full"
    """`full`: every case of the configured benchmark was selected; `selection`: a node id, -k, -m,
    --lf, a shard or --evalbench-target chose fewer (the gate reads the rows the session measured)."""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["gate"] = self.gate.to_json()
        data["cost"]["note"] = self.cost.note
        if self.dataset is not None:
            data["dataset"] = self.dataset.to_json()
        if self.scenario is not None:
            data["scenario"] = self.scenario.to_json()
        return data

    def rate_table(self) -> dict[str, dict[str, float | None]]:
        """{target: {metric: rate}}: the shape history lines and trend charts use (observed rates)."""
        table: dict[str, dict[str, float | None]] = defaultdict(dict)
        for row in self.rates:
            table[row.target][row.metric] = None if row.rate is None else round(row.rate, 4)
        return dict(table)

    def count_table(self) -> dict[str, dict[str, dict[str, Any]]]:
        """{target: {metric: {k, n, unscored[, gate_k, gate_n, gate_note][, carried_from]}}} for history lines."""
        table: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
        for row in self.rates:
            entry: dict[str, Any] = {"k": row.k, "n": row.n, "unscored": row.unscored}
            if row.gate_differs:
                entry.update(gate_k=row.gate_k, gate_n=row.gate_n, gate_note=row.gate_note)
            if not row.measured:
                entry["carried_from"] = row.carried_from
            table[row.target][row.metric] = entry
        return dict(table)


# --------------------------------------------------------------------------- building


def collapse_errors(messages: dict[str, str]) -> list[str]:
    """Error messages across items that differ only in variable parts (`error_group`) become one
    line: `"500 items: <message>"`."""
    counts = Counter(error_group(m) for m in messages.values())
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


def _note(metrics: Iterable[str], unreliable: dict[str, str]) -> str | None:
    """Why the gate's numbers leave rows out: `m02's judge is unreliable`."""
    names = sorted(m for m in set(metrics) if m in unreliable)
    if not names:
        return None
    if len(names) == 1:
        return f"{names[0]}'s judge is unreliable"
    return f"the judges of {', '.join(names[:-1])} and {names[-1]} are unreliable"


def _counts() -> defaultdict[tuple[str, str], list[int]]:
    return defaultdict(lambda: [0, 0, 0])


def scenario_rates(written: KindResults, comparison: Comparison | None) -> list[RateRow]:
    """Per target: the pass rate over its positive and over its negative metrics' rows, then one
    row per metric. Over the rows this session measured: observed k/n (unscored rows counted apart;
    a metric whose rows are all unscored stays as `unscored (n)`) and the gate's k/n where it leaves
    rows out (an unreliable judge's). A metric or target this session measured no row of shows the
    rate of the rows carried over from earlier sessions, `measured` False and naming the session."""
    observed, carried, gated = _counts(), _counts(), _counts()
    carried_keys: defaultdict[tuple[str, str], list[str]] = defaultdict(list)
    labels: dict[str, tuple[str | None, str | None]] = {}
    for score in written.scores:
        labels.setdefault(score.metric_id, (score.metric_name, score.metric_type))
        unit = unit_key(score.target_model, score.id, score.sample)
        measured = written.measured is None or unit in written.measured
        for key in ((score.target_model, score.metric_id), (score.target_model, score.metric_type)):
            entry = (observed if measured else carried)[key]
            entry[2 if score.passed is None else 1] += 1
            entry[0] += bool(score.passed)
            if not measured:
                carried_keys[key].append(unit)
    for out in written.outcomes:
        for key in ((out.target, out.metric_id), (out.target, out.metric_type or "")):
            entry = gated[key]
            entry[2 if out.passed is None else 1] += 1
            entry[0] += bool(out.passed)

    def rate(target: str, metric: str, name: str | None, mtype: str | None, key: tuple[str, str],
             note: str | None) -> RateRow:
        if key in observed:
            return _rate_row(target, metric, name, mtype, observed[key], gated.get(key), note)
        return _carried_row(target, metric, name, mtype, carried[key], carried_label(carried_keys[key], written.sessions))
    changes = {(t.target, t.metric_id): t for t in (comparison.tests if comparison is not None else [])
               if t.kind == "pass/fail"}
    metrics_of: dict[str, set[str]] = defaultdict(set)
    for target, mid in [*observed, *carried]:
        if mid in labels:
            metrics_of[target].add(mid)
    rows = []
    for target in sorted(metrics_of):
        for polarity, name in (("positive", POSITIVE), ("negative", NEGATIVE)):
            members = [m for m in metrics_of[target] if labels[m][1] == polarity]
            if members:
                rows.append(rate(target, name, f"all {polarity} metrics", polarity, (target, polarity),
                                 _note(members, written.unreliable)))
        for mid in sorted(metrics_of[target]):
            row = rate(target, mid, labels[mid][0], labels[mid][1], (target, mid), _note([mid], written.unreliable))
            test = changes.get((target, mid))
            if test is not None:
                row.baseline, row.change = test.baseline_mean, test.change
                row.change_low, row.change_high = test.low, test.high
                row.significant_drop = test.significant
                row.flips_down, row.flips_up = test.b, test.c
            rows.append(row)
    return rows


def _rate_row(target: str, metric: str, name: str | None, mtype: str | None, seen: list[int],
              gate: list[int] | None, note: str | None) -> RateRow:
    """A rate row from observed [passed, scored, unscored] counts and the gate's (None: no gated row)."""
    est = RateEstimate.of(seen[0], seen[1])
    row = RateRow(target, metric, name, mtype, est.k, est.n, est.rate, est.low, est.high, unscored=seen[2])
    gate_k, gate_n = (gate[0], gate[1]) if gate is not None else (0, 0)
    if (gate_k, gate_n) != (row.k, row.n):
        row.gate_k, row.gate_n = gate_k, gate_n
        row.gate_rate = gate_k / gate_n if gate_n else None
        row.gate_note = note or "rows outside the gate"
    return row


def _carried_row(target: str, metric: str, name: str | None, mtype: str | None, seen: list[int],
                 carried_from: str) -> RateRow:
    """A rate this session measured no row of: the rows carried over from earlier sessions, labelled."""
    est = RateEstimate.of(seen[0], seen[1])
    return RateRow(target, metric, name, mtype, est.k, est.n, est.rate, est.low, est.high, unscored=seen[2],
                   measured=False, carried_from=carried_from)


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


def row_status(row: ScoreRow, unreliable: dict[str, str]) -> str:
    """A score row's documented status (`CASE_STATUSES`)."""
    if row.passed is None:
        return UNSCORED
    if row.passed:
        return PASSED
    return JUDGE_UNRELIABLE if judged_unreliably(unreliable, row.metric_id, row.decided_by) else FAILED


_WORST_FIRST = (UNSCORED, FAILED, JUDGE_UNRELIABLE, PASSED)


def transcripts(scores: Iterable[ScoreRow], conversations: Iterable[ConversationRow],
                limit: int = MAX_TRANSCRIPTS, unreliable: dict[str, str] | None = None
                ) -> tuple[list[TranscriptView], int]:
    """Conversations with their judgments (verdict and justification), sorted by target and id: at
    most `limit`, failed and unscored first; and how many conversations there are in all. (A
    conversation's shown status summarises its rows' verdicts; it decides nothing.) Two passes over
    `scores` (they may stream from disk): statuses first, then the judgments of shown conversations."""
    statuses: dict[tuple[str, int], str] = {}
    for row in scores:
        key = (row.conv_id, row.sample)
        status = row_status(row, unreliable or {})
        before = statuses.get(key)
        statuses[key] = status if before is None else min(before, status, key=_WORST_FIRST.index)
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
        out.append(TranscriptView(conv, statuses.get(key, UNSCORED), judgments.get(key, []), unreliable or {}))
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


def dataset_case_status(case: CaseResult, unreliable: dict[str, str]) -> str:
    """A dataset case's documented status: a failure resting on an unreliable judge's eval is `judge unreliable`."""
    if case.status == FAILED and any(m.score is not None and m.eval in unreliable for m in case.metrics):
        return JUDGE_UNRELIABLE
    return case.status


def dataset_view(written: KindResults) -> tuple[DatasetView, list[RateRow]]:
    """Per-agent summary, per-agent per-eval means with intervals (an eval without a score stays,
    as `unscored (n)`), the per-case rows and any comparative pairs the kind computed; the rate
    rows: each agent's case pass rate, observed and, where it leaves cases out, the gate's."""
    scores: dict[tuple[str, str], list[float]] = defaultdict(list)
    unscored: Counter[tuple[str, str]] = Counter()
    for case in written.cases:
        for metric in case.metrics:
            if metric.score is not None:
                scores[(case.agent_name, metric.eval)].append(float(metric.score))
            elif not metric.not_applicable:
                unscored[(case.agent_name, metric.eval)] += 1
    evals = [{"agent": agent, "eval": name, **mean_interval(scores.get((agent, name), [])),
              "unscored": unscored[(agent, name)]} for agent, name in sorted(set(scores) | set(unscored))]
    gated = _counts()
    for out in written.outcomes:
        entry = gated[(out.target, "")]
        entry[2 if out.passed is None else 1] += 1
        entry[0] += bool(out.passed)
    by_agent: dict[str, dict[str, CaseResult]] = defaultdict(dict)
    for case in written.cases:
        by_agent[case.agent_name][unit_key(case.agent_name, case.case_id)] = case
    rates = []
    for agent in written.agents:  # the cases this session measured, else the agent's carried-over rate
        keys = by_agent[agent.agent_name]
        if written.measured is None:
            ran, seen = list(keys.values()), [agent.n_passed, agent.n_scored, agent.n_unscored]
        else:
            ran = [c for key, c in keys.items() if key in written.measured]
            scored = [c for c in ran if c.status != "unscored"]
            seen = [sum(1 for c in scored if c.passed), len(scored), len(ran) - len(scored)]
        if not ran and written.measured is not None:
            rates.append(_carried_row(agent.agent_name, PASS_RATE, None, None,
                                      [agent.n_passed, agent.n_scored, agent.n_unscored],
                                      carried_label(keys, written.sessions)))
            continue
        left_out = {m.eval for c in ran for m in c.metrics if m.score is not None and m.eval in written.unreliable}
        rates.append(_rate_row(agent.agent_name, PASS_RATE, None, None, seen, gated.get((agent.agent_name, "")),
                               _note(left_out, written.unreliable)))
    comparisons = [(agent.agent_name, c) for agent in written.agents for c in agent.comparisons]
    return DatasetView(written.agents, evals, written.cases, comparisons, dict(written.unreliable)), rates


def build_summary(*, kind: str, written: KindResults | None, gate: GateVerdict, meta: dict[str, Any],
                  stats: EngineStats, errors: dict[str, str], recorded: int, failed: int, root: Path,
                  files: list[tuple[str, str]], notes: list[str] | None = None,
                  cases: list[CaseStatus] | None = None) -> RunSummary:
    """The summary of this session. `errors` maps node ids to their one-line error messages;
    `cases` are this session's items with their documented statuses."""
    benchmark = str(meta.get("benchmark") or "")
    summary = RunSummary(benchmark=benchmark, kind=kind, title=f"evalbench: {benchmark}",
                         created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), plugin_version=__version__,
                         commit=git_commit(root), models=models_of(meta), cost=cost_view(stats), gate=gate, rates=[],
                         recorded=recorded, errored=len(errors), failed=failed, errors=collapse_errors(errors),
                         files=list(files), notes=list(notes or []), cases=list(cases or []))
    if written is None:
        return summary
    if written.view == "none":
        summary.kind_table = list(written.table or [])
    if written.view == "cases":
        summary.dataset, summary.rates = dataset_view(written)
    elif written.view == "rates":
        summary.rates = scenario_rates(written, gate.comparison)
        shown, total = transcripts(written.scores, written.conversations, unreliable=written.unreliable)
        summary.scenario = ScenarioView(demographic_groups(written.scores, written.conversations), shown,
                                        list(gate.comparison.meta_warnings if gate.comparison is not None else []), total)
    return summary
