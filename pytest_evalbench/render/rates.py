"""Rate rows every surface shows: per target and metric the observed k/n with its interval, the gate's k/n
where it differs, the change against the baseline, rates carried over from earlier sessions, the pass
rate per demographic value of scenario runs, and flaky cases with pass^k / pass@k (computed in
kinds/scenarios/aggregate.py, read here from scores.json rows and results.json entries: no number is
recomputed).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Union

from pytest_evalbench.formats.agreement import CorrectedRate, StrataCounter
from pytest_evalbench.formats.provenance import carried_label, unit_key
from pytest_evalbench.formats.stats import Z95, RateEstimate, newcombe_diff_interval
from pytest_evalbench.kinds.protocol import KindResults

if TYPE_CHECKING:
    from pytest_evalbench.formats.scenario_rows import ConversationRow, ScoreRow
    from pytest_evalbench.gate.paired import Comparison

PASS_RATE = "pass rate"
"""The metric name of a dataset agent's case pass rate in rate rows (its evals are means, not rates)."""
POSITIVE, NEGATIVE = "(positive)", "(negative)"
"""The metric names of a scenario target's pass rate over all its positive / negative metrics' rows
(shown where two or more metrics of that polarity are pooled)."""


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
    corrected: CorrectedRate | None = None
    """With a calibration on file: the judge-decided part of this rate corrected for the judge's errors."""

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
        if self.corrected is not None:
            text += f"; {self.corrected.text()}"
        label = self.provenance_label()
        return f"{text} [{label}]" if label else text

    def interval_text(self) -> str:
        return f"[{self.low:.2f}, {self.high:.2f}]" if self.n else "–"


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


class RateCounts:
    """What `scenario_rates` counts of the score rows, noted as they pass by (`tap`), so the summary's
    pass over a run's scores (read from disk, a pass each) that finds the transcripts' statuses
    serves the rates too."""

    def __init__(self, written: KindResults) -> None:
        self.written = written
        self.observed, self.carried, self.gated = _counts(), _counts(), _counts()
        self.carried_keys: defaultdict[tuple[str, str], list[str]] = defaultdict(list)
        self.labels: dict[str, tuple[str | None, str | None]] = {}
        self.strata = StrataCounter()  # observed rows by decider, for the corrected rates

    def tap(self, scores: Iterable[ScoreRow]) -> Iterator[ScoreRow]:
        written, observed, carried, carried_keys = self.written, self.observed, self.carried, self.carried_keys
        labels, strata = self.labels, self.strata
        for score in scores:
            labels.setdefault(score.metric_id, (score.metric_name, score.metric_type))
            unit = unit_key(score.target_model, score.id, score.sample)
            measured = written.measured is None or unit in written.measured
            if measured and written.accuracy:
                strata.add(score.target_model, (score.metric_id, score.metric_type), score.metric_id, score.metric_type,
                           score.passed, score.decided_by)
            for key in ((score.target_model, score.metric_id), (score.target_model, score.metric_type)):
                entry = (observed if measured else carried)[key]
                entry[2 if score.passed is None else 1] += 1
                entry[0] += bool(score.passed)
                if not measured:
                    carried_keys[key].append(unit)
            yield score

    def rows(self, comparison: Comparison | None) -> list[RateRow]:
        """The rate rows, once every score row has passed through `tap`."""
        written, observed, carried, gated = self.written, self.observed, self.carried, self.gated
        carried_keys, labels, strata = self.carried_keys, self.labels, self.strata
        for out in written.units:
            for key in ((out.target, out.metric_id), (out.target, out.metric_type or "")):
                entry = gated[key]
                entry[2 if out.passed is None else 1] += 1
                entry[0] += bool(out.passed)

        def rate(target: str, metric: str, name: str | None, mtype: str | None, key: tuple[str, str],
                 note: str | None) -> RateRow:
            if key in observed:
                row = _rate_row(target, metric, name, mtype, observed[key], gated.get(key), note)
                if written.accuracy:
                    row.corrected = strata.corrected(key[0], key[1], written.accuracy)
                return row
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
                if len(members) > 1:  # one metric's pool would repeat that metric's row
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


class Deferred(Protocol):
    """A conversations.json row as this session's finish wrote it (`scenarios.run_rows.WrittenConversation`):
    the reports' pass over every row reads its key and demographic; it is validated only when shown."""

    @property
    def id(self) -> str: ...
    @property
    def conv_id(self) -> str: ...
    @property
    def sample(self) -> int: ...
    @property
    def demographic(self) -> dict[str, str]: ...
    def validated(self) -> ConversationRow | None:
        """The row's model; None when it is not usable (changed since it was written)."""


Conversation = Union["ConversationRow", Deferred]
"""What the pass over a run's conversations reads: rows, or rows this finish wrote (`Deferred`)."""


class Demographics:
    """Scenario id -> its conversations' demographic, noted as the conversations pass by (`tap`), so
    the pass that shows transcripts also serves `demographic_groups`. Rows without a demographic
    are not kept; equal demographics share one dict (a benchmark has a few variants, and 100,000 rows)."""

    def __init__(self) -> None:
        self.by_id: dict[str, dict[str, str]] = {}
        self._variants: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}

    def tap(self, conversations: Iterable[Conversation]) -> Iterator[Conversation]:
        for c in conversations:
            if c.demographic:
                self.by_id[c.id] = self._variants.setdefault(tuple(c.demographic.items()), c.demographic)
            else:
                self.by_id.pop(c.id, None)
            yield c


class DemographicCounts:
    """What `demographic_groups` counts of the score rows, noted as they pass by (`tap`, once the
    conversations' pass has noted their demographics), so the summary's pass over a run's scores that
    collects the shown transcripts' judgments serves the demographics too."""

    def __init__(self, demographics: Demographics) -> None:
        self.demographics = demographics
        self.counts: dict[tuple[str, str, str], dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
        self.names: dict[str, str] = {}

    def tap(self, scores: Iterable[ScoreRow]) -> Iterator[ScoreRow]:
        demo, counts, names = self.demographics.by_id, self.counts, self.names
        for row in scores:
            if row.passed is not None:
                names.setdefault(row.metric_id, row.metric_name or "")
                for axis, value in demo.get(row.id, {}).items():
                    k_n = counts[(row.target_model, row.metric_id, axis)][str(value)]
                    k_n[0] += row.passed
                    k_n[1] += 1
            yield row

    def groups(self) -> list[DemographicGroup]:
        """The groups, once every score row has passed through `tap`."""
        counts, names = self.counts, self.names
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


MAX_FLAKY = 200
"""Flaky cases listed at most (the scores.json rows carry every label)."""
SOURCE = "from the result files: every row on file, this session's and earlier ones"


@dataclass(frozen=True)
class FlakyCase:
    """One flaky case: scenario row × target, its label (`judge`, `agent`, `both`) and the numbers."""

    target: str
    id: str
    metric: str
    label: str
    detail: str

    def text(self) -> str:
        return f"flaky: {self.label} {self.target} {self.id} ({self.metric}): {self.detail}"


@dataclass(frozen=True)
class PassKRow:
    """pass^k and pass@k of one target × metric, as results.json has them (`pass_k`)."""

    target: str
    metric: str
    k: int
    n_cases: int
    n_excluded: int
    pass_hat_k: float | None
    pass_at_k: float | None

    def text(self) -> str:
        def num(v: float | None) -> str:
            return "n/a" if v is None else f"{v:.2f}"
        excluded = f"; {self.n_excluded} excluded (an unscored or missing sample)" if self.n_excluded else ""
        return (f"pass^{self.k} {num(self.pass_hat_k)}, pass@{self.k} {num(self.pass_at_k)} {self.target} "
                f"{self.metric}: over {self.n_cases} case{'s' if self.n_cases != 1 else ''}, "
                f"k = {self.k} samples per case{excluded}")


def flaky_cases(scores: Iterable[ScoreRow]) -> tuple[list[FlakyCase], int]:
    """The flaky cases of the scores.json rows (first `MAX_FLAKY`, in file order) and how many in all."""
    seen: set[tuple[str, str]] = set()
    shown: list[FlakyCase] = []
    for row in scores:
        if row.flaky is None or (row.target_model, row.id) in seen:
            continue
        seen.add((row.target_model, row.id))
        if len(shown) < MAX_FLAKY:
            shown.append(FlakyCase(row.target_model, row.id, row.metric_id, row.flaky, row.flaky_detail or ""))
    return shown, len(seen)


def pass_k_rows(results: Sequence[Mapping[str, Any]]) -> list[PassKRow]:
    """Every target × metric with a `pass_k` entry in results.json, in file order."""
    out: list[PassKRow] = []
    for entry in results:
        for metric, value in sorted((entry.get("pass_k") or {}).items()):
            out.append(PassKRow(str(entry.get("target_model")), metric, int(value["k"]), int(value["n_cases"]),
                                int(value["n_excluded"]), value.get("pass_hat_k"), value.get("pass_at_k")))
    return out


def reliability_lines(pass_k: list[PassKRow], flaky: list[FlakyCase], flaky_total: int) -> list[str]:
    """Summary lines: pass^k / pass@k per target × metric, then each flaky case (what every surface shows)."""
    lines = [f"pass^k / pass@k over cases ({SOURCE}):"] if pass_k else []
    lines += [r.text() for r in pass_k]
    if flaky_total:
        lines.append(f"flaky cases: {flaky_total} ({SOURCE}; judge: votes on one transcript disagree, "
                     f"agent: the samples' verdicts differ)")
        lines += [f.text() for f in flaky]
        if flaky_total > len(flaky):
            lines.append(f"... and {flaky_total - len(flaky)} more flaky cases (see `flaky` in scores.json)")
    return lines
