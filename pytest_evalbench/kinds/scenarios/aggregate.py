"""results.json from scores.json rows, and why a case is flaky: pure functions, no I/O.

Pass rates are row-level means over scored rows (passed not null), split by metric type; a rate is null
when no scored row of that kind exists (distinct from 0.0). `n_positive`/`n_negative`/`n_total` at the
model level count unscored rows too; `by_*` counts only scored rows (as the spec's example does).

A *case* is one scenario row for one target, over its `num_samples` samples (conversations); each
sample's transcript may be judged several times (`judge: {samples: k}`, panels).

- *judge noise*: the votes on one transcript disagree (the transcript is *split*). Only usable votes
  count (an unusable answer, value null, is ignored); a tie such as 1-1 is split too (the panel leaves
  that row unscored). A transcript with fewer than two usable votes cannot split.
- *agent noise*: the samples' own judgments (each row's `passed`, the votes' majority) differ: at least
  one scored sample passed and one failed. Unscored samples take no part.

A case with either is labelled `judge`, `agent` or `both`, with the numbers (`detail`). pass^k and
pass@k (per target × metric, in results.json's `pass_k` when a case has more than one sample): k is the
number of samples a case has; a case counts when all k of its samples are scored; pass^k is the share of
counted cases whose k samples all passed, pass@k the share with at least one passed sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any, Literal, Optional, Protocol, Union

from pytest_evalbench.formats import Strict
from pytest_evalbench.formats.agreement import CorrectedRate, JudgeAccuracy, StrataCounter
from pytest_evalbench.formats.results import CorrectedSummary, PassFailUnit, PassK
from pytest_evalbench.kinds.scenarios.models import ModelResult, RateSummary, ScoreRow

Row = Union[ScoreRow, PassFailUnit]


def _rate(rows: Iterable[Row]) -> float | None:
    scored = [r.passed for r in rows if r.passed is not None]
    if not scored:
        return None
    return round(sum(1 for passed in scored if passed) / len(scored), 4)


def summarize_counts(rows: Iterable[Row], key: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, results.json rate entry as JSON) per value of `key`, sorted: counted in one pass, with
    only two numbers per name kept (by_scenario has one name per scenario)."""
    counts: dict[str, list[int]] = {}
    for row in rows:
        entry = counts.get(getattr(row, key))
        if entry is None:
            entry = counts[getattr(row, key)] = [0, 0]
        if row.passed is not None:
            entry[0] += row.passed
            entry[1] += 1
    for name in sorted(counts):
        n_passed, n_total = counts[name]
        yield name, {"pass_rate": round(n_passed / n_total, 4) if n_total else None,
                     "n_passed": n_passed, "n_total": n_total}


def summarize_by(rows: Iterable[Row], key: str) -> dict[str, RateSummary]:
    return {name: RateSummary(**entry) for name, entry in summarize_counts(rows, key)}


def summarize_model(target_model: str, rows: Sequence[Row], by_scenario: bool = True) -> ModelResult:
    positive = [r for r in rows if r.metric_type == "positive"]
    negative = [r for r in rows if r.metric_type == "negative"]
    return ModelResult(target_model=target_model, positive_pass_rate=_rate(positive),
                       negative_pass_rate=_rate(negative), n_positive=len(positive), n_negative=len(negative),
                       n_total=len(rows), by_metric=summarize_by(rows, "metric_id"),
                       by_scenario=summarize_by(rows, "id") if by_scenario else {},
                       pass_k=(pass_k(rows) or None) if any(r.sample for r in rows) else None)


def aggregate(rows_by_model: Mapping[str, Sequence[Row]], by_scenario: bool = True) -> list[ModelResult]:
    """results.json: one summary per target, sorted by positive_pass_rate descending.

    Null rates sort last; ties break on the target id, so the order never depends on disk order.
    Without `by_scenario` that map is left empty (results.json has it; `store.dump_results`).
    Rows are scores.json rows or their compact pass/fail units (`PassFailUnit`).
    """
    summaries = [summarize_model(model, rows, by_scenario) for model, rows in rows_by_model.items()]
    return sorted(summaries, key=lambda s: (-(s.positive_pass_rate if s.positive_pass_rate is not None
                                              else -1.0), s.target_model))


def _summary(value: CorrectedRate | None) -> CorrectedSummary | None:
    return None if value is None else CorrectedSummary.model_validate(value.to_json())


def correct_results(results: Iterable[ModelResult], rows_by_model: Mapping[str, Sequence[Row]],
                    accuracy: Mapping[str, JudgeAccuracy]) -> None:
    """Set each summary's corrected rates (`formats.agreement.correct`) from the rows it was counted
    from: per metric, and over the positive / negative metrics. A rate without judge-decided rows
    has nothing to correct and keeps no corrected entry."""
    counter = StrataCounter()
    for target, rows in rows_by_model.items():
        for row in rows:
            counter.add(target, (row.metric_id, f"({row.metric_type})"), row.metric_id, row.metric_type,
                        row.passed, row.decided_by)
    for result in results:  # set only where there is one: results.json then has the field only there
        target = result.target_model
        if (positive := _summary(counter.corrected(target, "(positive)", accuracy))) is not None:
            result.corrected_positive = positive
        if (negative := _summary(counter.corrected(target, "(negative)", accuracy))) is not None:
            result.corrected_negative = negative
        for mid, rate in result.by_metric.items():
            if (fixed := _summary(counter.corrected(target, mid, accuracy))) is not None:
                rate.corrected = fixed


FlakyLabel = Literal["judge", "agent", "both"]
FLAKY_FIELDS = ("flaky", "flaky_detail")
"""The scores.json fields this module writes (on every row of a flaky case, absent otherwise)."""


@dataclass(frozen=True)
class CaseNoise:
    label: FlakyLabel | None
    detail: str


def _usable(votes: Sequence[Any] | None) -> list[bool]:
    """A transcript's usable votes (scores.json `judges` entries or `JudgeVote`s; null values dropped)."""
    values = [v.get("value") if isinstance(v, Mapping) else getattr(v, "value", None) for v in votes or []]
    return [v for v in values if isinstance(v, bool)]


def case_noise(samples: Sequence[Mapping[str, Any]]) -> CaseNoise:
    """The noise of one case from its samples' scores.json rows (`passed`, `judges`)."""
    passed = [s.get("passed") for s in samples]
    scored = [p for p in passed if p is not None]
    n_pass = sum(1 for p in scored if p)
    agent = 0 < n_pass < len(scored)
    voted = [u for u in (_usable(s.get("judges")) for s in samples) if len(u) >= 2]
    splits = [(max(yes, len(u) - yes), min(yes, len(u) - yes)) for u in voted if 0 < (yes := sum(u)) < len(u)]
    parts = [f"agent: {n_pass}/{len(scored)} samples passed"
             + (f" ({len(passed) - len(scored)} unscored)" if len(scored) < len(passed) else "")]
    if voted:
        shown = ", ".join(f"{a}-{b}" for a, b in splits)
        parts.append(f"judge: {len(splits)} of {len(voted)} transcript{'s' if len(voted) != 1 else ''} split"
                     + (f" {shown}" if splits else ""))
    label: FlakyLabel | None = "both" if agent and splits else "agent" if agent else "judge" if splits else None
    return CaseNoise(label, "; ".join(parts))


def label_rows(rows: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """scores.json rows of one target, in file order (a case's samples are adjacent), with
    `flaky`/`flaky_detail` set on every row of a flaky case and removed from the others."""
    for _, group in groupby(rows, key=lambda r: r.get("id")):
        case = list(group)
        if len(case) == 1 and not case[0].get("judges") and "flaky" not in case[0]:
            yield case[0]  # one sample, one vote: never flaky (the usual case, kept cheap)
            continue
        noise = case_noise(case)
        for row in case:
            for key in FLAKY_FIELDS:
                row.pop(key, None)
            if noise.label is not None:
                row["flaky"], row["flaky_detail"] = noise.label, noise.detail
            yield row


class _Row(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def metric_id(self) -> str: ...
    @property
    def passed(self) -> Optional[bool]: ...


def pass_k(rows: Iterable[_Row]) -> dict[str, PassK]:
    """pass^k and pass@k per metric id (only metrics whose cases have k >= 2 samples)."""
    cases: dict[str, dict[str, list[Optional[bool]]]] = {}
    for row in rows:
        cases.setdefault(row.metric_id, {}).setdefault(row.id, []).append(row.passed)
    out: dict[str, PassK] = {}
    for metric in sorted(cases):
        k = max(len(v) for v in cases[metric].values())
        if k < 2:
            continue
        counted = [v for v in cases[metric].values() if len(v) == k and None not in v]
        n = len(counted)
        out[metric] = PassK(k=k, n_cases=n, n_excluded=len(cases[metric]) - n,
                            pass_hat_k=round(sum(1 for v in counted if all(v)) / n, 4) if n else None,
                            pass_at_k=round(sum(1 for v in counted if any(v)) / n, 4) if n else None)
    return out


# --------------------------------------------------------------------------- rejudge.json (`evalbench rejudge`)


class RejudgedTranscript(Strict):
    """One stored transcript judged k more times."""

    sample: int
    stored: Optional[bool]
    """The stored judgment (`present` in scores.json); null when that row was unscored."""
    votes: list[Optional[bool]]
    """The new judgments (`present`), k per judge in panel order; null: an unusable answer."""
    self_agreement: Optional[float]
    """Share of the usable new votes equal to their majority (0.5 for a tie); null below two usable votes."""
    stored_agreement: Optional[float]
    """Share of the usable new votes equal to the stored judgment; null when either is missing."""
    split: bool
    """The usable new votes disagree with each other or with the stored judgment."""


class RejudgedCase(Strict):
    """One case (scenario row × this target) over its stored samples."""

    id: str
    metric_id: str
    samples: list[RejudgedTranscript]
    judge_noise: bool
    """At least one of its transcripts is split."""


class RejudgeMetric(Strict):
    """One metric's judge noise over its re-judged transcripts."""

    transcripts: int
    split: int
    flipped: int
    """Transcripts whose new majority (not a tie) differs from the stored judgment."""
    self_agreement: Optional[float]
    """Mean `self_agreement` over the transcripts that have one."""
    stored_agreement: Optional[float]
    """Mean `stored_agreement` over the transcripts that have one."""


class RejudgeReport(Strict):
    """runs/<target>/rejudge.json: judge noise measured after the run, without calling the target."""

    target: str
    k: int
    """New judgments per transcript and judge (`--samples`)."""
    judges: list[str]
    temperature: Optional[float]
    """The judges' sampling temperature for these calls (`--temperature`, else benchmark.yaml's; null: the model's default)."""
    created: str
    skipped: int
    """Stored rows not re-judged: decided by a deterministic check, or without an assistant reply."""
    cases: list[RejudgedCase]
    by_metric: dict[str, RejudgeMetric]


def _share(values: list[bool], value: bool) -> float:
    return round(sum(1 for v in values if v == value) / len(values), 4)


def rejudged(sample: int, stored: Optional[bool], votes: list[Optional[bool]]) -> RejudgedTranscript:
    """One transcript's new votes compared with each other and with the stored judgment."""
    usable = [v for v in votes if v is not None]
    yes = sum(1 for v in usable if v)
    self_agreement = round(max(yes, len(usable) - yes) / len(usable), 4) if len(usable) >= 2 else None
    stored_agreement = _share(usable, stored) if usable and stored is not None else None
    split = (0 < yes < len(usable)) or (stored is not None and any(v != stored for v in usable))
    return RejudgedTranscript(sample=sample, stored=stored, votes=votes, self_agreement=self_agreement,
                              stored_agreement=stored_agreement, split=split)


def _flipped(t: RejudgedTranscript) -> bool:
    usable = [v for v in t.votes if v is not None]
    yes = sum(1 for v in usable if v)
    return t.stored is not None and yes * 2 != len(usable) and (yes * 2 > len(usable)) != t.stored


def _mean(values: list[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return round(sum(got) / len(got), 4) if got else None


def rejudge_by_metric(cases: list[RejudgedCase]) -> dict[str, RejudgeMetric]:
    """Per metric: transcripts, split ones, flipped ones, and the mean agreements."""
    groups: dict[str, list[RejudgedTranscript]] = {}
    for case in cases:
        groups.setdefault(case.metric_id, []).extend(case.samples)
    return {metric: RejudgeMetric(transcripts=len(ts), split=sum(1 for t in ts if t.split),
                                  flipped=sum(1 for t in ts if _flipped(t)),
                                  self_agreement=_mean([t.self_agreement for t in ts]),
                                  stored_agreement=_mean([t.stored_agreement for t in ts]))
            for metric, ts in sorted(groups.items())}
