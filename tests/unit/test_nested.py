"""Nested cross-validation of the judge's calibration (`formats/nested.py`): the style and threshold
chosen inside each fold, the kappa of the whole procedure, and the gate reading it."""

from __future__ import annotations

import json
import random
from pathlib import Path

from pytest_evalbench.formats.agreement import agreement_entry, cross_validated_judgments, kappa
from pytest_evalbench.formats.nested import StyleAnswers, choose, nested_judgments, stratified_folds
from pytest_evalbench.formats.spec import JudgeConfig
from pytest_evalbench.kinds.judges import unreliable_judges

LABELS = [i % 2 == 0 for i in range(40)]


def noise(seed: int) -> StyleAnswers:
    """A style whose P(present) says nothing about the label."""
    rng = random.Random(seed)
    probabilities = [round(rng.random(), 4) for _ in LABELS]
    return StyleAnswers([p >= 0.5 for p in probabilities], probabilities)


def test_folds_are_stratified_and_deterministic() -> None:
    folds = stratified_folds(LABELS, 10)
    assert folds == stratified_folds(LABELS, 10)
    for f in range(10):
        members = [LABELS[i] for i in range(40) if folds[i] == f]
        assert len(members) == 4 and sum(members) == 2


def test_a_style_that_wins_by_noise_is_not_credited_with_its_luck() -> None:
    """Four styles of pure noise: the best one's cross-validated kappa, chosen on the same labels,
    looks like a judge; the whole procedure, measured on folds it never chose on, is no better than chance."""
    styles = {f"s{k}": noise(k) for k in range(4)}
    in_sample = max(kappa(LABELS, cross_validated_judgments(list(s.probabilities), LABELS), [True, False]) or -1
                    for s in styles.values())
    nested = nested_judgments(LABELS, styles, probability=True, preferred="s0")
    honest = agreement_entry(LABELS, nested.verdicts, [True, False], weighted=False)
    assert in_sample >= 0.19
    assert honest["kappa"] is not None and honest["kappa"] < in_sample - 0.2 and honest["kappa"] < 0.15
    assert len(nested.choices) > 1  # the folds disagree on which noise is best


def test_a_real_signal_survives_nesting() -> None:
    """A style whose P(present) separates the labels (with a few errors) is chosen in every fold, and
    the procedure's kappa stays near its own cross-validated one."""
    rng = random.Random(1)
    good = [(0.8 if label else 0.2) + rng.uniform(-0.35, 0.35) for label in LABELS]
    styles = {"plain": noise(3), "contrast": StyleAnswers([True] * 40, good), "examples": noise(4)}
    nested = nested_judgments(LABELS, styles, probability=True, preferred="plain")
    assert nested.choices == {"contrast": 10}
    own = kappa(LABELS, cross_validated_judgments(good, LABELS), [True, False])
    honest = kappa(LABELS, nested.verdicts, [True, False])
    assert own is not None and honest is not None and honest > 0.6 and abs(honest - own) < 0.15


def test_the_style_is_chosen_by_the_verdict_the_run_uses() -> None:
    """With probability scoring a run decides by the threshold: a style whose sampled judgments are
    perfect but whose P(present) says nothing loses to one whose P(present) separates the labels."""
    sampled_only = StyleAnswers(list(LABELS), noise(5).probabilities)
    separating = StyleAnswers([True] * 40, [0.9 if label else 0.1 for label in LABELS])
    styles = {"plain": sampled_only, "contrast": separating}
    assert choose(LABELS, styles, probability=True, preferred="plain").style == "contrast"
    assert choose(LABELS, styles, probability=False, preferred="contrast").style == "plain"


def test_min_kappa_reads_the_lower_of_the_nested_and_the_styles_own_kappa(tmp_path: Path) -> None:
    entry = {"metric_id": "m01", "judge": "j", "prompt": "examples", "n": 40, "kappa": 0.8, "judge_n": 40,
             "judge_kappa": 0.8, "threshold": 0.5, "threshold_kappa": 0.7, "nested_n": 40, "nested_kappa": 0.3}
    (tmp_path / "calibration.json").write_text(json.dumps([entry]))
    config = JudgeConfig(min_kappa=0.4, probability=True)
    assert unreliable_judges(tmp_path, config, ["m01"], "j") == {
        "m01": "judge-only nested kappa 0.30 < min_kappa 0.40 (n=40, calibration.json)"}
    (tmp_path / "calibration.json").write_text(json.dumps([dict(entry, nested_kappa=0.9, threshold_kappa=0.35)]))
    assert unreliable_judges(tmp_path, config, ["m01"], "j") == {
        "m01": "judge-only threshold kappa 0.35 < min_kappa 0.40 (n=40, calibration.json)"}
    (tmp_path / "calibration.json").write_text(json.dumps([dict(entry, nested_kappa=0.5)]))
    assert unreliable_judges(tmp_path, config, ["m01"], "j") == {}
