"""A model's structured answer is read by the one JSON reader of everything from outside: nesting,
numbers and duplicate keys are refused with a one-line reason the model is re-asked with, while what
models write and JSON strictly forbids (raw newlines and tabs in strings, a fence, a think block)
still reads."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from pytest_evalbench.llm.engine import load_json, parse_as


class Score(BaseModel):
    score: float
    reason: str


@pytest.mark.parametrize(("answer", "reason"), [
    ('{"score": NaN, "reason": "x"}', "score: NaN is not a number"),
    ('{"score": Infinity, "reason": "x"}', "score: Infinity is not a number"),
    ('{"score": 1e999, "reason": "x"}', "score: number 1e999 is too large (numbers must be finite)"),
    ('{"score": 1' + "0" * 400 + ', "reason": "x"}', "score: number 10000000000000000000… (401 digits) is out of range"),
    ('{"score": 0.1, "reason": "x", "score": 0.9}', "score: duplicate key 'score'"),
    ('{"score": 0.5, "reason": ' + "[" * 100 + "]" * 100 + "}", "nested deeper than 64 levels"),
], ids=["nan", "infinity", "1e999", "400-digits", "duplicate-key", "100-deep"])
def test_what_no_file_may_hold_is_refused_in_a_model_answer(answer: str, reason: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_as(answer, Score)
    assert str(info.value).startswith(reason), str(info.value)
    assert "\n" not in str(info.value)


def test_a_very_deep_answer_is_one_reason_never_a_recursion_error() -> None:
    with pytest.raises(ValueError, match=r"^nested deeper than 64 levels$"):
        load_json("[" * 100_000 + "]" * 100_000)


@pytest.mark.parametrize(("answer", "expected"), [
    ('{"score": 0.5, "reason": "line one\nline two\tand a tab"}', {"score": 0.5, "reason": "line one\nline two\tand a tab"}),
    ('```json\n{"score": 1, "reason": "ok"}\n```', {"score": 1, "reason": "ok"}),
    ('<think>\nhmm {"a": 1\n</think>\n{"score": 0, "reason": "ok"}', {"score": 0, "reason": "ok"}),
    ('{"score": 0, "reason": "half \\ud800 a pair"}', {"score": 0, "reason": "half \ufffd a pair"}),
], ids=["raw-control-characters", "fenced", "think-block", "lone-surrogate"])
def test_what_models_write_still_reads(answer: str, expected: Any) -> None:
    assert load_json(answer) == expected


def test_a_syntax_error_names_line_and_column() -> None:
    with pytest.raises(ValueError, match=r"^not valid JSON \(Expecting value at line 2, column 3\)$"):
        load_json('{"score":\n  , "reason": "x"}')
