"""Judge panels and self-consistency: several judges (`evaluator_models`) and/or several samples
per judge (`judge: {samples: k}`) vote; the verdict is the majority (the lower median for 1-5
scores) and the share of votes that agree with it is reported.

Every vote is an ordinary engine call, so it is cached and counted in cost like any other. Vote
`j` of a row judged for conversation sample `s` uses the cache sample `s + j * SAMPLE_STRIDE`
(j = 0 keeps `s`, so a single judge's cache entries are those of a run without a panel).
No pytest import.
"""

from __future__ import annotations

import asyncio
import statistics
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from pytest_evalbench.llm.types import Endpoint

SAMPLE_STRIDE = 1_000_000
V = TypeVar("V", bool, int)
A = TypeVar("A")


@dataclass(frozen=True)
class Vote(Generic[V]):
    """One judge's answer: its value (None when that judge's answer was unusable) and its text."""

    judge: str
    sample: int
    value: V | None
    text: str

    def to_json(self) -> dict[str, object]:
        return {"judge": self.judge, "sample": self.sample, "value": self.value, "text": self.text}


@dataclass(frozen=True)
class PanelVerdict(Generic[V]):
    value: V | None
    justification: str
    """The deciding justification (or why the panel could not decide)."""
    agreement: float | None
    """Share of usable votes equal to the verdict; None for a single vote or no verdict."""
    votes: list[Vote[V]]


def vote_sample(sample: int, index: int) -> int:
    """The cache sample of the `index`-th self-consistency vote on conversation sample `sample`."""
    return sample + index * SAMPLE_STRIDE


async def poll(judges: list[Endpoint], samples: int, sample: int,
               ask: Callable[[Endpoint, int], Awaitable[tuple[V | None, str]]]) -> list[Vote[V]]:
    """Ask every judge `samples` times, concurrently; votes in panel order."""
    plan = [(judge, vote_sample(sample, j)) for judge in judges for j in range(samples)]
    if len(plan) == 1:  # one judge, one vote (the usual case): no task and no gather per item
        answers = [await ask(*plan[0])]
    else:
        answers = list(await asyncio.gather(*[ask(judge, s) for judge, s in plan]))
    return [Vote(judge.model, s, value, text) for (judge, s), (value, text) in zip(plan, answers)]


def _agreement(votes: list[Vote[V]], value: V) -> float | None:
    usable = [v for v in votes if v.value is not None]
    if len(votes) < 2 or not usable:
        return None
    return round(sum(1 for v in usable if v.value == value) / len(usable), 4)


def _settled(votes: list[Vote[V]]) -> PanelVerdict[V] | None:
    """The verdict when there is nothing to aggregate: a lone vote as it is, or no usable vote (unscored)."""
    if len(votes) == 1:
        return PanelVerdict(votes[0].value, votes[0].text, None, votes)
    if all(v.value is None for v in votes):
        unusable = "; ".join(f"{v.judge}#{v.sample}: {v.text}" for v in votes)
        return PanelVerdict(None, f"unscored: no judge gave a usable answer ({unusable})", None, votes)
    return None


def majority(votes: list[Vote[bool]]) -> PanelVerdict[bool]:
    """The majority of the usable yes/no votes; a tie or no usable vote is unscored, with its reason."""
    settled = _settled(votes)
    if settled is not None:
        return settled
    usable = [v for v in votes if v.value is not None]
    counts = Counter(bool(v.value) for v in usable)
    if counts[True] == counts[False]:
        return PanelVerdict(None, f"unscored: the judges tied {counts[True]}-{counts[False]} "
                            f"(present-absent) over {len(usable)} usable votes", 0.5, votes)
    value = counts[True] > counts[False]
    first = next(v for v in usable if v.value == value)
    text = f"panel {counts[value]}/{len(usable)} {'present' if value else 'absent'}: {first.text}"
    return PanelVerdict(value, text, _agreement(votes, value), votes)


def median_vote(votes: list[Vote[int]]) -> PanelVerdict[int]:
    """The median of the usable 1-5 scores (the lower one of an even count: a tie never rounds up)."""
    settled = _settled(votes)
    if settled is not None:
        return settled
    usable = [v for v in votes if v.value is not None]
    value = int(statistics.median_low(int(v.value) for v in usable if v.value is not None))
    first = next(v for v in usable if v.value == value)
    scores = ", ".join(str(v.value) for v in usable)
    return PanelVerdict(value, f"panel median of [{scores}]: {first.text}", _agreement(votes, value), votes)


def agreement_lines(pairs: list[tuple[str, float | None]]) -> list[str]:
    """Terminal lines: per metric (or eval), the mean agreement of the judge panel over its rows."""
    groups: dict[str, list[float]] = {}
    for name, value in pairs:
        if value is not None:
            groups.setdefault(name, []).append(value)
    return [f"judge agreement {name}: {sum(v) / len(v):.2f} mean over {len(v)} row{'s' if len(v) != 1 else ''}"
            for name, v in sorted(groups.items())]
