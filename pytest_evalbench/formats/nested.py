"""Choosing a judge's prompt style and P(present) threshold, and what that choice is worth on examples
it never saw: nested cross-validation. Pure functions, stdlib only.

Calibration picks, per metric, the prompt style (of several) and the threshold on P(present) that
agree best with the human labels. A figure measured on the same labels the choice was made on is
optimistic: the best of three noisy estimates is biased upwards even when each one is honest, and a
threshold set on an example helps score it. The procedure is therefore run again inside each of K
outer folds on the other folds' examples only (the style by its cross-validated kappa there, the
threshold on them), and the judgments it gives the held-out fold are pooled: the kappa of those
judgments is the kappa of the whole procedure, the figure `min_kappa` gates.

Folds are stratified and deterministic: the examples of each label, in their order, are dealt round
the folds in turn, so a rerun gives the same folds and every fold holds both labels where it can.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_evalbench.formats.agreement import best_threshold, cross_validated_judgments, kappa

OUTER_FOLDS = 10
BINARY: list[object] = [True, False]


@dataclass(frozen=True)
class StyleAnswers:
    """One prompt style's answers on the judge's examples, in example order: the sampled judgments and
    (with probability scoring) P(present), None where the judge gave none."""

    verdicts: Sequence[bool | None]
    probabilities: Sequence[float | None]


@dataclass(frozen=True)
class Choice:
    """What the procedure chose on some examples: a style, its threshold (None: the sampled judgment
    decides), and the cross-validated kappa each style reached there."""

    style: str
    threshold: float | None
    merits: dict[str, float | None]


@dataclass(frozen=True)
class NestedResult:
    """The held-out judgments of the whole procedure, and how often each style was chosen over the folds."""

    verdicts: list[bool | None]
    choices: dict[str, int]
    folds: int


def _verdict(answers: StyleAnswers, i: int, threshold: float | None) -> bool | None:
    """What a run decides for example i: P(present) >= threshold when both exist, else the sampled judgment."""
    p = answers.probabilities[i]
    return p >= threshold if threshold is not None and p is not None else answers.verdicts[i]


def _threshold(answers: StyleAnswers, labels: Sequence[bool], indices: Sequence[int]) -> float | None:
    scored = [i for i in indices if answers.probabilities[i] is not None]
    return best_threshold([answers.probabilities[i] or 0.0 for i in scored], [labels[i] for i in scored])


def _merit(answers: StyleAnswers, labels: Sequence[bool], indices: Sequence[int], probability: bool) -> float | None:
    """A style's cross-validated kappa on `indices`: with probability scoring each example decided by a
    threshold set on the others (the sampled judgment where none can be set or P is missing); without,
    its sampled judgments (nothing is fitted to them)."""
    verdicts = [answers.verdicts[i] for i in indices]
    if probability:
        scored = [k for k, i in enumerate(indices) if answers.probabilities[i] is not None]
        cv = cross_validated_judgments([answers.probabilities[indices[k]] or 0.0 for k in scored],
                                      [labels[indices[k]] for k in scored])
        for k, value in zip(scored, cv):
            verdicts[k] = value if value is not None else verdicts[k]
    pairs = [(labels[i], v) for i, v in zip(indices, verdicts) if v is not None]
    return kappa([a for a, _ in pairs], [b for _, b in pairs], BINARY) if pairs else None


def choose(labels: Sequence[bool], styles: Mapping[str, StyleAnswers], indices: Sequence[int] | None = None, *,
           probability: bool, preferred: str) -> Choice:
    """The style with the highest cross-validated kappa on `indices` (all examples by default; a tie
    keeps `preferred`, then the order of `styles`), and with probability scoring its threshold set on them."""
    chosen = list(range(len(labels))) if indices is None else list(indices)
    merits = {style: _merit(answers, labels, chosen, probability) for style, answers in styles.items()}
    def rank(style: str) -> tuple[float, bool, int]:
        merit = merits[style]
        return (-(merit if merit is not None else -2.0), style != preferred, list(styles).index(style))

    order = sorted(styles, key=rank)
    style = order[0]
    threshold = _threshold(styles[style], labels, chosen) if probability else None
    return Choice(style, threshold, merits)


def stratified_folds(labels: Sequence[bool], folds: int = OUTER_FOLDS) -> list[int]:
    """Each example's fold: the examples of each label dealt round the folds in turn, continuing
    where the other label stopped, so fold sizes differ by at most one."""
    out = [0] * len(labels)
    dealt = 0
    for value in (True, False):
        for i, label in enumerate(labels):
            if label is value:
                out[i] = dealt % folds
                dealt += 1
    return out


def nested_judgments(labels: Sequence[bool], styles: Mapping[str, StyleAnswers], *, probability: bool,
                    preferred: str, folds: int = OUTER_FOLDS) -> NestedResult:
    """Every example's judgment from the procedure (`choose`) run on the other folds only."""
    k = max(2, min(folds, len(labels)))
    fold = stratified_folds(labels, k)
    verdicts: list[bool | None] = [None] * len(labels)
    chosen: Counter[str] = Counter()
    for f in range(k):
        held = [i for i in range(len(labels)) if fold[i] == f]
        train = [i for i in range(len(labels)) if fold[i] != f]
        if not held or not train:
            continue
        choice = choose(labels, styles, train, probability=probability, preferred=preferred)
        chosen[choice.style] += 1
        for i in held:
            verdicts[i] = _verdict(styles[choice.style], i, choice.threshold)
    return NestedResult(verdicts, dict(sorted(chosen.items())), k)
