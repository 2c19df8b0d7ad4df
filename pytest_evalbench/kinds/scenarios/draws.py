"""Sequential sampling at run time (`generation.sampling: sequential`): a case's sample j waits for its
samples 0..j-1 and is drawn only while they leave its judgment unsettled (`formats.sequential`);
otherwise it is *not drawn*: no call, no row, the item reports `not drawn` (a skip by design, which
completeness counts as accounted for).

A sample waits only for earlier samples that run in this process (`expect`: the scheduler names the
items it will run); with one of them elsewhere (an xdist share boundary, a deselected sample) it is
drawn, so nothing ever waits for an item that will not come. Earlier samples start first (their
position ranks them ahead), so a waiting sample never holds back the one it waits for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Final

from pytest_evalbench.formats.sequential import Prior, SequentialRule, fit_prior
from pytest_evalbench.formats.stats import Verdict
from pytest_evalbench.kinds.scenarios.models import ScenarioRecord, ScoreRow
from pytest_evalbench.kinds.scenarios.runner import ScenarioItem

NOT_DRAWN: Final = "not drawn"


@dataclass(frozen=True)
class NotDrawn:
    """A sample the run did not draw: its case was settled by the samples before it."""

    case: ScenarioItem
    verdict: Verdict
    drawn: int
    k: int

    @property
    def message(self) -> str:
        return f"not drawn: settled ({self.verdict}) after {self.drawn} of {self.k} samples"


Sample = bool | None | NotDrawn
"""What a sample left for the later ones: passed, failed, unscored (None), or not drawn."""


class SampleDraws:
    """This process's samples of each case (scenario row x target), in order."""

    def __init__(self, rule: SequentialRule) -> None:
        self.rule = rule
        self._here: set[tuple[str, str, int]] = set()
        self._done: dict[tuple[str, str, int], asyncio.Future[Sample]] = {}

    def expect(self, cases: Iterable[object]) -> None:
        """These cases run in this process (called before their pipelines start)."""
        self._here.update(_key(case) for case in cases if isinstance(case, ScenarioItem))

    def _future(self, key: tuple[str, str, int]) -> asyncio.Future[Sample]:
        future = self._done.get(key)
        if future is None:
            future = self._done[key] = asyncio.get_running_loop().create_future()
        return future

    async def run(self, case: ScenarioItem, draw: Callable[[], Awaitable[ScenarioRecord]],
                  passed: Callable[[ScenarioRecord], bool | None]) -> ScenarioRecord | NotDrawn:
        """The sample's record, or NotDrawn when the samples before it settled its case."""
        row, target, sample = _key(case)
        mine = self._future((row, target, sample))
        result: Sample = None
        try:
            earlier = [(row, target, s) for s in range(sample)]
            if sample and all(key in self._here for key in earlier):
                samples = [await asyncio.shield(self._future(key)) for key in earlier]
                stopped = next((s for s in samples if isinstance(s, NotDrawn)), None)
                verdict = stopped.verdict if stopped else self.rule.decide(
                    [s for s in samples if not isinstance(s, NotDrawn)])
                if verdict is not None:
                    result = NotDrawn(case, verdict, stopped.drawn if stopped else sample, self.rule.k)
                    return result
            record = await draw()
            result = passed(record)
            return record
        finally:
            if not mine.done():
                mine.set_result(result)  # an error leaves None: the sample counts as unscored


def _key(case: ScenarioItem) -> tuple[str, str, int]:
    return case.stored.id, case.target_id, case.sample


def prior_of(rows: Iterable[ScoreRow]) -> Prior | None:
    """The suite's prior from an earlier run's score rows (per case: passes over scored samples)."""
    counts: dict[tuple[str, str], list[int]] = {}
    for row in rows:
        if row.passed is not None:
            count = counts.setdefault((row.target_model, row.id), [0, 0])
            count[0] += bool(row.passed)
            count[1] += 1
    return fit_prior([(k, n) for k, n in counts.values()])
