"""The judge's `turn` for multi-turn conversations: asked only there, lenient, validated 1..turns."""

from __future__ import annotations

import pytest

from pytest_evalbench.formats.results import Message
from pytest_evalbench.formats.spec import Metric
from pytest_evalbench.kinds.metric_judge import judge_messages, parse_answer, parse_turn_answer, valid_turn

METRIC = Metric(id="m01", name="Asks", type="positive", definition="The assistant asks a clarifying question.")
TWO = [Message(role="user", content="hi"), Message(role="assistant", content="Hello."),
       Message(role="user", content="trip"), Message(role="assistant", content="Where to?")]


def test_multi_turn_prompt_numbers_assistant_turns_and_asks_for_the_turn() -> None:
    prompt = judge_messages(METRIC, TWO)[1]["content"]
    assert "ASSISTANT (turn 1): Hello." in prompt and "ASSISTANT (turn 2): Where to?" in prompt
    assert "turn = the number of the first assistant turn (1..2)" in prompt and '"turn"' in prompt
    single = judge_messages(METRIC, TWO[:2])[1]["content"]
    assert "turn" not in single and "ASSISTANT: Hello." in single  # single-turn: asked as before


@pytest.mark.parametrize(("raw", "present", "expected"), [
    ("2", True, 2), ("1", True, 1),
    ("3", True, None), ("0", True, None), ("-1", True, None),  # out of range -> null
    ('"2"', True, None), ("2.5", True, None), ("true", True, None), ("null", True, None),  # not an integer
    ("2", False, None),  # absent: no turn
])
def test_turn_is_validated_and_never_changes_the_verdict(raw: str, present: bool, expected: int | None) -> None:
    answer = parse_turn_answer(f'{{"justification": "j", "present": {str(present).lower()}, "turn": {raw}}}')
    assert answer.present is present  # parsed, never re-asked for a bad turn
    assert valid_turn(answer.turn, answer.present, 2) == expected


def test_missing_turn_is_null_and_a_single_turn_answer_has_none() -> None:
    assert parse_turn_answer('{"justification": "j", "present": true}').turn is None
    with pytest.raises(ValueError, match="turn"):
        parse_answer('{"justification": "j", "present": true, "turn": 1}')  # the single-turn answer stays closed
