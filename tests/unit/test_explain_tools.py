"""Explain prompts (order, length instruction, anchors) and the optimal tool-call matching."""

from __future__ import annotations

import pytest

from pytest_evalbench.kinds.dataset.runner import check_tool_calls, values_equal
from pytest_evalbench.kinds.explain import EVAL_NAMES, build_messages

PAYLOAD = {"input": "ANSWER-X", "question": "QUESTION-Y", "context": "CTX-Z", "relevantContext": "REL-W",
           "goal": "GOAL-V", "availableTools": ["TOOL-U"], "invokedTools": [{"tool": "TOOL-U"}]}


@pytest.mark.parametrize("name", EVAL_NAMES)
def test_question_and_context_come_before_the_response(name: str) -> None:
    system, user = (m["content"] for m in build_messages(name, PAYLOAD))
    assert user.index("QUESTION-Y") < user.index("ANSWER-X") and user.rstrip().endswith("ANSWER-X")
    assert "Do not reward length" in system
    for score in (1, 3, 5):
        assert f"- score {score}: " in system


def test_optimal_matching_finds_the_pair_a_greedy_pass_misses() -> None:
    expected = [{"tool": "s", "arguments": {"q": "x"}}, {"tool": "s", "arguments": {"q": "y"}}]
    result = check_tool_calls(expected, [{"tool": "s", "arguments": {"q": "y"}}, {"tool": "s", "arguments": {"q": "z"}}])
    assert result.matched == 1 and result.argument_mismatches == ["s(q)"] and not result.ok
    assert result.summary.startswith("1/2 expected calls matched")
    # the matching maximises pairs whatever the order of the expected list
    crossed = check_tool_calls(expected, [{"tool": "s", "arguments": {"q": "y", "n": 1}},
                                          {"tool": "s", "arguments": {"q": "X"}}])
    assert crossed.ok and crossed.matched == 2


@pytest.mark.parametrize(("want", "got", "equal"), [
    (True, 1, False), (1, True, False), (False, 0, False), (True, True, True),
    (1, 1.0, True), (2, 2.5, False), (" AZ-900 ", "az-900", True), (None, None, True), (None, 0, False),
    (["a", "b"], ["B", "a"], True), (["a", "a"], ["a", "b"], False), ([1, True], [True, 1], True),
    ({"k": [1, 2]}, {"k": [2, 1]}, True), ({"steps": [1, 2]}, {"steps": [2, 1]}, False),
    ({"k": 1}, {"k": 1, "extra": 2}, False),
])
def test_type_policy(want: object, got: object, equal: bool) -> None:
    assert values_equal(want, got) is equal


def test_top_level_extra_arguments_allowed_and_ordered_arguments_compared_in_order() -> None:
    expected = [{"tool": "plan", "arguments": {"steps": ["a", "b"], "tags": ["x", "y"]}}]
    assert check_tool_calls(expected, [{"tool": "plan", "arguments": {"steps": ["a", "b"], "tags": ["y", "x"],
                                                                      "verbose": True}}]).ok
    assert not check_tool_calls(expected, [{"tool": "plan", "arguments": {"steps": ["b", "a"],
                                                                          "tags": ["x", "y"]}}]).ok
