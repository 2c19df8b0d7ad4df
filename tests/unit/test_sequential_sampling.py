"""Sequential sampling (formats/sequential.py): a case stops drawing samples once its verdict is
settled. Settled for certain, its verdict is exactly the k-sample one (checked on every sequence of
outcomes); settled at the error rate, a simulated suite of mostly stable cases needs far fewer calls
than fixed k at the same false-alarm rate and power (the grid in tests/perf/sequential_sampling.py)."""

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
    assert settled([False, False, False], 5, prior=stable) == "fail"
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


def simulate(rng: random.Random, sequential: bool, k: int = 5, suites: int = 60, cases: int = 50
             ) -> tuple[int, float, float]:
    """(calls, false-alarm rate, power) over simulated suites: 90% stable cases (pass or fail each
    sample with probability 0.99), 10% flaky (pass rate uniform in 0.2..0.8); the prior is fitted on a
    baseline run of k samples per case."""
    calls = good = alarms = bad = caught = 0
    for _ in range(suites):
        rates = [0.99 if (u := rng.random()) < 0.675 else 0.01 if u < 0.9 else rng.uniform(0.2, 0.8)
                 for _ in range(cases)]
        prior = fit_prior([(sum(rng.random() < r for _ in range(k)), k) for r in rates])
        for rate in rates:
            outcomes: list[bool] = []
            verdict = None
            while verdict is None:
                outcomes.append(rng.random() < rate)
                verdict = (settled(outcomes, k, prior=prior) if sequential
                           else case_verdict(sum(outcomes), k) if len(outcomes) == k else None)
            calls += len(outcomes)
            if rate >= 0.5:
                good, alarms = good + 1, alarms + (verdict == "fail")
            else:
                bad, caught = bad + 1, caught + (verdict == "fail")
    return calls, alarms / good, caught / bad


def test_a_mostly_stable_suite_needs_far_fewer_calls_at_the_same_error_rates() -> None:
    fixed_calls, fixed_alarms, fixed_power = simulate(random.Random(11), sequential=False)
    calls, alarms, power = simulate(random.Random(11), sequential=True)
    assert calls <= 0.6 * fixed_calls  # at least 40% fewer
    assert abs(alarms - fixed_alarms) <= 0.01
    # within the noise of 60 suites (about 800 failing cases: 2 points) and the design's own lean: a
    # flaky case below the mark that fails its first samples settles as failed a little more often
    assert -0.04 <= power - fixed_power <= 0.06


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
