"""Statistics for small evaluation runs: pure functions, stdlib only (no scipy, no pytest).
The judge's agreement with labels and rates corrected for its errors are in `formats/agreement.py`.

LLM evaluation runs are small (tens of cases per metric), so every comparison with a baseline is an
exact (or, for large samples, a standard large-sample) paired test, and the p-values of one run are
adjusted together for multiplicity before any of them may fail a build. Choices:

* one proportion: Wilson score interval (Wilson 1927), shown next to every rate;
* paired pass/fail (same cases, baseline vs current): one-sided exact McNemar test, i.e. the binomial
  test of the b pass->fail flips among the b + c discordant pairs at p = 1/2. Exact, so its size never
  exceeds alpha (the mid-p variant is available but not the default: it can);
* paired scores (dataset evals, 1..5): one-sided Wilcoxon signed-rank test (zeros dropped; exact
  permutation distribution with mid-ranks for up to EXACT_MAX non-zero pairs, normal approximation
  with the tie correction above), plus a seeded paired bootstrap interval of the mean difference;
* multiplicity: Holm (1979) step-down (controls the family-wise error rate under any dependence) or
  Benjamini-Hochberg (1995) step-up (controls the false discovery rate; an option).

Power: a threshold rule over n rows breaches at every count up to a largest one k* (interval rule: Wilson
upper bound below the minimum and exact one-sided binomial p < alpha), so its power at a true rate p is
P(K <= k*). A paired comparison's pairs flip fail->pass with probability noise/2 and pass->fail noise/2 +
drop (noise: the run's share of discordant pairs); its exact McNemar power sums over the discordant count
(Connor's normal approximation above EXACT_POWER_MAX pairs). The smallest detectable drop has 80% power.
"""

from __future__ import annotations

import functools
import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any, Literal

Z95 = 1.959964
EXACT_MAX = 60
Verdict = Literal["pass", "fail", "inconclusive"]
RuleDecision = Literal["held", "breached", "inconclusive"]
POWER = 0.8  # the power a detectable drop is detected with
EXACT_POWER_MAX = 1000
EPS = 1e-9  # a 1/n step must not count as more than an equal limit through float noise


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials; (0.0, 1.0) when n == 0 (no information)."""
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return 0.0, 1.0
    p = k / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    # Clamp float noise, and make the bounds exact at the edges (k=0 -> 0, k=n -> 1).
    low = 0.0 if k == 0 else max(0.0, min(p, centre - half))
    high = 1.0 if k == n else min(1.0, max(p, centre + half))
    return low, high


def newcombe_diff_interval(k1: int, n1: int, k2: int, n2: int, z: float = Z95) -> tuple[float, float]:
    """Interval for p2 - p1 from two independent samples (Newcombe 1998, hybrid score, method 10).

    Used when the two runs share no cases (e.g. the scenario set was regenerated). An empty side
    carries no information, so the result is then the whole range (-1, 1).
    """
    if n1 == 0 or n2 == 0:
        return -1.0, 1.0
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = wilson_interval(k1, n1, z)
    l2, u2 = wilson_interval(k2, n2, z)
    d = p2 - p1
    low = d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2)
    high = d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)
    return max(-1.0, low), min(1.0, high)


def binomial_upper_tail(k: int, m: int, mid: bool = False) -> float:
    """P(X >= k) for X ~ Binomial(m, 1/2), or the mid-p P(X > k) + P(X = k) / 2. Integer
    arithmetic, so large counts do not underflow."""
    if m < 0 or k < 0 or k > m:
        raise ValueError(f"need 0 <= k <= m, got k={k}, m={m}")
    term, above = 1, 0  # term = C(m, i), counting down from i = m
    for i in range(m, k, -1):
        above += term
        term = term * i // (m - i + 1)
    at_k = term  # C(m, k)
    tail = Fraction(above, 1) + (Fraction(at_k, 2) if mid else at_k)
    return float(tail / 2**m)


def mcnemar_drop_p(b: int, c: int, mid: bool = False) -> float:
    """One-sided McNemar p-value for a drop: b pass->fail and c fail->pass flips; 1.0 without
    discordant pairs (no evidence either way)."""
    if b + c == 0:
        return 1.0
    return binomial_upper_tail(b, b + c, mid)


def mcnemar_exact_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value (doubled smaller tail, capped at 1), for reference."""
    if b + c == 0:
        return 1.0
    return min(1.0, 2 * binomial_upper_tail(max(b, c), b + c))


def agresti_min_interval(b: int, c: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Descriptive interval for the paired difference (c - b) / n (Agresti & Min 2005: add 1/2 to
    each cell, then Wald). Shown in the HTML report; the gate decides on the exact test."""
    if n == 0:
        return -1.0, 1.0
    nn = n + 2.0
    p_b, p_c = (b + 0.5) / nn, (c + 0.5) / nn
    d = p_c - p_b
    half = z * math.sqrt(max(0.0, (p_b + p_c) - d * d) / nn)
    return max(-1.0, d - half), min(1.0, d + half)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (monotone, capped at 1), in input order."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def benjamini_hochberg(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg step-up adjusted p-values (q-values), in input order."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i], reverse=True)
    adjusted = [1.0] * m
    running = 1.0
    for back, i in enumerate(order):
        rank = m - back
        running = min(running, p_values[i] * m / rank)
        adjusted[i] = min(1.0, running)
    return adjusted


def adjust(p_values: Sequence[float], method: str) -> list[float]:
    """Adjusted p-values by `method` ("holm" or "bh")."""
    if method == "holm":
        return holm(p_values)
    if method == "bh":
        return benjamini_hochberg(p_values)
    raise ValueError(f"unknown correction {method!r}; use 'holm' or 'bh'")


def _midranks(values: Sequence[float]) -> list[float]:
    """Ranks 1..n of `values`, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def wilcoxon_drop_p(diffs: Sequence[float]) -> tuple[float, str]:
    """One-sided Wilcoxon signed-rank p-value for a decrease (current - baseline < 0), and the
    method used. Zero differences are dropped (Wilcoxon's convention); (1.0, "no change") without
    non-zero pairs. The statistic is the rank sum of the negative differences."""
    nonzero = [d for d in diffs if d != 0]
    n = len(nonzero)
    if n == 0:
        return 1.0, "no change"
    ranks = _midranks([abs(d) for d in nonzero])
    doubled = [round(2 * r) for r in ranks]  # mid-ranks are multiples of 1/2
    observed = sum(r for r, d in zip(doubled, nonzero) if d < 0)
    if n <= EXACT_MAX:
        counts = {0: 1}  # distribution of the signed-rank sum under random signs
        for r in doubled:
            nxt = dict(counts)
            for total, ways in counts.items():
                nxt[total + r] = nxt.get(total + r, 0) + ways
            counts = nxt
        tail = sum(ways for total, ways in counts.items() if total >= observed)
        return float(Fraction(tail, 2**n)), "exact"
    mean = sum(doubled) / 2
    var = sum(r * r for r in doubled) / 4  # includes the tie correction (sum of squared mid-ranks)
    z = (observed - mean - 1) / math.sqrt(var) if var else 0.0  # continuity correction of 1/2 rank
    return 0.5 * math.erfc(z / math.sqrt(2)), "normal"


def bootstrap_mean_interval(diffs: Sequence[float], resamples: int = 2000, seed: int = 0,
                            level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the mean paired difference from a seeded paired bootstrap
    (deterministic, so a rerun prints the same interval)."""
    n = len(diffs)
    if n == 0:
        return 0.0, 0.0
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(resamples))
    cut = (1 - level) / 2
    return means[int(cut * resamples)], means[min(resamples - 1, int((1 - cut) * resamples))]


@dataclass(frozen=True)
class RateEstimate:
    """k of n with its Wilson interval; rate is None when n == 0 (no data, not 0.0)."""

    k: int
    n: int
    rate: float | None
    low: float
    high: float

    @classmethod
    def of(cls, k: int, n: int, z: float = Z95) -> RateEstimate:
        low, high = wilson_interval(k, n, z)
        return cls(k=k, n=n, rate=(k / n if n else None), low=low, high=high)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def case_verdict(k: int, n: int, threshold: float = 0.5, z: float = Z95) -> Verdict:
    """Verdict of one test case run over n samples (k passed).

    n == 1: its pass or fail. n == 0 (all unscored): inconclusive. n > 1: pass when the Wilson lower
    bound >= threshold, fail when the upper bound < threshold, else inconclusive - so a flaky case
    is reported as such instead of passing or failing by luck.
    """
    if n == 0:
        return "inconclusive"
    if n == 1:
        return "pass" if k == 1 else "fail"
    low, high = wilson_interval(k, n, z)
    if low >= threshold:
        return "pass"
    if high < threshold:
        return "fail"
    return "inconclusive"


# --------------------------------------------------------------------------- power


def _pmf(k: int, n: int, p: float) -> float:
    return math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * math.log(p)
                    + (n - k) * math.log1p(-p))


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p) in floats, summed over the terms within 12 sd of the mean."""
    if k >= n or k < 0 or p <= 0 or p >= 1:  # certain: all of it, none of it, or a point mass at 0 or n
        return float(k >= n or (p <= 0 and k >= 0))
    mean, sd = n * p, math.sqrt(n * p * (1 - p))
    i, total, ratio = max(0, int(mean - 12 * sd)), 0.0, p / (1 - p)
    if k > mean + 12 * sd:
        return 1.0
    term = _pmf(i, n, p)
    for j in range(i, k + 1):
        total, term = total + term, term * (n - j) / (j + 1) * ratio
    return min(1.0, total)


@functools.lru_cache(maxsize=65536)
def mcnemar_critical(m: int, alpha: float) -> int:
    """The fewest pass->fail flips of m discordant pairs the exact one-sided McNemar test finds
    significant (p < alpha); m + 1 when none is."""
    limit, tail, term, b = Fraction(alpha) * 2**m, 0, 1, m + 1  # term = C(m, i), from i = m down
    for i in range(m, -1, -1):
        if tail + term >= limit:
            break
        tail, b, term = tail + term, i, term * i // (m - i + 1)
    return b


def mcnemar_power(n: int, noise: float, drop: float, alpha: float, min_drop: float = 0.0) -> float:
    """P(the exact McNemar test finds a drop significant at alpha and the observed drop exceeds
    `min_drop`) over n pairs that flip fail->pass with probability noise/2, pass->fail noise/2 + drop."""
    p_b, psi = noise / 2 + drop, noise + drop
    if n <= 0 or drop <= 0 or psi > 1 + EPS:
        return 0.0
    if n > EXACT_POWER_MAX:  # Connor (1987)
        spread = math.sqrt(max(psi - drop * drop, 1e-12)) * math.sqrt(2)
        z_alpha = -statistics.NormalDist().inv_cdf(alpha)
        return min(0.5 * math.erfc(-(drop * math.sqrt(n) - z_alpha * math.sqrt(psi)) / spread),
                   0.5 * math.erfc(-(drop - min_drop) * math.sqrt(n) / spread))
    psi, power = min(psi, 1.0), 0.0
    sd = math.sqrt(n * psi * (1 - psi))
    for m in range(max(0, int(n * psi - 12 * sd)), min(n, int(n * psi + 12 * sd) + 1) + 1):
        least = max(mcnemar_critical(m, alpha), int((m + n * (min_drop + EPS)) / 2) + 1)
        if least <= m:  # every pair discordant (psi 1): m = n for certain
            power += (float(m == n) if psi >= 1 else _pmf(m, n, psi)) * (1.0 - binomial_cdf(least - 1, m, p_b / psi))
    return min(1.0, power)


def _smallest(power: Callable[[float], float], high: float) -> float | None:
    """The smallest x in (0, high] with power(x) >= POWER (power increasing in x); None if none."""
    if high <= 0 or power(high) < POWER:
        return None
    low = 0.0
    for _ in range(30):
        mid = (low + high) / 2
        low, high = (low, mid) if power(mid) >= POWER else (mid, high)
    return high


@functools.lru_cache(maxsize=4096)
def mcnemar_detectable_drop(n: int, noise: float, alpha: float, min_drop: float = 0.0) -> float | None:
    """The smallest drop a paired comparison of n pairs detects with 80% power at alpha (None: none can be)."""
    return _smallest(lambda d: mcnemar_power(n, noise, d, alpha, min_drop), 1.0 - noise)


def breaching_count(n: int, minimum: float, alpha: float, decision: str = "interval") -> int:
    """The largest k of n that breaches a minimum (-1 if none): below it as a point, or with the Wilson
    upper bound below it and the exact one-sided binomial p-value at the minimum below alpha."""
    if decision == "point":
        return math.ceil(n * minimum - EPS) - 1
    low, high = -1, n + 1  # both conditions hold for every k up to the answer
    while high - low > 1:
        mid = (low + high) // 2
        ok = wilson_interval(mid, n)[1] < minimum - EPS and binomial_cdf(mid, n, minimum) < alpha
        low, high = (mid, high) if ok else (low, mid)
    return low


def threshold_decision(k: int, n: int, minimum: float, alpha: float, decision: str = "interval") -> RuleDecision:
    """`breached`, `held` or, deciding on the interval, `inconclusive` (it straddles the minimum)."""
    if k <= breaching_count(n, minimum, alpha, decision):
        return "breached"
    return "held" if decision == "point" or wilson_interval(k, n)[0] >= minimum - EPS else "inconclusive"


def rows_to_detect_a_fall(minimum: float, alpha: float, decision: str = "interval", most: int = 1_000_000) -> int | None:
    """The fewest rows whose rule can breach `minimum` at all (a fall to a rate of 0 is then detected
    with 80% power at most): what a rule that `detects no drop` would need; None past `most`."""
    if breaching_count(most, minimum, alpha, decision) < 0:
        return None
    low, high = 0, most  # breaching becomes possible once and stays possible with more rows
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if breaching_count(mid, minimum, alpha, decision) >= 0 else (mid, high)
    return high


def threshold_detectable_drop(n: int, minimum: float, alpha: float, decision: str = "interval") -> float | None:
    """How far below the minimum the true rate must be for n rows to breach it with 80% power (None: they cannot)."""
    most = breaching_count(n, minimum, alpha, decision)
    return None if most < 0 else _smallest(lambda d: binomial_cdf(most, n, minimum - d), minimum)
