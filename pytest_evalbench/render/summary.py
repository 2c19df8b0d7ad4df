"""The one summary object every surface of a run renders (terminal, Markdown/step summary, report.html,
JUnit properties) and the history line written from it (`history.jsonl`: one JSON line per run, read
back for trends).

Built once per session on the controller from the kind's results (`KindResults`), the gate's decision (a
typed `GateVerdict`), the run's metadata, the engine's counters and the status of each selected item.
Renderers read this object only and show a rate through `RateRow.rate_text` and a case through its
documented status (`views.CASE_STATUSES`); none of them recomputes a number, so every surface agrees
(tests/integration/test_one_summary.py parses them all).
"""

from __future__ import annotations

import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_evalbench.base import __version__
from pytest_evalbench.base.errors import EvalbenchWarning, InputError
from pytest_evalbench.base.files import finite_json, open_append, read_bounded, version_problem, versioned
from pytest_evalbench.base.json_input import parse_json
from pytest_evalbench.base.numbers import Probability, number_problem
from pytest_evalbench.base.safe_text import cut
from pytest_evalbench.gate.decision import Failures, GateVerdict
from pytest_evalbench.kinds.protocol import KindResults
from pytest_evalbench.llm.engine import EngineStats
from pytest_evalbench.render.rates import (
    Conversation,
    DemographicCounts,
    Demographics,
    FlakyCase,
    PassKRow,
    RateCounts,
    RateRow,
    flaky_cases,
    pass_k_rows,
    reliability_lines,
)
from pytest_evalbench.render.views import (
    CASE_STATUSES,
    NOT_DRAWN,
    PASSED,
    DatasetView,
    Passes,
    ScenarioView,
    dataset_view,
    error_group,
    transcripts,
)

if TYPE_CHECKING:
    from pytest_evalbench.formats.scenario_rows import ScoreRow


@dataclass(slots=True)
class CaseStatus:
    """One selected item of this session and its documented status (`CASE_STATUSES`), with why
    when it is not `passed` (the failure's first line, the unscored judgment's or error's reason).
    Slotted: the summary holds one per item (docs/performance.md, the memory bound)."""

    nodeid: str
    status: str
    reason: str = ""


UNPRICED_NAMED = 5
"""How many models without a price the cost note names (the rest are counted)."""
MODEL_NAME_CHARS = 60


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
    tool_calls: int = 0
    """MCP tool calls run on a server in this session."""
    tool_replays: int = 0
    """MCP tool results replayed from the cache (no server involved)."""
    batched: int = 0
    """Calls sent in provider batches in this session (not in `requests`, which are synchronous)."""
    cached_tokens: int = 0
    """Input tokens the provider read from its prompt cache (priced at its cache-read rate)."""
    saved: float = 0.0
    """Dollars those cache reads saved against the input price."""

    @property
    def note(self) -> str:
        """One sentence saying whether cached replays are counted, what the provider's prompt cache
        saved, and what has no price."""
        text = (f"${self.spent:.4f} spent this run; ${self.total:.4f} priced usage of the results, "
                f"cached replays included (as in cost.json)")
        if self.cached_tokens:
            text += (f"; {self.cached_tokens:,} input tokens read from the provider's prompt cache, "
                     f"saving ${self.saved:.4f}")
        if self.tool_calls or self.tool_replays:
            text += (f"; MCP tools: {self.tool_calls} calls run on a server this session, "
                     f"{self.tool_replays} replayed from the cache")
        if self.unpriced:
            more = len(self.unpriced) - UNPRICED_NAMED
            named = ", ".join(cut(model, MODEL_NAME_CHARS) for model in self.unpriced[:UNPRICED_NAMED])
            text += ("; no price for " + named + (f" and {more:,} more models" if more > 0 else "")
                     + " (counted as $0, so --evalbench-max-cost "
                     "cannot limit them; add `pricing:` to benchmark.yaml)")
        return text


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
    failures: Failures = field(default_factory=Failures)
    """This session's failed cases by who decided them (a check or the judge)."""

    def status_counts(self) -> dict[str, int]:
        """Items of this session per documented status (only statuses that occur, in `CASE_STATUSES` order)."""
        counts = Counter(c.status for c in self.cases)
        return {s: counts[s] for s in CASE_STATUSES if counts[s]}

    def failed_text(self) -> str:
        """`2 failed (2 decided by a check)`: this session's failed items, by who decided them."""
        by = self.failures.deciders() if self.failures.total == self.failed else ""
        return f"{self.failed} failed" + (f" {by}" if by else "")

    def status_line(self) -> str:
        """`cases: 1 passed, 2 failed, 1 judge unreliable` (this session's items)."""
        return "cases: " + (", ".join(f"{n} {s}" for s, n in self.status_counts().items()) or "none")

    def rate_notes(self) -> tuple[list[str], list[str]]:
        """Lines said above and below the rates table: that a selection's rates are of its rows only,
        and what corrected a `corrected` rate."""
        measured = [r for r in self.rates if r.measured]
        if not measured:
            return [], []
        above = ([f"rates of this selection only ({len(self.cases)} selected item{'s' if len(self.cases) != 1 else ''}), "
                  "not of the whole benchmark"] if self.scope == "selection" else [])
        below = (["corrected: the judge-decided rows corrected for the judge's error rates measured on "
                  "labelled examples (calibration.json)"] if any(r.corrected is not None for r in measured) else [])
        return above, below

    def problem_cases(self) -> list[CaseStatus]:
        """This session's items that did not pass, with their statuses and reasons (a sample not drawn
        is no problem: the case counts say how many there were)."""
        return [c for c in self.cases if c.status not in (PASSED, NOT_DRAWN)]
    commands: dict[str, str] = field(default_factory=dict)
    """Pasteable commands (`commands.session_commands`): `flipped`, `failed`, `record`."""
    scope: str = "full"
    """`full`: every case of the configured benchmark was selected; `selection`: a node id, -k, -m,
    --lf, a shard or --evalbench-target chose fewer (the gate reads the rows the session measured)."""
    pass_k: list[PassKRow] = field(default_factory=list)
    """pass^k and pass@k per target × metric (results.json `pass_k`), with num_samples > 1."""
    flaky: list[FlakyCase] = field(default_factory=list)
    """Flaky cases (scores.json `flaky`), at most `flakiness.MAX_FLAKY`; `flaky_total` counts them all."""
    flaky_total: int = 0

    def reliability_lines(self) -> list[str]:
        """pass^k / pass@k and the flaky cases, as every surface shows them."""
        return reliability_lines(self.pass_k, self.flaky, self.flaky_total)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["gate"] = self.gate.to_json()
        data["cost"]["note"] = self.cost.note
        if self.dataset is not None:
            data["dataset"] = self.dataset.to_json()
        if self.scenario is not None:
            data["scenario"] = self.scenario.to_json()
        return data

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
                    phases={k: v.to_json() for k, v in sorted(stats.usage.items())},
                    tool_calls=stats.tool_calls, tool_replays=stats.tool_replays, batched=stats.batch_lines,
                    cached_tokens=sum(u.cached_tokens for u in usage), saved=round(sum(u.saved for u in usage), 6))


def build_summary(*, kind: str, written: KindResults | None, gate: GateVerdict, meta: dict[str, Any],
                  stats: EngineStats, errors: dict[str, str], recorded: int, failed: int, commit: str | None,
                  files: list[tuple[str, str]], notes: list[str] | None = None,
                  cases: list[CaseStatus] | None = None) -> RunSummary:
    """The summary of this session. `errors` maps node ids to their one-line error messages;
    `cases` are this session's items with their documented statuses; `commit` is the one git gave the
    session (asked once, by the caller)."""
    benchmark = str(meta.get("benchmark") or "")
    summary = RunSummary(benchmark=benchmark, kind=kind, title=f"evalbench: {benchmark}",
                         created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), plugin_version=__version__,
                         commit=commit, models=models_of(meta), cost=cost_view(stats), gate=gate, rates=[],
                         recorded=recorded, errored=len(errors), failed=failed, errors=collapse_errors(errors),
                         files=list(files), notes=list(notes or []), cases=list(cases or []))
    if written is None:
        return summary
    if written.view == "none":
        summary.kind_table = list(written.table or [])
    if written.view == "cases":
        summary.dataset, summary.rates = dataset_view(written)
    elif written.view == "rates":
        comparison = gate.decision.comparison
        demographics = Demographics()  # noted in the one pass over the conversations that transcripts makes
        rates, groups = RateCounts(written), DemographicCounts(demographics)  # noted in its two passes over scores
        as_written = getattr(written.conversations, "as_written", None)  # a scenario run's rows this finish wrote:
        conversations: Iterable[Conversation] = as_written() if as_written else written.conversations  # not validated
        scores = Passes(written.scores, rates.tap, groups.tap)
        of_conversations = getattr(written.scores, "of_conversations", None)  # a scenario run's rows on disk

        def judged(keys: set[tuple[str, int]]) -> Iterable[ScoreRow]:
            """The judgments' pass: every row when one has a demographic to count (`groups.tap`), else
            only the shown conversations' rows (the others are not validated again)."""
            return scores if demographics.by_id or of_conversations is None else of_conversations(keys)

        shown, total = transcripts(scores, demographics.tap(conversations), unreliable=written.unreliable,
                                   judged=judged)
        summary.rates = rates.rows(comparison)
        summary.pass_k = pass_k_rows(written.results if written.summaries is None else written.summaries)
        if summary.pass_k or written.judge_lines:  # a case can be flaky only with samples or a judge panel:
            summary.flaky, summary.flaky_total = flaky_cases(written.scores)  # else no third pass over scores
        summary.scenario = ScenarioView(groups.groups(), shown,
                                        list(comparison.meta_warnings if comparison is not None else []), total)
    return summary


HISTORY = "history.jsonl"
TREND_RUNS = 30
"""The HTML report draws each rate's trend over at most this many recorded runs."""


def history_entry(summary: RunSummary) -> dict[str, Any]:
    """The line one run appends: time, commit, models, the per-target/metric rates this session
    measured (none when it is incomplete: its numbers are no trend point; rates carried over from
    earlier sessions never are) with their counts (and the gate's k/n where it differs), whether it
    was complete and a full run, case statuses, cost, the gate's verdict and rules."""
    complete = not summary.gate.decision.incomplete and summary.gate.exit_code in (0, 1, 6)
    rates: dict[str, dict[str, float | None]] = {}
    for row in summary.rates if complete else []:
        if row.measured:
            rates.setdefault(row.target, {})[row.metric] = None if row.rate is None else round(row.rate, 4)
    counts = {t: {m: c for m, c in metrics.items() if m in rates[t]}
              for t, metrics in summary.count_table().items() if t in rates}
    return {"time": summary.created, "commit": summary.commit, "benchmark": summary.benchmark,
            "models": summary.models, "rates": rates, "complete": complete, "scope": summary.scope,
            "counts": counts, "cases": summary.status_counts(),
            "cost": {"spent": summary.cost.spent, "total": summary.cost.total},
            "gate": {"verdict": summary.gate.verdict, "exit_code": summary.gate.exit_code,
                     "rules": summary.gate.rule_lines}}


def read_history(path: Path, limit: int = TREND_RUNS) -> list[dict[str, Any]]:
    """The last `limit` well-formed entries of full runs, the trend's points (a torn or hand-edited
    line is skipped, not fatal; a selection's rates describe other rows than a full run's, so its
    line is kept in the file but is no trend point; lines written before `scope` existed count)."""
    try:
        lines = read_bounded(path).decode("utf-8", "replace").splitlines()
    except OSError:
        return []
    entries = []
    for number, line in enumerate(lines, start=1):
        try:
            entry = parse_json(line, path, row=number)
        except InputError as exc:  # a torn line silently; a 400-digit rate or deep nesting named
            if not exc.message.startswith("invalid JSON"):
                warnings.warn(EvalbenchWarning(f"{exc}; line ignored"), stacklevel=2)
            continue
        if version_problem(entry) is not None:  # a newer format's line: not read, like a torn one
            continue
        if isinstance(entry, dict) and isinstance(entry.get("rates"), dict) and entry.get("scope", "full") == "full":
            problem = _rates_problem(entry["rates"])
            if problem is None:
                entries.append(entry)
            else:  # a planted 1e308 or 400-digit rate: one line naming it, the line is no trend point
                warnings.warn(EvalbenchWarning(f"{path}:{number}, field 'rates.{problem[0]}': {problem[1]}; "
                                               "line ignored"), stacklevel=2)
    return entries[-limit:]


def _rates_problem(rates: dict[str, Any]) -> tuple[str, str] | None:
    """(`target.metric`, why) for the first rate of a history line that is not a probability or null."""
    for target, metrics in rates.items():
        if not isinstance(metrics, dict):
            return target, f"{type(metrics).__name__}, not an object of rates"
        for metric, rate in metrics.items():
            problem = None if rate is None else number_problem(Probability, rate)
            if problem is not None:
                return f"{target}.{metric}", problem
    return None


def append_history(path: Path, summary: RunSummary) -> None:
    """Append this run's line in one write; after a torn last line (a killed writer) start a new line,
    so only the torn entry is lost. The file lives in the benchmark directory and is never a link."""
    line = finite_json(versioned(history_entry(summary)), path, sort_keys=True, ensure_ascii=False) + "\n"
    with open_append(path, path.parent) as fh:
        if fh.tell() > 0:
            fh.seek(-1, 2)
            if fh.read(1) != b"\n":
                line = "\n" + line
        fh.write(line.encode("utf-8"))
