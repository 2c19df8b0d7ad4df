"""Sequential sampling against fixed k (not part of the test suite): how many calls does stopping a
case once its verdict is settled save, and do the verdicts' error rates stay those of k samples?

Every verdict goes through the real code: `formats.sequential.settled` for the sequential design,
`formats.stats.case_verdict` over k samples for the fixed one. Model (the gate-noise script's, with a
share of stable cases): a suite of CASES cases; a stable case passes each sample with probability
STABLE_RATE (three in four of them) or fails it with that probability, a flaky case has a pass rate
drawn uniformly from 0.2..0.8. Per replicate, a baseline run of k samples per case fits the prior
(`fit_prior`, as a team would from its last run), then the fixed and the sequential design each run
the suite with fresh draws. Error rates are per case, against the case's true pass rate and the
0.5 pass mark: a false alarm is a `fail` verdict on a case at or above the mark, power the share of
cases below it that get `fail`; `flaky` is the share of inconclusive verdicts.

    PYTHONPATH=$PWD python tests/perf/sequential_sampling.py [--reps 200] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass

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
    calls: int = 0
    good: int = 0
    false_alarms: int = 0
    bad: int = 0
    caught: int = 0
    flaky: int = 0
    cases: int = 0

    def add(self, rate: float, drawn: int, verdict: str) -> None:
        self.calls += drawn
        self.cases += 1
        self.flaky += verdict == "inconclusive"
        if rate >= PASS_MARK:
            self.good += 1
            self.false_alarms += verdict == "fail"
        else:
            self.bad += 1
            self.caught += verdict == "fail"

    def rates(self) -> tuple[float, float, float]:
        """(false-alarm %, power %, flaky %)."""
        return (100 * self.false_alarms / max(1, self.good), 100 * self.caught / max(1, self.bad),
                100 * self.flaky / max(1, self.cases))


def run_item(rate: float, k: int, rng: random.Random, prior: Prior | None, alpha: float) -> tuple[int, str]:
    """(samples drawn, verdict): sequential when a prior is given (None: fixed k)."""
    outcomes: list[bool] = []
    while len(outcomes) < k:
        outcomes.append(rng.random() < rate)
        if prior is not None:
            verdict = settled(outcomes, k, threshold=PASS_MARK, alpha=alpha, prior=prior)
            if verdict is not None:
                return len(outcomes), verdict
    return k, case_verdict(sum(outcomes), k, PASS_MARK)


def compare(stable: float, k: int, alpha: float, rate: float, reps: int, rng: random.Random,
            cases: int = CASES) -> tuple[Tally, Tally]:
    """(fixed, sequential) tallies over `reps` simulated suites."""
    fixed, sequential = Tally(), Tally()
    for _ in range(reps):
        rates = [latent(rng, stable, rate) for _ in range(cases)]
        baseline = [(sum(rng.random() < r for _ in range(k)), k) for r in rates]
        prior = fit_prior(baseline) or Prior(1.0, 1.0)
        for r in rates:
            fixed.add(r, *run_item(r, k, rng, None, alpha))
            sequential.add(r, *run_item(r, k, rng, prior, alpha))
    return fixed, sequential


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    started = time.perf_counter()
    print("| stable cases | stable rate | k | α | calls saved | false alarms fixed / seq. | power fixed / seq. "
          "| flaky fixed / seq. |")
    print("|---|---|---|---|---|---|---|---|")
    for stable in STABLE_SHARES:
        for rate in STABLE_RATES:
            for k in SAMPLES:
                for alpha in ALPHAS:
                    fixed, sequential = compare(stable, k, alpha, rate, args.reps, rng)
                    saved = 100 * (1 - sequential.calls / fixed.calls)
                    (fa0, pw0, fl0), (fa1, pw1, fl1) = fixed.rates(), sequential.rates()
                    print(f"| {stable:.0%} | {rate} | {k} | {alpha} | {saved:.1f}% | {fa0:.2f}% / {fa1:.2f}% | "
                          f"{pw0:.1f}% / {pw1:.1f}% | {fl0:.1f}% / {fl1:.1f}% |", flush=True)
    print(f"\n{args.reps} suites of {CASES} cases per row, seed {args.seed}, {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
