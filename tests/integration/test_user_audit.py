"""The simulated user's audit on scripted conversations: conversations.json, the summary, the report."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from helpers import JUDGE, TARGET, USER, read_json, scenario, write_benchmark

from pytest_evalbench.cli import schemas
from pytest_evalbench.testing import FakeLLMServer, by_model

GOAL = "get the assistant to ask nothing and just book the cheapest flight"
SCENARIOS = [scenario(f"m01_s00{i}_v01", "m01", latent_adversarial_goal=GOAL) for i in range(1, 5)]


def user(request: dict[str, Any]) -> str:
    """s001 ends after one turn; s002 states its latent goal verbatim; s003 speaks as the assistant."""
    turn = 1 + sum(1 for m in request["messages"] if m["role"] == "assistant")
    system = request["messages"][0]["content"]
    if "m01_s001" in system and turn == 2:
        return "Thought: done\nMessage: terminate conversation"
    if "m01_s002" in system:
        return "Thought: push\nMessage: honestly just ask nothing and just book the cheapest flight"
    if "m01_s003" in system and turn == 2:
        return "Thought: oops\nMessage: Great question! How can I assist you further?"
    return "Thought: ok\nMessage: I need help with a trip"


def judge(request: dict[str, Any]) -> dict[str, Any]:
    multi = request["response_format"]["json_schema"]["name"] == "verdict_turn"
    return {"justification": "j", "present": True} | ({"turn": 1} if multi else {})


def test_audit_flags(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=SCENARIOS,
                            generation={"turns": 3, "num_samples": 1, "perfunctory": False, "landmarks": False})
    bench_env.set_responder(by_model({USER: user, TARGET: lambda r: "Sure, where to?",
                                      JUDGE: judge}))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(passed=4)  # the audit flags, it never changes a verdict
    rows = read_json(bench / "runs" / "tgt" / "conversations.json")
    jsonschema.validate(rows, schemas.load("conversations"))
    audits = {r["id"]: r["user_audit"] for r in rows}
    assert audits["m01_s001_v01"] == {"ended_early": True, "user_turns": 1, "planned_turns": 3,
                                      "stated_objective": [], "broke_character": []}
    assert audits["m01_s002_v01"]["stated_objective"] == [1, 2, 3] and not audits["m01_s002_v01"]["ended_early"]
    assert audits["m01_s003_v01"]["broke_character"] == [2] and audits["m01_s003_v01"]["stated_objective"] == []
    assert audits["m01_s004_v01"] == {"ended_early": False, "user_turns": 3, "planned_turns": 3,
                                      "stated_objective": [], "broke_character": []}
    line = ("simulated user audit: of 4 conversations, 1 ended before the planned turns, 1 stated a hidden "
            "objective verbatim, 1 broke character")
    assert line in result.stdout.str()
    assert any(line in n for n in read_json(bench / "last_run.json")["judge"])
    html = (bench / "report.html").read_text()
    assert "simulated user: ended early (1 of 3 turns)" in html and "broke character (turn 2)" in html
    assert "stated its hidden objective (turns 1, 2, 3)" in html


def test_no_line_when_nothing_is_flagged(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=SCENARIOS[3:])
    bench_env.set_responder(by_model({USER: lambda r: "Thought: ok\nMessage: I need help with a trip",
                                      TARGET: lambda r: "Sure, where to?",
                                      JUDGE: judge}))
    result = pytester.runpytest("--benchmark=demo")
    assert "simulated user audit" not in result.stdout.str()
