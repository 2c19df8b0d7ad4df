"""Sequential sampling against fixed k (not part of the test suite): how many calls does stopping a
case once its verdict is settled save, and do the verdicts' error rates stay those of k samples?

Every verdict goes through the real code: `formats.sequential.settled` for the sequential design,
`formats.stats.case_verdict` over k samples for the fixed one. Model (the gate-noise script's, with a
share of stable cases): a suite of CASES cases; a stable case passes each sample with probability
STABLE_RATE (three in four of them) or fails it with that probability, a flaky case has a pass rate
drawn uniformly from 0.2..0.8. Per replicate, a baseline run of k samples per case fits the prior
(`fit_prior`, as a team would from its last run), then each case draws its k outcomes once and both
designs read them (common random numbers): fixed k all of them, the sequential design the first ones
until it stops. So the two designs' error rates are compared pair by pair, and the difference's
confidence interval (95%, suites as clusters) is that of the designs, not of two independent draws.
Error rates are per case, against the case's true pass rate and the 0.5 pass mark: a false alarm is a
`fail` verdict on a case at or above the mark, power the share of cases below it that get `fail`;
`flaky` is the share of inconclusive verdicts, `agree` the share of cases whose two verdicts are equal.

    PYTHONPATH=$PWD python tests/perf/sequential_sampling.py [--reps 2000] [--seed 1]
"""

from __future__ import annotations

import argparse
import math
import random
import time
from dataclasses import dataclass, field

from pytest_evalbench.formats.sequential import Prior, fit_prior, settled
from pytest_evalbench.formats.stats import case_verdict

CASES = 50
STABLE_SHARES = (0.9, 0.75)
SAMPLES = (5, 10)
"""k = 3 is left out: with the 0.5 mark, three samples never give a 95% Wilson verdict (3/3 has a
lower bound of 0.44), so every case is inconclusive and its first sample settles it."""
ALPHAS = (0.05, 0.02)
STABLE_RATES = (0.99, 0.97)
PASS_MARK = 0.5


def latent(rng: random.Random, stable: float, rate: float) -> float:
    u = rng.random()
    if u < stable * 0.75:
        return rate
    if u < stable:
        return 1 - rate
    return rng.uniform(0.2, 0.8)


@dataclass
class Tally:
    """Both designs' counts over the same cases, and the per-suite paired differences in false alarms
    and cases caught (sequential minus fixed)."""

    calls: list[int] = field(default_factory=lambda: [0, 0])
    alarms: list[int] = field(default_factory=lambda: [0, 0])
    caught: list[int] = field(default_factory=lambda: [0, 0])
    flaky: list[int] = field(default_factory=lambda: [0, 0])
    good: int = 0
    bad: int = 0
    cases: int = 0
    agree: int = 0
    alarm_diffs: list[int] = field(default_factory=list)
    caught_diffs: list[int] = field(default_factory=list)

    def add(self, rate: float, verdicts: tuple[str, str], drawn: tuple[int, int]) -> None:
        self.cases += 1
        self.agree += verdicts[0] == verdicts[1]
        for design, verdict in enumerate(verdicts):
            self.calls[design] += drawn[design]
            self.flaky[design] += verdict == "inconclusive"
            if rate >= PASS_MARK:
                self.alarms[design] += verdict == "fail"
            else:
                self.caught[design] += verdict == "fail"
        self.good += rate >= PASS_MARK
        self.bad += rate < PASS_MARK

    def end_suite(self, alarms: int, caught: int) -> None:
        """Close a suite: record its paired differences (counts so far minus the counts before it)."""
        self.alarm_diffs.append(self.alarms[1] - self.alarms[0] - alarms)
        self.caught_diffs.append(self.caught[1] - self.caught[0] - caught)

    def saved(self) -> float:
        return 100 * (1 - self.calls[1] / self.calls[0])

    def rate(self, counts: list[int], design: int, of: int) -> float:
        return 100 * counts[design] / max(1, of)

    def paired(self, diffs: list[int], of: int) -> tuple[float, float]:
        """(difference in points, half-width of its 95% interval): the ratio of per-suite sums, its
        standard error from the spread of the suites' differences."""
        n = len(diffs)
        mean = sum(diffs) / n
        var = sum((d - mean) ** 2 for d in diffs) / max(1, n - 1)
        return 100 * sum(diffs) / max(1, of), 100 * 1.96 * math.sqrt(var * n) / max(1, of)


def run_item(outcomes: list[bool], k: int, prior: Prior, alpha: float) -> tuple[str, int]:
    """(verdict, samples drawn) of the sequential design reading `outcomes` in order."""
    for drawn in range(1, k + 1):
        verdict = settled(outcomes[:drawn], k, threshold=PASS_MARK, alpha=alpha, prior=prior)
        if verdict is not None:
            return verdict, drawn
    raise AssertionError("k samples always settle a case")


def compare(stable: float, k: int, alpha: float, rate: float, reps: int, rng: random.Random,
            cases: int = CASES) -> Tally:
    """Both designs over `reps` simulated suites, on common draws."""
    tally = Tally()
    for _ in range(reps):
        rates = [latent(rng, stable, rate) for _ in range(cases)]
        baseline = [(sum(rng.random() < r for _ in range(k)), k) for r in rates]
        prior = fit_prior(baseline) or Prior(1.0, 1.0)
        alarms, caught = tally.alarms[1] - tally.alarms[0], tally.caught[1] - tally.caught[0]
        for r in rates:
            outcomes = [rng.random() < r for _ in range(k)]
            verdict, drawn = run_item(outcomes, k, prior, alpha)
            tally.add(r, (case_verdict(sum(outcomes), k, PASS_MARK), verdict), (k, drawn))
        tally.end_suite(alarms, caught)
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    started = time.perf_counter()
    print("| stable cases | stable rate | k | α | calls saved | false alarms fixed / seq. (difference) "
          "| power fixed / seq. (difference) | flaky fixed / seq. | verdicts agree |")
    print("|---|---|---|---|---|---|---|---|---|")
    for stable in STABLE_SHARES:
        for rate in STABLE_RATES:
            for k in SAMPLES:
                for alpha in ALPHAS:
                    t = compare(stable, k, alpha, rate, args.reps, rng)
                    fa, fa_ci = t.paired(t.alarm_diffs, t.good)
                    pw, pw_ci = t.paired(t.caught_diffs, t.bad)
                    print(f"| {stable:.0%} | {rate} | {k} | {alpha} | {t.saved():.1f}% "
                          f"| {t.rate(t.alarms, 0, t.good):.2f}% / {t.rate(t.alarms, 1, t.good):.2f}% "
                          f"({fa:+.2f} ± {fa_ci:.2f}) "
                          f"| {t.rate(t.caught, 0, t.bad):.1f}% / {t.rate(t.caught, 1, t.bad):.1f}% ({pw:+.2f} ± {pw_ci:.2f}) "
                          f"| {t.rate(t.flaky, 0, t.cases):.1f}% / {t.rate(t.flaky, 1, t.cases):.1f}% "
                          f"| {100 * t.agree / t.cases:.1f}% |", flush=True)
    print(f"\n{args.reps} suites of {CASES} cases per row, seed {args.seed}, {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
