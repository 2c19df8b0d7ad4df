"""The metric judge's answers: unusable ones rejected, fenced and thinking ones read."""

from __future__ import annotations

import pytest

from pytest_evalbench.kinds.metric_judge import SCHEMA, parse_answer
from pytest_evalbench.llm.engine import bounded_strings


@pytest.mark.parametrize("text", ['{"justification": "j", "present": "false"}', '{"present": true}',
                                  '{"justification": "j", "present": 1}', "not json", "", '["present"]',
                                  '{"justification": "j", "present": true, "extra": 1}'])
def test_judge_rejects_unusable_answers(text: str) -> None:
    with pytest.raises(ValueError):
        parse_answer(text)


def test_judge_accepts_fenced_and_thinking_answers() -> None:
    answer = parse_answer('<think>x</think>```json\n{"justification": "ok\nline", "present": false}\n```')
    assert answer.present is False and answer.justification == "ok\nline"
    schema = SCHEMA[1]
    assert schema["additionalProperties"] is False and set(schema["required"]) == {"justification", "present"}
    assert bounded_strings(schema)["properties"]["justification"]["maxLength"] == 400
    assert "maxLength" not in schema["properties"]["justification"]
