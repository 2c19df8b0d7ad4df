"""Small-sample statistics for CI gating: pure functions, stdlib only (no scipy, no pytest).

LLM evaluation runs are small (tens of cases per metric), so every rate carries an interval and
every comparison with a baseline is tested before it is allowed to fail a build. Choices:

* one proportion: Wilson score interval (Wilson 1927) - sane at k=0, k=n and small n, unlike Wald;
* two unpaired proportions: Newcombe's hybrid score interval (Newcombe 1998, method 10);
* two paired proportions (same cases, baseline vs current): Agresti-Min interval (add 1/2 to each
  cell of the 2x2 table, then Wald; Agresti & Min 2005) plus the exact McNemar test.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any, Literal

Z95 = 1.959964
Verdict = Literal["pass", "fail", "inconclusive"]


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


def mcnemar_exact_p(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value: binomial test of min(b, c) among the b + c discordant pairs
    at p = 1/2, doubled and capped at 1. Integer arithmetic, so large counts do not underflow."""
    m = b + c
    if m == 0:
        return 1.0
    term, tail = 1, 0  # term = C(m, i)
    for i in range(min(b, c) + 1):
        tail += term
        term = term * (m - i) // (i + 1)
    return float(min(Fraction(1), Fraction(2 * tail, 2**m)))


def agresti_min_interval(b: int, c: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Interval for the paired difference (c - b) / n: Agresti & Min (2005), "Simple improved
    confidence intervals for comparing matched proportions", Stat. Med. 24:729-740 - add 1/2 to
    each of the four cells, then Wald. Good coverage at small n, and defined when b = c = 0."""
    if n == 0:
        return -1.0, 1.0
    nn = n + 2.0
    p_b, p_c = (b + 0.5) / nn, (c + 0.5) / nn
    d = p_c - p_b
    half = z * math.sqrt(max(0.0, (p_b + p_c) - d * d) / nn)
    return max(-1.0, d - half), min(1.0, d + half)


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


@dataclass(frozen=True)
class PairedResult:
    """Baseline vs current outcome on the cases both runs share.

    b = pass->fail flips, c = fail->pass flips, diff = (c - b) / n_shared (current minus baseline).
    `significant_drop` means the whole 95% interval lies below zero.
    """

    n_shared: int
    b: int
    c: int
    diff: float
    low: float
    high: float
    p_value: float
    significant_drop: bool
    pass_to_fail: list[str] = field(default_factory=list)
    fail_to_pass: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def paired_comparison(baseline: dict[str, bool], current: dict[str, bool], z: float = Z95) -> PairedResult:
    """Compare two runs case by case over the keys present in both (others are ignored).

    Interval: Agresti-Min (see `agresti_min_interval`); test: exact McNemar. The significance flag
    follows the interval, so it can disagree with p < 0.05 in borderline cases.
    """
    shared = sorted(set(baseline) & set(current))
    pass_to_fail = [key for key in shared if baseline[key] and not current[key]]
    fail_to_pass = [key for key in shared if not baseline[key] and current[key]]
    n, b, c = len(shared), len(pass_to_fail), len(fail_to_pass)
    low, high = agresti_min_interval(b, c, n, z)
    return PairedResult(
        n_shared=n, b=b, c=c, diff=((c - b) / n if n else 0.0), low=low, high=high,
        p_value=mcnemar_exact_p(b, c), significant_drop=n > 0 and high < 0,
        pass_to_fail=pass_to_fail, fail_to_pass=fail_to_pass,
    )


def case_verdict(k: int, n: int, threshold: float = 0.5, z: float = Z95) -> Verdict:
    """Verdict of one test case run over n samples (k passed).

    n == 1: the raw outcome (an interval on one sample is always inconclusive, and a single-sample
    run must still give pass/fail). n == 0 (all unscored): inconclusive. n > 1: pass when the
    Wilson lower bound >= threshold, fail when the upper bound < threshold, else inconclusive -
    so a flaky case is reported as such instead of passing or failing by luck.
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
