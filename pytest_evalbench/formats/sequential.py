"""Sequential sampling of a case (`generation.sampling: sequential`): draw a case's samples one at a
time and stop once its verdict is settled, instead of always drawing `num_samples` (k) of them.

The verdict is the fixed-k design's (`stats.case_verdict`: pass, fail, or inconclusive, the flaky
case's verdict), and a case is settled in one of two ways:

- **for certain** (curtailment): every way its remaining samples could fall gives the same k-sample
  verdict (at k = 5 and a 0.5 pass mark, one pass and one fail make it inconclusive whatever follows).
  Its verdict is exactly the one k samples would give: nothing about it changes but the calls.
- **at the configured error rate** α, once `fail` is out of reach: the chance that the remaining
  samples change the verdict most likely now (pass or inconclusive) is at most α, by the beta-binomial
  predictive distribution of the remaining passes under the suite's own spread of pass rates (a
  `Prior`, fitted by `fit_prior` to the per-case pass counts of an earlier run: in a suite of mostly
  stable cases it is U-shaped, so a few agreeing samples settle a case, while a suite of flaky ones
  asks for more). Without a prior only the first way applies.

A `fail` verdict is never settled at the error rate, only for certain, and nothing settles while
`fail` is still reachable: so a case fails under sequential sampling exactly when its k samples
would fail it (on the same draws), and the gate's false-alarm rate and power are fixed k's. What α
buys is the pass/inconclusive split: a stable passing case stops after a few agreeing samples where
a stray failure among the later ones would have made fixed k call it inconclusive. (Letting agreeing
failures settle `fail` at α too saves more calls, but a case that fails its first samples then passes
one is inconclusive under fixed k: the sequential design would fail it, and catch measurably more
failing cases than fixed k, a different test rather than the same one drawn faster.)

Pure functions, no I/O; `tests/perf/sequential_sampling.py` measures calls saved and error rates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_evalbench.formats.stats import Z95, Verdict, case_verdict

MIN_CONCENTRATION = 0.02
MAX_CONCENTRATION = 1000.0
"""Bounds of the fitted prior's a + b: from nearly all-or-nothing cases to no spread at all."""


@dataclass(frozen=True)
class Prior:
    """A Beta(a, b) distribution of the cases' pass rates."""

    a: float
    b: float


def fit_prior(counts: Sequence[tuple[int, int]]) -> Prior | None:
    """The Beta prior whose beta-binomial matches the mean and spread of per-case (passes, samples)
    counts (method of moments; cases with fewer than two samples say nothing about spread and are left
    out); None with fewer than two such cases or no spread to measure (every case at 0% or 100% at once
    would make any agreement settle a case: the bounds keep a, b finite and positive)."""
    usable = [(k, n) for k, n in counts if n >= 2 and 0 <= k <= n]
    if len(usable) < 2:
        return None
    rates = [k / n for k, n in usable]
    mean = sum(rates) / len(rates)
    if mean <= 0.0 or mean >= 1.0:
        return None
    samples = sum(n for _, n in usable) / len(usable)
    spread = sum((r - mean) ** 2 for r in rates) / (len(rates) - 1)
    # Var(k/n) = mean (1 - mean) / n x (1 + (n - 1) rho), rho = 1 / (a + b + 1)
    rho = (spread * samples / (mean * (1 - mean)) - 1) / (samples - 1)
    rho = min(max(rho, 1 / (MAX_CONCENTRATION + 1)), 1 / (MIN_CONCENTRATION + 1))
    total = 1 / rho - 1
    return Prior(mean * total, (1 - mean) * total)


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def predictive(passes: int, drawn: int, k: int, prior: Prior) -> list[float]:
    """P(x more passes in the remaining k - drawn samples), x = 0..k - drawn: the beta-binomial of the
    prior updated by the samples drawn."""
    a, b, left = prior.a + passes, prior.b + drawn - passes, k - drawn
    base = _log_beta(a, b)
    return [math.exp(math.lgamma(left + 1) - math.lgamma(x + 1) - math.lgamma(left - x + 1)
                     + _log_beta(a + x, b + left - x) - base) for x in range(left + 1)]


def outlook(passes: int, drawn: int, k: int, prior: Prior, threshold: float = 0.5,
            z: float = Z95) -> dict[Verdict, float]:
    """The chance of each k-sample verdict, given the samples drawn and the prior."""
    chances: dict[Verdict, float] = {}
    for more, chance in enumerate(predictive(passes, drawn, k, prior)):
        verdict = case_verdict(passes + more, k, threshold, z)
        chances[verdict] = chances.get(verdict, 0.0) + chance
    return chances


def settled(outcomes: Sequence[bool], k: int, *, threshold: float = 0.5, alpha: float = 0.05,
            prior: Prior | None = None, z: float = Z95) -> Verdict | None:
    """The case's verdict once its samples so far settle it (see the module docstring), else None:
    draw another. With k samples drawn it is the k-sample verdict; `fail` only when no remaining
    sample can change it."""
    drawn, passes = len(outcomes), sum(outcomes)
    if drawn >= k:
        return case_verdict(passes, drawn, threshold, z)
    reachable = {case_verdict(passes + more, k, threshold, z) for more in range(k - drawn + 1)}
    if len(reachable) == 1:
        return reachable.pop()
    if prior is None or drawn < 2 or "fail" in reachable:
        return None
    chances = outlook(passes, drawn, k, prior, threshold, z)
    verdict = max(chances, key=lambda v: chances[v])
    return verdict if 1.0 - chances[verdict] <= alpha else None


@dataclass(frozen=True)
class SequentialRule:
    """A run's sequential sampling: k samples at most, the pass mark, the error rate and the prior
    (None: settled for certain only). Both the run (before each sample) and the gate (replaying the
    drawn samples in order) decide with it, so the gate's verdict is the one that stopped the draws."""

    k: int
    threshold: float = 0.5
    alpha: float = 0.05
    prior: Prior | None = None

    def decide(self, samples: Sequence[bool | None]) -> Verdict | None:
        """The verdict once the samples drawn so far (in order; None: unscored, which counts for
        nothing and shrinks the budget by one) settle the case, else None: draw the next."""
        scored = [s for s in samples if s is not None]
        return settled(scored, self.k - (len(samples) - len(scored)), threshold=self.threshold,
                       alpha=self.alpha, prior=self.prior)

    def verdict(self, samples: Sequence[bool | None]) -> Verdict:
        """The case's verdict from its drawn samples in order: the first prefix that settles it (where
        the run stopped drawing), else the Wilson verdict of the scored ones (fewer than k drawn: some
        errored or ran elsewhere)."""
        for drawn in range(1, len(samples) + 1):
            verdict = self.decide(samples[:drawn])
            if verdict is not None:
                return verdict
        scored = [s for s in samples if s is not None]
        return case_verdict(sum(scored), len(scored), self.threshold)
