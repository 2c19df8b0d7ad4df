"""Prompt styles and probability scoring end to end: calibration never shows the example it scores, sets
a threshold on P(present) by leave-one-out, and a later run decides by it and writes the probability."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from helpers import JUDGE, METRICS, read_json, scenario, script, write_benchmark

from pytest_evalbench.cli import schemas
from pytest_evalbench.testing import FakeLLMServer, Reply
from pytest_evalbench.testing.scripts import verdict_logprobs

# (metric, assistant reply, label); the reply's P=... is what the scripted judge's log-probabilities say
ROWS = [("m01", "Where to? P=0.8 L1", True), ("m01", "Go to Rome. P=0.3 L2", False),
        ("m01", "How long? P=0.7 L3", True), ("m01", "Pack socks. P=0.2 L4", False),
        ("m01", "Budget? P=0.9 L5", True), ("m01", "Take a coat. P=0.4 L6", False)]


def labels(bench: Path) -> None:
    lines = [{"metric_id": m, "transcript": [{"role": "user", "content": "hi"},
                                             {"role": "assistant", "content": reply}], "present": present}
             for m, reply, present in ROWS]
    (bench / "calibration.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))


def always_present_with_probability(request: dict[str, Any]) -> Reply:
    """The sampled judgment is always `present` (useless); the log-probabilities carry the signal."""
    p = float(re.findall(r"P=([0-9.]+)", request["messages"][-1]["content"])[-1])
    answer = {"justification": "scripted", "present": True}
    return Reply(content=json.dumps(answer), logprobs=verdict_logprobs(answer, p))


def test_calibration_sets_a_threshold_and_the_run_decides_by_it(pytester: pytest.Pytester,
                                                                bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")],
                            judge={"prompt": "contrast", "probability": True, "min_kappa": 0.5})
    labels(bench)
    bench_env.set_responder(script(always_present_with_probability))
    result = pytester.runpytest("--benchmark=demo", "--evalbench-calibrate")
    judged = [r for r in bench_env.requests if r["model"] == JUDGE]
    assert len(judged) == 3 * len(ROWS) and all(r["logprobs"] is True and r["top_logprobs"] == 5 for r in judged)
    contrast = [r for r in judged if len(r["messages"]) == 6]  # system, two answered examples, the question
    assert len(contrast) == len(ROWS)
    for request in contrast:
        scored = re.findall(r"L\d", request["messages"][-1]["content"])[-1]
        shown = " ".join(m["content"] for m in request["messages"][:-1])
        assert scored not in shown  # the example being scored is never one the prompt shows
    [entry] = read_json(bench / "calibration.json")
    jsonschema.validate([entry], schemas.load("calibration"))
    assert entry["judge_n"] == 6 and entry["judge_kappa"] == 0.0  # the sampled judgments: all "present"
    assert entry["prompt"] == "contrast" and entry["threshold"] == pytest.approx(0.55)
    assert entry["threshold_kappa"] == 1.0 and entry["styles"]["plain"]["threshold_kappa"] == 1.0
    assert entry["settings"]["probability"] is True and entry["settings"]["prompt"] == "contrast"
    result.stdout.fnmatch_lines(["*judge alone (contrast prompt): n=6 kappa 0.00*P(present) >= 0.55: "
                                 "cross-validated kappa 1.00*"])

    # the run: the judge samples "present", but P(present) 0.25 is under the threshold: absent
    bench_env.set_responder(script(always_present_with_probability, target="Go ahead. P=0.25"))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(failed=1)  # m01 is positive: absent fails, and this judge is trusted
    [row] = [r for path in bench.glob("runs/*/scores.json") for r in read_json(path)]
    assert row["present"] is False and row["probability"] == 0.25 and row["decided_by"] == "judge"
    assert "P(present) 0.25 < threshold 0.55: absent" in row["justification"]


def test_an_endpoint_without_logprobs_keeps_the_sampled_verdict(pytester: pytest.Pytester,
                                                                bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")],
                            judge={"probability": True})
    (bench / "calibration.json").write_text(json.dumps([{"metric_id": "m01", "judge": JUDGE, "prompt": "examples",
                                                         "threshold": 0.9}]))
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(passed=1)
    [row] = [r for path in bench.glob("runs/*/scores.json") for r in read_json(path)]
    assert row["present"] is True and "probability" not in row


def test_a_metric_with_its_own_prompt_style_is_calibrated_and_judged_with_it(pytester: pytest.Pytester,
                                                                             bench_env: FakeLLMServer) -> None:
    """`judge_prompt: contrast` on m01 while `judge.prompt` is plain: calibration.json's m01 entry is
    the contrast style's (its verdicts, threshold and settings), the run asks m01's judge with the
    contrast prompt and applies that threshold; calibration still scores every style."""
    metrics = [dict(m, judge_prompt="contrast") if m["id"] == "m01" else m for m in METRICS]
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")], metrics=metrics,
                            judge={"prompt": "plain", "probability": True, "min_kappa": 0.5})
    labels(bench)
    bench_env.set_responder(script(always_present_with_probability))
    result = pytester.runpytest("--benchmark=demo", "--evalbench-calibrate")
    [entry] = read_json(bench / "calibration.json")
    assert entry["prompt"] == "contrast" and entry["settings"]["prompt"] == "contrast"
    assert set(entry["styles"]) == {"plain", "contrast", "examples"} and entry["threshold"] == pytest.approx(0.55)
    result.stdout.fnmatch_lines(["*judge alone (contrast prompt): n=6*"])

    bench_env.requests.clear()
    bench_env.set_responder(script(always_present_with_probability, target="Go ahead. P=0.25"))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(failed=1)  # P(present) 0.25 < the contrast style's threshold: absent
    [judged] = [r for r in bench_env.requests if r["model"] == JUDGE]
    assert len(judged["messages"]) == 6  # system, two answered examples, the question: the contrast prompt
    assert "judge unreliable" not in result.stdout.str()


def _one_sided(answer: dict[str, Any]) -> dict[str, Any]:
    """Log-probabilities whose `present` value token lists only `false` (P 0.9 on `true` is not listed)."""
    data = verdict_logprobs(answer, 0.9)
    value = next(t for t in data["content"] if t["top_logprobs"])
    value["top_logprobs"] = [a for a in value["top_logprobs"] if a["token"] == "false"]
    return data


def _malformed(answer: dict[str, Any]) -> dict[str, Any]:
    """Log-probabilities whose `true` alternative of the `present` value has no number."""
    data = verdict_logprobs(answer, 0.9)
    value = next(t for t in data["content"] if t["top_logprobs"])
    value["top_logprobs"] = [dict(a, logprob="high") if a["token"] == "true" else a for a in value["top_logprobs"]]
    return data


def _overflowing(answer: dict[str, Any]) -> dict[str, Any]:
    """Log-probabilities of both answers so large that their probabilities overflow: P(present) is NaN."""
    data = verdict_logprobs(answer, 0.9)
    value = next(t for t in data["content"] if t["top_logprobs"])
    value["top_logprobs"] = [dict(a, logprob=800.0) for a in value["top_logprobs"]]
    return data


@pytest.mark.parametrize(("broken", "reason"), [
    (_one_sided, "do not list true"), (_malformed, "malformed"), (_overflowing, "malformed")])
def test_log_probabilities_that_cannot_be_read_leave_the_row_unscored(
        pytester: pytest.Pytester, bench_env: FakeLLMServer, broken: Any, reason: str) -> None:
    """The sampled judgment is `present` and a threshold is calibrated: log-probabilities that are given
    but cannot be read never turn it into `absent` (nor keep it silently): the row is unscored, with why."""
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")],
                            judge={"probability": True})
    (bench / "calibration.json").write_text(json.dumps([{"metric_id": "m01", "judge": JUDGE, "prompt": "examples",
                                                         "threshold": 0.5}]))

    def judge(request: dict[str, Any]) -> Reply:
        answer = {"justification": "scripted", "present": True}
        return Reply(content=json.dumps(answer), logprobs=broken(answer))

    bench_env.set_responder(script(judge))
    result = pytester.runpytest("--benchmark=demo")
    assert result.ret == 7
    [row] = [r for path in bench.glob("runs/*/scores.json") for r in read_json(path)]
    assert row["present"] is None and row["passed"] is None and "probability" not in row
    assert "P(present)" in row["justification"] and reason in row["justification"]
    served = len(bench_env.requests)
    assert pytester.runpytest("--benchmark=demo", "--evalbench-cache=replay").ret == 7  # the cache keeps it
    assert len(bench_env.requests) == served
