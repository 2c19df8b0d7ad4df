"""What the report shows of a run beyond its rates (scenario transcripts with their judgments and
demographics, the dataset's per-agent, per-eval and per-case views), and the one set of case statuses
every surface shows (docs/reference/case-statuses.md).

A case (one test item) is `passed`, `failed`, `unscored` (the judge's answer could not be used), `judge
unreliable` (a failure whose verdict rests on a judge calibration found unreliable; pytest reports it as
xfailed and it cannot fail the build), `not drawn` (a sample sequential sampling did not draw: its
case was settled by the samples before it; pytest reports it as skipped), `error` (an LLM, app or
plugin error, a crash or a skip) or `not run` (selected but never reported). Terminal, Markdown,
report.html, JUnit (`evalbench_status` property), results and history use these words and no others.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from pytest_evalbench.formats.provenance import carried_label, unit_key
from pytest_evalbench.formats.stats import Z95
from pytest_evalbench.kinds.judges import judged_unreliably
from pytest_evalbench.kinds.protocol import KindResults
from pytest_evalbench.render.rates import (
    PASS_RATE,
    Conversation,
    DemographicGroup,
    RateRow,
    _carried_row,
    _counts,
    _note,
    _rate_row,
)

PASSED, FAILED, UNSCORED, JUDGE_UNRELIABLE, NOT_DRAWN, ERROR, NOT_RUN = (
    "passed", "failed", "unscored", "judge unreliable", "not drawn", "error", "not run")
CASE_STATUSES = (PASSED, FAILED, UNSCORED, JUDGE_UNRELIABLE, NOT_DRAWN, ERROR, NOT_RUN)


def case_status(status: str, convicts: bool = True) -> str:
    """The documented status of a scored row from the kind's verdict (passed/failed/unscored) and
    whether its failure may convict the build."""
    return JUDGE_UNRELIABLE if status == FAILED and not convicts else status


_VARIABLE_PARTS = [
    (re.compile(r"0x[0-9a-fA-F]+"), "0x…"),
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<id>"),
    (re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{12,}\b"), "<id>"),
    (re.compile(r"\b((?:req|request|chatcmpl|run|call|msg|id)[-_])[A-Za-z0-9]{6,}\b"), r"\1<id>"),
    (re.compile(r"((?:localhost|\d{1,3}(?:\.\d{1,3}){3}|\]|[A-Za-z0-9-]\.[A-Za-z]{2,}):)\d{2,5}\b"), r"\1<port>"),
    (re.compile(r"\b(port)[ =]\d{2,5}\b", re.IGNORECASE), r"\1 <port>"),
    (re.compile(r"\b\d+(?:\.\d+)?\s?(ms|s|sec|seconds)\b"), r"<n>\1"),
]
"""Variable parts of error messages (addresses, ids, ports, elapsed times) so one cause is one group."""


def error_group(message: str) -> str:
    """The message with its variable parts replaced by placeholders (`0x…`, `<id>`, `<port>`, `<n>s`)."""
    for pattern, replacement in _VARIABLE_PARTS:
        message = pattern.sub(replacement, message)
    return message


def error_line(message: str) -> str:
    """The one line an error is listed by: its first line and, when the message goes on (a traceback),
    its last line, which says what was raised; two errors that only start alike stay apart."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    if len(lines) < 2:
        return lines[0] if lines else ""
    return lines[0] + (" " if lines[0].endswith(":") else " … ") + lines[-1]


if TYPE_CHECKING:
    from pytest_evalbench.formats.dataset_rows import AgentComparison, AgentSummary, CaseResult
    from pytest_evalbench.formats.scenario_rows import ConversationRow, ScoreRow

T = TypeVar("T")


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


def transcripts(scores: Iterable[ScoreRow], conversations: Iterable[Conversation],
                limit: int = MAX_TRANSCRIPTS, unreliable: dict[str, str] | None = None,
                judged: Callable[[set[tuple[str, int]]], Iterable[ScoreRow]] | None = None,
                ) -> tuple[list[TranscriptView], int]:
    """Conversations with their judgments (verdict and justification), sorted by target and id: at
    most `limit`, failed and unscored first; and how many conversations there are in all. (A
    conversation's shown status summarises its rows' verdicts; it decides nothing.) Two passes over
    `scores` (they may stream from disk): statuses first, then (after the conversations) the judgments
    of shown conversations (from `judged(their keys)` when given: rows of those at least, in pass order)."""
    from pytest_evalbench.kinds.scenarios.run_rows import WrittenConversation  # a scenario run's (a dataset run never gets here)

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
    out: list[TranscriptView] = []
    total = 0
    for conv in conversations:  # before the judgments' pass: a tap of that pass may need what this one noted
        total += 1
        key = (conv.conv_id, conv.sample)
        if key not in shown and (key in statuses or len(out) >= limit):
            continue  # never judged: unscored, shown while there is room
        shown_row = conv.validated() if isinstance(conv, WrittenConversation) else cast("ConversationRow", conv)
        if shown_row is not None:
            out.append(TranscriptView(shown_row, statuses.get(key, UNSCORED), judgments.get(key, []), unreliable or {}))
    for row in scores if judged is None else judged(set(judgments)):  # the shown views' judgment lists fill in place
        found = judgments.get((row.conv_id, row.sample))
        if found is not None:
            found.append(row)
    out.sort(key=lambda v: (v.conversation.target.id, v.conversation.conv_id, v.conversation.sample))
    return out, total


class Passes(Generic[T]):
    """`rows` (read from disk on every pass) whose successive passes each go through the next of
    `taps` (generators that note what passes by), so consumers that each need a pass share one."""

    def __init__(self, rows: Iterable[T], *taps: Callable[[Iterable[T]], Iterator[T]]) -> None:
        self.rows, self.taps = rows, list(taps)

    def __iter__(self) -> Iterator[T]:
        return self.taps.pop(0)(self.rows) if self.taps else iter(self.rows)


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
    for out in written.units:
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
