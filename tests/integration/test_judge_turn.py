"""scores.json `turn`: the first assistant turn where the judge saw the behaviour (multi-turn only)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from helpers import JUDGE, TARGET, USER, read_json, scenario, write_benchmark

from pytest_evalbench.cli import schemas
from pytest_evalbench.testing import FakeLLMServer, by_model


def responder(present: bool, turn: Any = None) -> Any:
    answer = {"justification": "asked", "present": present} | ({} if turn is None else {"turn": turn})
    return by_model({USER: lambda r: "Thought: ok\nMessage: I need some help",
                     TARGET: lambda r: "Sure, where are you going?", JUDGE: lambda r: answer})


@pytest.mark.parametrize(("present", "turn", "expected"), [(True, 2, 2), (True, 3, None), (True, 0, None),
                                                            (True, "two", None), (False, 1, None)])
def test_turn_in_scores_and_report(pytester: pytest.Pytester, bench_env: FakeLLMServer, present: bool, turn: Any,
                                   expected: int | None) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")])  # 2 turns
    bench_env.set_responder(responder(present, turn))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(passed=1 if present else 0, failed=0 if present else 1)  # the verdict stands
    rows = read_json(bench / "runs" / "tgt" / "scores.json")
    jsonschema.validate(rows, schemas.load("scores"))
    assert rows[0].get("turn") == expected and rows[0]["present"] is present
    judge_calls = [r for r in bench_env.requests if r["model"] == JUDGE]
    assert judge_calls[0]["response_format"]["json_schema"]["name"] == "verdict_turn"
    html = (bench / "report.html").read_text()
    assert ("first at assistant turn 2" in html) is (expected == 2)


def test_single_turn_conversations_are_judged_as_before(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01", landmarks=[])],
                            generation={"turns": 1, "num_samples": 1, "perfunctory": False, "landmarks": False})
    bench_env.set_responder(responder(True))
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1)
    judge_calls = [r for r in bench_env.requests if r["model"] == JUDGE]
    assert judge_calls[0]["response_format"]["json_schema"]["name"] == "verdict"
    assert "turn" not in read_json(bench / "runs" / "tgt" / "scores.json")[0]
