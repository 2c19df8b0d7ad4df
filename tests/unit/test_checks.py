"""Deterministic metric checks: each condition over the assistant's turns, rule order, `otherwise`."""

from __future__ import annotations

import time
from typing import Any

import pytest
from pydantic import ValidationError

from pytest_evalbench.formats.checks import CheckRule
from pytest_evalbench.formats.results import Message, ToolCall
from pytest_evalbench.formats.spec import Metric
from pytest_evalbench.kinds.metric_judge import check, decide

TRANSCRIPT = [Message(role="user", content='{"user": "json is not judged"} MAYBE'),
              Message(role="assistant", content='{"plan": [1, 2]}',
                      tool_calls=[ToolCall(tool="lookup_order", arguments={"id": "A1"})]),
              Message(role="assistant", content="Your order has SHIPPED.")]


@pytest.mark.parametrize(("condition", "expected"), [
    ({"regex": r"order has \w+"}, True), ({"regex": "(?i)maybe"}, False),  # the user's turn does not count
    ({"contains": "shipped"}, True), ({"contains": "maybe"}, False),
    ({"not_contains": "refund"}, True), ({"not_contains": "Shipped"}, False),
    ({"tool_called": "lookup_order"}, True), ({"tool_called": "refund"}, False),
    ({"tool_not_called": "refund"}, True), ({"tool_not_called": "lookup_order"}, False),
    ({"valid_json": True}, False), ({"valid_json": False}, True),
])
def test_conditions(condition: dict[str, Any], expected: bool) -> None:
    assert check(CheckRule(**condition, then="present"), TRANSCRIPT)[0] is expected


def test_valid_json_holds_when_every_reply_parses() -> None:
    assert check(CheckRule(valid_json=True, then="present"), TRANSCRIPT[:2])[0]


def metric(rules: list[dict[str, Any]], otherwise: str = "judge") -> Metric:
    return Metric.model_validate({"id": "m", "name": "Avoid x", "type": "negative", "definition": "d",
                                  "checks": {"rules": rules, "otherwise": otherwise}})


def test_first_rule_that_holds_decides_and_otherwise_falls_back() -> None:
    decision = decide(metric([{"contains": "nothing", "then": "present"}, {"contains": "shipped", "then": "absent"},
                              {"contains": "order", "then": "present"}]), TRANSCRIPT)
    assert decision is not None and decision.present is False
    assert decision.justification == "check 2 (contains: 'shipped') holds: behaviour absent"
    assert decide(metric([{"contains": "nothing", "then": "present"}]), TRANSCRIPT) is None  # the judge decides
    alone = decide(metric([{"contains": "nothing", "then": "present"}], otherwise="absent"), TRANSCRIPT)
    assert alone is not None and alone.present is False and "otherwise: absent" in alone.justification
    assert decide(Metric(id="m", name="n", type="positive", definition="d"), TRANSCRIPT) is None


@pytest.mark.parametrize("rule", [{"then": "present"}, {"regex": "(", "then": "present"},
                                  {"contains": "a", "tool_called": "b", "then": "absent"}])
def test_bad_rules_are_rejected(rule: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        CheckRule(**rule)


def test_a_regex_runs_in_linear_time() -> None:
    # Python's backtracking `re` never ends on this; RE2 answers at once
    hostile = [Message(role="assistant", content="a" * 60 + "!")]
    started = time.process_time()
    assert check(CheckRule(regex="(a|aa)+$", then="present"), hostile)[0] is False
    assert check(CheckRule(regex="(a|aa)+!$", then="present"), hostile)[0] is True
    assert time.process_time() - started < 1.0


@pytest.mark.parametrize(("pattern", "reason"), [(r"(a)\1", "invalid escape sequence"),
                                                 ("(?=a)b", "invalid perl operator"),
                                                 ("(?<!x)y", "invalid perl operator")])
def test_a_regex_re2_cannot_run_is_a_load_error_naming_metric_and_field(pattern: str, reason: str) -> None:
    with pytest.raises(ValidationError) as info:
        metric([{"regex": pattern, "then": "present"}])
    message = str(info.value)
    assert "checks.rules.0.regex" in message or "checks.rules.0" in message
    assert reason in message and "RE2 syntax" in message
