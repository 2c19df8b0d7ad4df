"""Agreement between a judge and human labels: exact agreement, Cohen's kappa (quadratic-weighted
for ordinal 1-5 scores) and a 95% interval by a seeded percentile bootstrap (deterministic).

Kappa compares the observed agreement with the agreement expected by chance from the two
marginals, so a judge that always answers "present" scores 0 however often the labels are
"present", and a perfect judge scores 1. Kappa is undefined (None) when chance agreement is
already total (both raters used a single, same category).
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence
from typing import Any

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
    """n, exact agreement, kappa with its interval and the confusion matrix (human label -> judge verdict ->
    count)
    over the pairs where the judge gave a verdict; `unscored` counts the others."""
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
