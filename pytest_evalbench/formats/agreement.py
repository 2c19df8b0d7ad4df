"""The judge's agreement with human labels, its probability thresholds, and pass rates corrected for
its known errors: pure functions, stdlib only.

Agreement between a judge and human labels: exact agreement, Cohen's kappa (quadratic-weighted for
ordinal 1-5 scores) and a 95% interval by a seeded percentile bootstrap (deterministic). Kappa compares
the observed agreement with the agreement expected by chance from the two marginals, so a judge that
always answers "present" scores 0 however often the labels are "present", and a perfect judge scores 1.
Kappa is undefined (None) when chance agreement is already total (both raters used a single, same
category).

Pass rates corrected for the judge's known errors (Rogan-Gladen 1978), with a delta-method interval.
With a calibration on file, the judge's sensitivity (present labels it calls present) and specificity
(absent labels it calls absent) per metric come from calibration.json's confusion matrix. If the judge
reports the behaviour in a share p of the rows, the prevalence of the behaviour is estimated as::

    pi = (p + specificity - 1) / (sensitivity + specificity - 1)      clipped to [0, 1]

A positive metric passes when the behaviour is present (pass rate = pi), a negative one when it is
absent (pass rate = 1 - pi). The correction is undefined when sensitivity + specificity <= 1 (the judge
is no better than chance) or either is not estimable (no labelled example of that class). Only
judge-decided rows are corrected: a row a deterministic check decided is taken as it is, so a rate over
k_c check-passed of n_c check rows and n_j judge rows with corrected pass rate r_j is
(k_c + n_j r_j) / (n_c + n_j); rates pooled over several metrics combine each metric's corrected judge
rows the same way, weighted by their row counts. Interval: delta method with three independent
binomials per metric (the run's share p over its judge rows, the calibration's sensitivity and
specificity over its labelled examples)::

    Var(pi) = [p~(1-p~)/(n+4) + pi^2 se~(1-se~)/(n_pos+4) + (1-pi)^2 sp~(1-sp~)/(n_neg+4)] / J^2

with J = sensitivity + specificity - 1 and x~ = (successes + 2) / (trials + 4) (Agresti-Coull), so a
perfect calibration or a 0/n run still carries uncertainty. Pooled: Var = sum (n_j/N)^2 Var(pi_m). The
95% interval is the estimate +- 1.96 sd, clipped to [0, 1].
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from pytest_evalbench.formats.stats import Z95

BOOTSTRAP = 2000
SEED = 20240615


def _weight(a: Hashable, b: Hashable, categories: list[Hashable], weighted: bool) -> float:
    """Disagreement weight: 0/1 for nominal labels, ((i - j) / (k - 1))^2 for ordinal ones."""
    if not weighted:
        return 0.0 if a == b else 1.0
    span = max(1, len(categories) - 1)
    return ((categories.index(a) - categories.index(b)) / span) ** 2


def kappa(labels: Sequence[Hashable], verdicts: Sequence[Hashable], categories: list[Hashable], *,
          weighted: bool = False) -> float | None:
    """Cohen's kappa (weighted: quadratic weights over the ordered `categories`)."""
    n = len(labels)
    if n == 0:
        return None
    observed = sum(_weight(a, b, categories, weighted) for a, b in zip(labels, verdicts)) / n
    p_label = {c: sum(1 for a in labels if a == c) / n for c in categories}
    p_verdict = {c: sum(1 for b in verdicts if b == c) / n for c in categories}
    expected = sum(p_label[a] * p_verdict[b] * _weight(a, b, categories, weighted)
                   for a in categories for b in categories)
    if expected == 0:
        return None
    return 1.0 - observed / expected


def kappa_interval(labels: Sequence[Hashable], verdicts: Sequence[Hashable], categories: list[Hashable], *,
                   weighted: bool = False) -> list[float] | None:
    """95% percentile-bootstrap interval of kappa (resamples where kappa is undefined are skipped)."""
    n = len(labels)
    if n < 2:
        return None
    rng = random.Random(SEED)
    values = []
    for _ in range(BOOTSTRAP):
        picks = [rng.randrange(n) for _ in range(n)]
        value = kappa([labels[i] for i in picks], [verdicts[i] for i in picks], categories, weighted=weighted)
        if value is not None:
            values.append(value)
    if len(values) < BOOTSTRAP // 2:
        return None
    values.sort()
    return [_round(values[int(0.025 * (len(values) - 1))]), _round(values[int(0.975 * (len(values) - 1))])]


def _round(value: float) -> float:
    return round(value, 4) + 0.0  # + 0.0 turns -0.0 into 0.0


def _name(category: Any) -> str:
    if isinstance(category, bool):
        return "present" if category else "absent"
    return str(category)


def agreement_entry(labels: Sequence[Any], verdicts: Sequence[Any], categories: list[Any], *,
                    weighted: bool) -> dict[str, Any]:
    """n, exact agreement, kappa with its interval and the confusion matrix (human label -> judge's judgment ->
    count)
    over the pairs where the judge gave a judgment; `unscored` counts the others."""
    pairs = [(a, b) for a, b in zip(labels, verdicts) if b is not None]
    scored_labels, scored_verdicts = [a for a, _ in pairs], [b for _, b in pairs]
    value = kappa(scored_labels, scored_verdicts, categories, weighted=weighted)
    confusion = {_name(a): {_name(b): sum(1 for x, y in pairs if x == a and y == b) for b in categories}
                 for a in categories}
    return {
        "n": len(pairs),
        "unscored": len(labels) - len(pairs),
        "agreement": round(sum(1 for a, b in pairs if a == b) / len(pairs), 4) if pairs else None,
        "kappa": None if value is None else _round(value),
        "kappa_ci": kappa_interval(scored_labels, scored_verdicts, categories, weighted=weighted),
        "weighting": "quadratic" if weighted else "none",
        "confusion": confusion,
    }


def best_threshold(probabilities: Sequence[float], labels: Sequence[bool]) -> float | None:
    """The cut on P(present) whose judgments (P >= cut) agree best with the labels by Cohen's kappa: a
    midpoint between neighbouring observed probabilities (ties: the one nearest 0.5); None when the
    labels hold one category only or kappa is undefined for every cut. A cut is strictly inside
    (0, 1) (a cut of 0 or 1 would decide without the judge). One sort, then one sweep: each cut's
    confusion counts follow from the previous cut's."""
    order = sorted(range(len(probabilities)), key=probabilities.__getitem__)
    return _best_cut([probabilities[i] for i in order], [labels[i] for i in order])


def _best_cut(values: list[float], labels: list[bool]) -> float | None:
    """`best_threshold` over probabilities sorted ascending (labels in the same order): O(n)."""
    n = len(values)
    positives = sum(labels)
    if n == 0 or positives in (0, n):
        return None
    distinct = sorted(set(values))
    cuts = [(a + b) / 2 for a, b in pairwise(distinct)] or distinct
    # the judgments of a cut: present for every value >= cut; walk the cuts upwards
    below = below_present = 0  # examples under the cut (judgment absent), and those labelled present
    best: tuple[float, float, float] | None = None  # (kappa, -distance from 0.5, cut)
    for cut in cuts:
        while below < n and values[below] < cut:
            below_present += labels[below]
            below += 1
        value = _kappa_of(n, positives, n - below, positives - below_present)
        rounded = _round(cut)
        if value is not None and 0.0 < rounded < 1.0 and (best is None or (value, -abs(cut - 0.5)) > best[:2]):
            best = (value, -abs(cut - 0.5), cut)
    return None if best is None else _round(best[2])


def _kappa_of(n: int, positives: int, called: int, hits: int) -> float | None:
    """`kappa(labels, judgments, [True, False])` from counts: n examples, `positives` labelled present,
    `called` judged present, `hits` both; the same arithmetic, so the same float."""
    observed = ((called - hits) + (positives - hits)) / n
    expected = positives / n * ((n - called) / n) + (n - positives) / n * (called / n)
    if expected == 0:
        return None
    return 1.0 - observed / expected


def cross_validated_judgments(probabilities: Sequence[float], labels: Sequence[bool]) -> list[bool | None]:
    """Leave-one-out: each example's judgment comes from the threshold chosen on all the others, so no
    example helps set the cut that scores it; None where no threshold could be chosen. Sorted once:
    each leave-one-out search is one O(n) sweep."""
    order = sorted(range(len(probabilities)), key=probabilities.__getitem__)
    values, sorted_labels = [probabilities[i] for i in order], [labels[i] for i in order]
    out: list[bool | None] = [None] * len(probabilities)
    for position, i in enumerate(order):
        cut = _best_cut(values[:position] + values[position + 1:],
                        sorted_labels[:position] + sorted_labels[position + 1:])
        out[i] = None if cut is None else probabilities[i] >= cut
    return out


UNDEFINED = "sensitivity + specificity ≤ 1"


@dataclass(frozen=True)
class JudgeAccuracy:
    """One metric's judge against human labels: the calibration's confusion matrix, present = positive."""

    true_pos: int
    false_neg: int
    false_pos: int
    true_neg: int

    @classmethod
    def from_confusion(cls, confusion: Mapping[str, Mapping[str, Any]]) -> JudgeAccuracy:
        """From calibration.json's `confusion` (human label -> judge's judgment -> count)."""
        def count(label: str, verdict: str) -> int:
            row = confusion.get(label)
            value = row.get(verdict, 0) if isinstance(row, Mapping) else 0
            return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
        return cls(count("present", "present"), count("present", "absent"),
                   count("absent", "present"), count("absent", "absent"))

    @property
    def sensitivity(self) -> float | None:
        n = self.true_pos + self.false_neg
        return self.true_pos / n if n else None

    @property
    def specificity(self) -> float | None:
        n = self.true_neg + self.false_pos
        return self.true_neg / n if n else None

    def undefined(self) -> str | None:
        """Why the correction is undefined for this judge, or None."""
        se, sp = self.sensitivity, self.specificity
        if se is None:
            return "sensitivity not estimable: no calibration example labelled present"
        if sp is None:
            return "specificity not estimable: no calibration example labelled absent"
        if se + sp <= 1:
            return UNDEFINED
        return None


@dataclass(frozen=True)
class Stratum:
    """One metric's rows inside a rate: judge-decided and check-decided passes and scored rows."""

    metric_id: str
    metric_type: str | None
    judge_passed: int
    judge_n: int
    check_passed: int = 0
    check_n: int = 0


@dataclass(frozen=True)
class CorrectedRate:
    """A pass rate corrected for the judge's errors, with its 95% interval; or why it is undefined."""

    rate: float | None
    low: float | None
    high: float | None
    undefined: str | None = None
    judge_rows: int = 0
    """Scored rows the judge decided (the corrected part); the rest were decided by checks."""

    def text(self) -> str:
        """`corrected 0.57 [0.37, 0.77]` or `corrected: undefined (sensitivity + specificity ≤ 1)`."""
        if self.rate is None:
            return f"corrected: undefined ({self.undefined})"
        return f"corrected {self.rate:.2f} [{self.low:.2f}, {self.high:.2f}]"

    def to_json(self) -> dict[str, Any]:
        return {"pass_rate": self.rate, "ci": None if self.low is None else [self.low, self.high],
                "undefined": self.undefined, "judge_rows": self.judge_rows}


def _tilde(k: int, n: int) -> tuple[float, int]:
    return (k + 2) / (n + 4), n + 4


def _prevalence(present: int, n: int, acc: JudgeAccuracy) -> tuple[float, float]:
    """Rogan-Gladen prevalence of "present" (clipped) and its delta-method variance."""
    se, sp = acc.sensitivity, acc.specificity
    assert se is not None
    assert sp is not None
    j = se + sp - 1
    pi = min(1.0, max(0.0, (present / n + sp - 1) / j))
    p_t, n_t = _tilde(present, n)
    se_t, se_n = _tilde(acc.true_pos, acc.true_pos + acc.false_neg)
    sp_t, sp_n = _tilde(acc.true_neg, acc.true_neg + acc.false_pos)
    var = (p_t * (1 - p_t) / n_t + pi * pi * se_t * (1 - se_t) / se_n
           + (1 - pi) ** 2 * sp_t * (1 - sp_t) / sp_n) / (j * j)
    return pi, var


def correct(strata: Iterable[Stratum], accuracy: Mapping[str, JudgeAccuracy]) -> CorrectedRate | None:
    """The corrected pass rate over these strata; None when there is nothing to correct (no
    judge-decided row); undefined when a metric with judge rows has no calibration entry."""
    strata = [s for s in strata if s.judge_n or s.check_n]
    judged = [s for s in strata if s.judge_n]
    if not judged:
        return None
    judge_rows = sum(s.judge_n for s in judged)
    missing = sorted({s.metric_id for s in judged if s.metric_id not in accuracy})
    if missing:
        return CorrectedRate(None, None, None, f"no calibration for {', '.join(missing)}", judge_rows)
    total = sum(s.judge_n + s.check_n for s in strata)
    passed, var = float(sum(s.check_passed for s in strata)), 0.0
    for s in judged:
        acc = accuracy[s.metric_id]
        why = acc.undefined()
        if why is not None:
            return CorrectedRate(None, None, None, why, judge_rows)
        positive = s.metric_type != "negative"
        present = s.judge_passed if positive else s.judge_n - s.judge_passed
        pi, v = _prevalence(present, s.judge_n, acc)
        passed += s.judge_n * (pi if positive else 1 - pi)
        var += (s.judge_n / total) ** 2 * v
    rate = passed / total
    sd = math.sqrt(var)
    return CorrectedRate(_round(rate), _round(max(0.0, rate - Z95 * sd)), _round(min(1.0, rate + Z95 * sd)),
                         judge_rows=judge_rows)


class StrataCounter:
    """Counts scored rows into strata by (target, group) and metric: what `correct` reads."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], dict[str, list[Any]]] = {}

    def add(self, target: str, groups: Iterable[str], metric_id: str, metric_type: str | None,
            passed: bool | None, decided_by: str | None) -> None:
        if passed is None:
            return
        offset = 2 if decided_by == "check" else 0
        for group in groups:
            entry = self.counts.setdefault((target, group), {}).setdefault(metric_id, [metric_type, 0, 0, 0, 0])
            entry[1 + offset] += bool(passed)
            entry[2 + offset] += 1

    def strata(self, target: str, group: str) -> list[Stratum]:
        return [Stratum(mid, e[0], e[1], e[2], e[3], e[4]) for mid, e in self.counts.get((target, group), {}).items()]

    def corrected(self, target: str, group: str, accuracy: Mapping[str, JudgeAccuracy]) -> CorrectedRate | None:
        return correct(self.strata(target, group), accuracy)
