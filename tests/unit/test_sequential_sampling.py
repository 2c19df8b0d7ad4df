"""Sequential sampling (formats/sequential.py): a case stops drawing samples once its verdict is
settled. Settled for certain, its verdict is exactly the k-sample one (checked on every sequence of
outcomes); settled at the error rate, it is never `fail`, so a case fails exactly when its k samples would fail
it; a simulated suite of mostly stable cases needs far fewer calls than fixed k at the same
false-alarm rate and power, both designs reading the same draws (the grid in
tests/perf/sequential_sampling.py)."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from pytest_evalbench.formats.sequential import Prior, SequentialRule, fit_prior, outlook, predictive, settled
from pytest_evalbench.formats.stats import case_verdict


@pytest.mark.parametrize("threshold", [0.5, 0.8])
@pytest.mark.parametrize("k", [2, 3, 5, 7])
def test_settled_for_certain_is_exactly_the_k_sample_verdict_on_every_sequence(k: int, threshold: float) -> None:
    stopped_early = 0
    for outcomes in itertools.product([True, False], repeat=k):
        fixed = case_verdict(sum(outcomes), k, threshold)
        for drawn in range(1, k + 1):
            verdict = settled(list(outcomes[:drawn]), k, threshold=threshold)
            if verdict is not None:
                assert verdict == fixed, (outcomes, drawn)
                stopped_early += drawn < k
                break
        else:
            pytest.fail(f"never settled: {outcomes}")
    assert stopped_early > 0 or k == 2  # a pass then a fail settles a 0.5 mark at k >= 3


def test_one_pass_and_one_fail_settle_five_samples_as_inconclusive() -> None:
    assert settled([True, False], 5) == "inconclusive"
    assert settled([True, True], 5) is None  # without a prior, agreement settles nothing early
    assert settled([True] * 5, 5) == "pass" and settled([False] * 5, 5) == "fail"


def test_the_predictive_distribution_is_a_distribution() -> None:
    for passes, drawn, k in [(0, 0, 5), (2, 2, 5), (1, 3, 10), (4, 4, 5)]:
        chances = predictive(passes, drawn, k, Prior(0.3, 0.2))
        assert len(chances) == k - drawn + 1 and math.isclose(sum(chances), 1.0, rel_tol=1e-9)
        assert all(0.0 <= c <= 1.0 for c in chances)
    assert math.isclose(sum(outlook(2, 2, 5, Prior(0.3, 0.2)).values()), 1.0, rel_tol=1e-9)


def test_a_u_shaped_prior_settles_agreeing_samples_and_a_flat_one_does_not() -> None:
    stable = Prior(0.06, 0.02)  # most cases always pass or always fail
    assert settled([True, True], 5, prior=stable) == "pass"
    assert settled([False, False, False, False], 5, prior=stable) is None  # a fail is settled only for certain
    assert settled([False] * 5, 5, prior=stable) == "fail"
    assert settled([True, True, True, True], 5, prior=Prior(1.0, 1.0)) is None  # P(a fail next) = 1/6
    assert settled([True, True], 5, prior=stable, alpha=1e-6) is None  # a stricter error rate draws more


def test_the_prior_is_fitted_to_the_suites_spread_of_pass_rates() -> None:
    rng = random.Random(7)
    true = Prior(2.0, 1.0)
    counts = []
    for _ in range(4000):
        rate = rng.betavariate(true.a, true.b)
        counts.append((sum(rng.random() < rate for _ in range(5)), 5))
    fitted = fit_prior(counts)
    assert fitted is not None
    assert fitted.a / (fitted.a + fitted.b) == pytest.approx(2 / 3, abs=0.02)
    assert fitted.a + fitted.b == pytest.approx(3.0, rel=0.2)
    assert fit_prior([(5, 5), (5, 5), (5, 5)]) is None  # no spread to measure
    assert fit_prior([(1, 1), (0, 1)]) is None  # one sample says nothing about spread
    bounded = fit_prior([(5, 5)] * 50 + [(0, 5)] * 50)
    assert bounded is not None and bounded.a > 0 and bounded.b > 0 and math.isfinite(bounded.a)


def stopped(outcomes: tuple[bool, ...], k: int, **rule: object) -> tuple[str, int]:
    """(verdict, samples drawn) of the sequential design reading `outcomes` in order."""
    for drawn in range(1, k + 1):
        verdict = settled(list(outcomes[:drawn]), k, **rule)  # type: ignore[arg-type]
        if verdict is not None:
            return verdict, drawn
    raise AssertionError("k samples always settle a case")


@pytest.mark.parametrize("alpha", [0.05, 0.3])
@pytest.mark.parametrize("prior", [Prior(0.06, 0.02), Prior(0.02, 0.06), Prior(1.0, 1.0), Prior(0.3, 0.3)])
@pytest.mark.parametrize(("k", "threshold"), [(3, 0.5), (5, 0.5), (5, 0.8), (7, 0.5), (10, 0.5), (10, 0.7)])
def test_a_case_fails_exactly_when_its_k_samples_would_fail_it(k: int, threshold: float, prior: Prior,
                                                              alpha: float) -> None:
    """On every sequence of outcomes and whatever the prior and error rate, the sequential verdict is
    `fail` if and only if fixed k's is: false alarms and power are fixed k's case by case."""
    early = 0
    for outcomes in itertools.product([True, False], repeat=k):
        fixed = case_verdict(sum(outcomes), k, threshold)
        verdict, drawn = stopped(outcomes, k, threshold=threshold, alpha=alpha, prior=prior)
        assert (verdict == "fail") == (fixed == "fail"), (outcomes, verdict, fixed)
        early += drawn < k
    assert early > 0


def simulate(rng: random.Random, stable: float, rate: float, k: int, suites: int = 150, cases: int = 50
             ) -> tuple[float, tuple[float, float], tuple[float, float]]:
    """(share of calls saved, (false-alarm difference, its 95% half-width), (power difference, its
    half-width)), sequential minus fixed, over simulated suites: `stable` of the cases pass (three in
    four) or fail each sample with probability `rate`, the rest are flaky (pass rate uniform in
    0.2..0.8); the prior is fitted on a baseline run of k samples per case. Common random numbers:
    each case draws its k outcomes once, fixed k reads them all, the sequential design reads them until
    it stops, so the differences are paired (their spread over suites gives the interval)."""
    calls = [0, 0]
    good = bad = 0
    alarms: list[int] = []
    caught: list[int] = []
    for _ in range(suites):
        rates = [rate if (u := rng.random()) < stable * 0.75 else 1 - rate if u < stable else rng.uniform(0.2, 0.8)
                 for _ in range(cases)]
        prior = fit_prior([(sum(rng.random() < r for _ in range(k)), k) for r in rates])
        alarm = catch = 0
        for r in rates:
            outcomes = tuple(rng.random() < r for _ in range(k))
            fixed = case_verdict(sum(outcomes), k)
            verdict, drawn = stopped(outcomes, k, prior=prior)
            calls[0] += k
            calls[1] += drawn
            changed = (verdict == "fail") - (fixed == "fail")
            if r >= 0.5:
                good, alarm = good + 1, alarm + changed
            else:
                bad, catch = bad + 1, catch + changed
        alarms.append(alarm)
        caught.append(catch)

    def paired(diffs: list[int], of: int) -> tuple[float, float]:
        mean = sum(diffs) / len(diffs)
        spread = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1) * len(diffs))
        return sum(diffs) / of, 1.96 * spread / of

    return 1 - calls[1] / calls[0], paired(alarms, good), paired(caught, bad)


@pytest.mark.parametrize(("stable", "rate", "k", "min_saved"), [
    (0.9, 0.99, 5, 0.40),  # the target: a suite where 90% of cases are stable, k = 5
    (0.9, 0.99, 10, 0.50),
    (0.9, 0.97, 5, 0.25),
    (0.75, 0.99, 5, 0.20),
])
def test_the_error_rates_are_fixed_ks_within_a_point_at_fewer_calls(stable: float, rate: float, k: int,
                                                                   min_saved: float) -> None:
    saved, (alarms, alarms_ci), (power, power_ci) = simulate(random.Random(11), stable, rate, k)
    assert saved >= min_saved
    assert abs(alarms) + alarms_ci <= 0.01  # the whole 95% interval of the paired difference within 1 point
    assert abs(power) + power_ci <= 0.01


@pytest.mark.parametrize("prior", [None, Prior(0.2, 0.05)])
def test_the_gate_replays_where_the_run_stopped(prior: Prior | None) -> None:
    """`SequentialRule.verdict` over the samples a run drew (it stops at the first settled prefix) is
    the verdict that stopped the run; a sample left unscored shrinks the budget instead of counting."""
    rule = SequentialRule(5, prior=prior)
    for outcomes in itertools.product([True, False, None], repeat=5):
        drawn = next((n for n in range(1, 6) if rule.decide(outcomes[:n]) is not None), 5)
        stopped = rule.decide(outcomes[:drawn])
        assert rule.verdict(outcomes[:drawn]) == (stopped or case_verdict(
            sum(o for o in outcomes if o is not None), sum(o is not None for o in outcomes)))
    assert rule.decide([True, None, False]) == "inconclusive"
    assert rule.decide([None] * 4) is None and rule.decide([None] * 5) == "inconclusive"
