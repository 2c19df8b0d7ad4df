"""Why a case is flaky, and how reliably it passes: pure functions over scores.json rows, no I/O.

A *case* is one scenario row for one target, over its `num_samples` samples (conversations);
each sample's transcript may be judged several times (`judge: {samples: k}`, panels).

- *judge noise*: the votes on one transcript disagree (the transcript is *split*). Only usable
  votes count (an unusable answer, value null, is ignored); a tie such as 1-1 is split too (the
  panel leaves that row unscored). A transcript with fewer than two usable votes cannot split.
- *agent noise*: the samples' own verdicts (each row's `passed`, the votes' majority) differ:
  at least one scored sample passed and one failed. Unscored samples take no part.

A case with either is labelled `judge`, `agent` or `both`, with the numbers (`detail`).

pass^k and pass@k (per target × metric): k is the number of samples a case has (the largest
sample count of the metric's cases, i.e. `num_samples`); a case counts when all k of its samples
are scored; pass^k is the share of counted cases whose k samples all passed (tau-bench's
reliability), pass@k the share with at least one passed sample.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby
from typing import Any, Literal, Optional, Protocol

from ..gate.rows import PassK

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


def _split(votes: Sequence[Any] | None) -> tuple[int, int] | None:
    """(majority, minority) counts of a transcript's usable votes when they disagree, else None."""
    values = _usable(votes)
    yes = sum(1 for v in values if v is True)
    no = sum(1 for v in values if v is False)
    return (max(yes, no), min(yes, no)) if yes and no else None


def case_noise(samples: Sequence[Mapping[str, Any]]) -> CaseNoise:
    """The noise of one case from its samples' scores.json rows (`passed`, `judges`)."""
    passed = [s.get("passed") for s in samples]
    scored = [p for p in passed if p is not None]
    n_pass = sum(1 for p in scored if p)
    agent = 0 < n_pass < len(scored)
    voted = [s for s in samples if len(_usable(s.get("judges"))) >= 2]
    splits = [sp for sp in (_split(s.get("judges")) for s in voted) if sp is not None]
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
