"""Judge prompt styles, P(present) from log-probabilities, thresholds set by leave-one-out, and the
judge-only split of calibration."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
from helpers import METRICS, write_benchmark

from pytest_evalbench.base.errors import EvalbenchWarning, InputError
from pytest_evalbench.formats.agreement import best_threshold, cross_validated_judgments, kappa
from pytest_evalbench.formats.results import Message
from pytest_evalbench.formats.spec import JudgeConfig, Metric, judge_prompt_style, load_spec
from pytest_evalbench.kinds.calibration.kind import calibration_entries
from pytest_evalbench.kinds.judges import calibrated_thresholds, judge_accuracy, unreliable_judges
from pytest_evalbench.kinds.labels import CalibrationRecord
from pytest_evalbench.kinds.metric_judge import (
    Example,
    UnusableProbability,
    judge_messages,
    pick_contrast,
    present_probability,
)
from pytest_evalbench.llm.transport import parse_logprobs
from pytest_evalbench.testing.scripts import verdict_logprobs

ASKS = Metric(id="m01", name="Asks", type="positive", definition="The assistant asks a clarifying question.",
              examples=["What is your budget?"])


def said(reply: str) -> list[Message]:
    return [Message(role="user", content="plan my trip"), Message(role="assistant", content=reply)]


EXAMPLES = [Example(2, said("Where to? PRESENT-A"), True, "asks where"),
            Example(3, said("Go to Rome. ABSENT-A"), False, None),
            Example(5, said("How long? PRESENT-B"), True, None),
            Example(7, said("Pack socks. ABSENT-B"), False, None)]


def test_contrast_pair_never_holds_the_example_it_scores() -> None:
    assert [e.line for e in pick_contrast(EXAMPLES)] == [2, 3]
    assert [e.line for e in pick_contrast(EXAMPLES, exclude=2)] == [5, 3]
    assert [e.line for e in pick_contrast(EXAMPLES, exclude=3)] == [2, 7]
    for example in EXAMPLES:
        shown = pick_contrast(EXAMPLES, exclude=example.line)
        messages = judge_messages(ASKS, example.transcript, "contrast", shown)
        marker = example.transcript[1].content.split()[-1]
        assert sum(marker in m["content"] for m in messages) == 1  # only in the question itself
        assert marker in messages[-1]["content"]


def test_styles_differ_in_what_they_show() -> None:
    transcript = said("Sure, go to Rome.")
    examples = judge_messages(ASKS, transcript, "examples")
    plain = judge_messages(ASKS, transcript, "plain")
    contrast = judge_messages(ASKS, transcript, "contrast", pick_contrast(EXAMPLES))
    assert "What is your budget?" in examples[-1]["content"]
    assert "What is your budget?" not in plain[-1]["content"] and len(plain) == 2
    assert plain[-1] == contrast[-1]  # the question is the plain one, after the answered examples
    assert [m["role"] for m in contrast] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert json.loads(contrast[2]["content"]) == {"justification": "asks where", "present": True}
    assert json.loads(contrast[4]["content"])["present"] is False


@pytest.mark.parametrize("p", [0.9, 0.2, 0.5])
def test_probability_of_present_from_the_verdict_token(p: float) -> None:
    answer = {"justification": "It asks \"present\": where.", "present": p >= 0.5}
    parsed = parse_logprobs(verdict_logprobs(answer, p))
    assert present_probability(parsed) == pytest.approx(p, abs=1e-4)


def test_no_logprobs_gives_no_probability() -> None:
    assert parse_logprobs(None) is None and parse_logprobs({"content": "x"}) is None
    assert present_probability(None) is None and present_probability([]) is None


@pytest.mark.parametrize(("logprobs", "reason"), [
    ([['{"present": ', {}], ["maybe", {"maybe": -0.1}]], "no token for the present value"),
    ([['{"present":', {}], [" true", {" true": -0.01}]], "do not list false"),
    ([['{"present":', {}], [" false", {" false": -0.01, "x": -2.0}]], "do not list true"),
    ([['{"present":', {}], [" true", {}]], "do not list true or false"),
    ([['{"present":', {}], [" true", {" true": -0.01, " false": None}]], "malformed"),
    ([['{"present":', {}], [" true", {" true": 800.0, " false": 800.0}]], "malformed"),
    ([['{"present":', {}], [" true", {" true": -1e4, " false": -1e4}]], "not a number"),
])
def test_log_probabilities_that_cannot_be_read_are_not_a_probability(logprobs: Any, reason: str) -> None:
    """Given but unreadable: never a P(present) of 0 or 1 by omission, always the reason."""
    with pytest.raises(UnusableProbability, match=reason):
        present_probability(logprobs)


def test_parse_logprobs_bounds_hostile_alternatives() -> None:
    data = {"content": [{"token": "x" * 500, "logprob": 0,
                         "top_logprobs": [{"token": f"t{i}", "logprob": -1} for i in range(100)]
                         + [{"token": "bad", "logprob": True}, "junk"]}] * 2000}
    huge = {"content": [{"token": "true", "logprob": 0, "top_logprobs": [
        {"token": "true", "logprob": 0}, {"token": "big", "logprob": 10**400},
        {"token": "inf", "logprob": float("inf")}, {"token": "nan", "logprob": float("nan")}, "junk"]}]}
    # numbers a float cannot hold are kept as None, so a reader knows the alternatives are incomplete
    assert parse_logprobs(huge) == [["true", {"true": 0.0, "big": None, "inf": None, "nan": None, "": None}]]
    parsed = parse_logprobs(data)
    assert parsed is not None and len(parsed) == 512
    assert len(parsed[0][0]) == 50 and len(parsed[0][1]) == 20


def test_threshold_is_the_cut_with_the_best_kappa() -> None:
    probabilities = [0.1, 0.2, 0.35, 0.4, 0.8, 0.9]
    labels = [False, False, False, True, True, True]
    assert best_threshold(probabilities, labels) == pytest.approx(0.375)
    assert best_threshold([0.3, 0.4], [True, True]) is None  # one category: kappa undefined for every cut


def test_cross_validation_never_lets_an_example_set_its_own_cut() -> None:
    # with itself included, 0.45 (labelled present) would pull the cut below it; left out, the cut
    # set by the others is 0.5 and it is scored absent
    probabilities = [0.1, 0.2, 0.3, 0.45, 0.7, 0.8, 0.9]
    labels = [False, False, False, True, True, True, True]
    assert best_threshold(probabilities, labels) == pytest.approx(0.375)
    verdicts = cross_validated_judgments(probabilities, labels)
    assert verdicts[3] is False
    for i in range(len(probabilities)):
        others = ([*probabilities[:i], *probabilities[i + 1:]], [*labels[:i], *labels[i + 1:]])
        cut = best_threshold(*others)
        assert cut is not None and verdicts[i] == (probabilities[i] >= cut)


def record(line: int, label: bool, verdict: bool, decided_by: str, styles: dict[str, bool] | None = None,
           probabilities: dict[str, float] | None = None) -> CalibrationRecord:
    return CalibrationRecord("demo", line, "m01", label, verdict, "", decided_by=decided_by,
                             verdicts=dict(styles or {}), probabilities=dict(probabilities or {}))


def test_judge_only_kappa_leaves_out_the_rules_rows(tmp_path: Path) -> None:
    # the rules decide four absent rows correctly; the judge says present to all four of its rows
    rows = [record(i, False, False, "check") for i in range(1, 5)]
    rows += [record(i, i % 2 == 0, True, "judge", {"examples": True, "plain": i % 2 == 0, "contrast": True})
             for i in range(5, 9)]
    settings = {"prompt": "examples", "probability": False, "samples": 1, "params": {}}
    [entry] = calibration_entries(rows, "metrics", "j", settings=settings)
    assert entry.n == 8 and entry.kappa is not None and entry.kappa > 0.3  # rules and judge together
    assert entry.judge_n == 4 and entry.judge_kappa == 0.0  # the judge alone: no better than chance
    assert entry.styles is not None and entry.styles["plain"]["kappa"] == 1.0 and entry.styles["plain"]["n"] == 4
    assert entry.recommended_prompt == "plain" and entry.prompt == "examples" and entry.settings == settings
    (tmp_path / "calibration.json").write_text(json.dumps([entry.model_dump()]))
    why = unreliable_judges(tmp_path, JudgeConfig(min_kappa=0.4), ["m01"], "j")
    assert why == {"m01": "judge-only kappa 0.00 < min_kappa 0.40 (n=4, calibration.json)"}


def test_threshold_is_stored_and_read_back_for_the_same_judge_and_prompt(tmp_path: Path) -> None:
    probabilities = [0.1, 0.2, 0.3, 0.6, 0.7, 0.8]
    rows = [record(i, i >= 3, True, "judge", {"plain": True}, {"plain": p}) for i, p in enumerate(probabilities)]
    settings = {"prompt": "plain", "probability": True, "samples": 1, "params": {}}
    [entry] = calibration_entries(rows, "metrics", "j", settings=settings)
    assert entry.threshold == pytest.approx(0.45) and entry.threshold_kappa == 1.0 and entry.judge_kappa == 0.0
    assert entry.recommended_prompt == "plain"
    (tmp_path / "calibration.json").write_text(json.dumps([entry.model_dump()]))
    assert calibrated_thresholds(tmp_path, "j", {"m01": "plain"}) == {"m01": pytest.approx(0.45)}
    assert calibrated_thresholds(tmp_path, "j", {"m01": "contrast"}) == {}
    assert calibrated_thresholds(tmp_path, "k", {"m01": "plain"}) == {}
    config: Any = JudgeConfig(min_kappa=0.4, probability=True)
    assert unreliable_judges(tmp_path, config, ["m01"], "j") == {}  # the threshold verdicts' kappa counts
    assert unreliable_judges(tmp_path, JudgeConfig(min_kappa=0.4), ["m01"], "j") == {}  # calibrated on plain only
    assert unreliable_judges(tmp_path, JudgeConfig(min_kappa=0.4, prompt="plain"), ["m01"], "j") != {}
    other = JudgeConfig(min_kappa=0.4, prompt="contrast", require_calibration=True)
    assert unreliable_judges(tmp_path, other, ["m01"], "j") == {
        "m01": "calibrated for another prompt style (plain, not contrast)"}


def test_kappa_helper_agrees_with_the_split() -> None:
    assert kappa([True, False], [True, False], [True, False]) == 1.0


def test_probability_from_llama_cpp_tokens() -> None:
    """The shape the embedded model's server answered with (`logprobs: true, top_logprobs: 5`): the value
    token has a leading space, and the alternatives mix spellings of true and false with other tokens."""
    data = {"content": [
        {"token": '{"justification": "The sky is blue.",', "logprob": -0.1, "top_logprobs": []},
        {"token": ' "', "logprob": 0.0, "top_logprobs": [{"token": ' "', "logprob": 0.0}]},
        {"token": "present", "logprob": 0.0, "top_logprobs": [{"token": "present", "logprob": 0.0}]},
        {"token": '":', "logprob": 0.0, "top_logprobs": [{"token": '":', "logprob": 0.0}]},
        {"token": " true", "logprob": -0.0018, "top_logprobs": [
            {"token": " true", "logprob": -0.0018}, {"token": " false", "logprob": -6.32},
            {"token": ' "', "logprob": -7.48}, {"token": "true", "logprob": -8.62}, {"token": " True", "logprob": -9.38}]},
        {"token": "}", "logprob": -0.01, "top_logprobs": []}]}
    p = present_probability(parse_logprobs(data))
    assert p is not None and 0.99 < p < 1.0


@pytest.mark.parametrize("bad", [2.0, -0.5, "0.4", True, [0.5], 1e400])
def test_a_threshold_outside_0_to_1_in_calibration_json_is_not_applied(tmp_path: Path, bad: Any) -> None:
    """calibration.json is committed input: a threshold of 2 would turn every verdict to absent, so
    anything but a number in [0, 1] is ignored with one warning naming the file, entry and field."""
    entry = {"metric_id": "m01", "judge": "j", "prompt": "plain", "threshold": bad, "threshold_kappa": 0.9}
    (tmp_path / "calibration.json").write_text(json.dumps([entry]).replace("Infinity", "1e400"))
    if bad == 1e400:  # no number a file may hold: the whole file is refused, naming the field
        with pytest.raises(InputError, match=r"calibration\.json, field '1\.threshold': number 1e400 is too large"):
            calibrated_thresholds(tmp_path, "j", {"m01": "plain"})
        return
    with pytest.warns(EvalbenchWarning, match=r"calibration.json: entry 'm01', field 'threshold': .*; not used"):
        assert calibrated_thresholds(tmp_path, "j", {"m01": "plain"}) == {}


@pytest.mark.parametrize("bad", ["high", 7, None, {"x": 1}])
def test_a_kappa_that_is_not_a_kappa_makes_the_judge_unreliable(tmp_path: Path, bad: Any) -> None:
    """A kappa outside [-1, 1] or not a number never clears min_kappa and never crashes the run."""
    entry = {"metric_id": "m01", "judge": "j", "prompt": "examples", "judge_n": "\x1b[2J", "judge_kappa": bad,
             "confusion": {"present": [1], "absent": {"absent": -3}}}
    (tmp_path / "calibration.json").write_text(json.dumps([entry]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EvalbenchWarning)
        why = unreliable_judges(tmp_path, JudgeConfig(min_kappa=0.4), ["m01"], "j")
        accuracy = judge_accuracy(tmp_path, "j")
    assert why == {"m01": "judge-only kappa undefined < min_kappa 0.40 (n=?, calibration.json)"}
    assert "m01" not in accuracy  # a count of -3 is no count: the matrix is not used (one warning)


def test_a_metrics_own_prompt_style_is_part_of_the_baselines_identity(tmp_path: Path) -> None:
    """A baseline judged with another style for one metric is not comparable, so the identity names it."""
    metrics = [dict(m, judge_prompt="contrast") if m["id"] == "m01" else dict(m, judge_prompt="plain")
               for m in METRICS]
    spec = load_spec(write_benchmark(tmp_path, metrics=metrics, judge={"prompt": "plain"}))
    assert spec.judge_styles() == {"m01": "contrast", "m02": "plain"}
    assert judge_prompt_style(spec) == "plain; m01: contrast"
    assert judge_prompt_style(load_spec(write_benchmark(tmp_path / "b"))) == "examples"
