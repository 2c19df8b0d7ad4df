"""Dataset core: case loading, Explain verdict parsing, the scoring policy, the tool check."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_evalbench.kinds.dataset.models import DatasetError, load_cases, payload_for
from pytest_evalbench.kinds.dataset.policy import DOCUMENTED_POLICY, PolicyError, judge_case
from pytest_evalbench.kinds.dataset.runner import check_tool_calls
from pytest_evalbench.kinds.explain import EVAL_NAMES, UnparseableAnswer, build_messages, parse_explain_answer

EXAMPLE = Path(__file__).parents[2] / "benchmarks" / "agents" / "cases.jsonl"


def write(tmp_path: Path, rows: list[object], bom: bool = False) -> Path:
    path = tmp_path / "cases.jsonl"
    text = "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n"
    path.write_text(("\ufeff" if bom else "") + text, encoding="utf-8")
    return path


def example_rows() -> list[dict]:
    return [json.loads(line) for line in EXAMPLE.read_text().splitlines()]


def test_example_loads_with_bom_and_blank_lines(tmp_path: Path) -> None:
    rows = example_rows()
    cases = load_cases(write(tmp_path, [rows[0], "", rows[1]], bom=True))
    assert [(line, c.case_id) for line, c in cases] == [(1, "learning-path-curator-001"), (3, "learning-path-curator-002")]


@pytest.mark.parametrize(("mutate", "line", "field", "text"), [
    (lambda r: "{not json", 2, None, "invalid JSON"),
    (lambda r: {k: v for k, v in r.items() if k != "question"}, 2, "question", "Field required"),
    (lambda r: {**r, "difficulty": "brutal"}, 2, "difficulty", "Input should be"),
    (lambda r: {**r, "required_evals": ["MagicExplain"]}, 2, "required_evals.1", "Input should be"),
    (lambda r: {**r, "required_evals": []}, 2, "required_evals", "at least 1"),
    (lambda r: {**r, "case_id": "learning-path-curator-001"}, 2, "case_id", "duplicate case_id"),
    (lambda r: {**r, "task_goal": "", "explain_inputs": {}, "required_evals": ["TaskAdherenceExplain"]}, 2, None,
     "TaskAdherenceExplain needs 'goal'"),
])
def test_bad_lines_name_line_and_field(tmp_path: Path, mutate, line, field, text) -> None:  # type: ignore[no-untyped-def]
    rows = example_rows()
    with pytest.raises(DatasetError) as info:
        load_cases(write(tmp_path, [rows[0], mutate(rows[1])]))
    assert info.value.line == line and info.value.field == field and text in info.value.message
    assert str(info.value).startswith(f"{tmp_path / 'cases.jsonl'}:{line}: ")


def test_payload_prefers_explain_inputs_and_app_overrides() -> None:
    case = load_cases(EXAMPLE)[0][1]
    payload = payload_for(case, "ToolCallAccuracyExplain")
    assert set(payload) == {"input", "question", "availableTools", "invokedTools"}
    fresh = payload_for(case, "ToolCallAccuracyExplain", "new answer", [{"tool": "x", "arguments": {}}])
    assert fresh["input"] == "new answer" and fresh["invokedTools"] == [{"tool": "x", "arguments": {}}]


@pytest.mark.parametrize("name", EVAL_NAMES)
def test_every_eval_is_on_the_1_to_5_scale_and_shows_its_inputs(name: str) -> None:
    payload = {"input": "ANSWER-X", "question": "QUESTION-Y", "context": "CTX-Z", "relevantContext": "REL-W",
               "goal": "GOAL-V", "availableTools": ["TOOL-U"], "invokedTools": [{"tool": "TOOL-U"}]}
    messages = build_messages(name, payload)
    text = json.dumps(messages)
    assert "1-5 scale" in messages[0]["content"] and "5 - " in messages[0]["content"]
    assert "10" not in messages[0]["content"]
    for value in ("ANSWER-X", "QUESTION-Y", "GOAL-V", "TOOL-U"):
        assert value in text


@pytest.mark.parametrize("text", ['{"explanation": "e", "score": 0}', '{"explanation": "e", "score": 6}',
                                  '{"explanation": "e", "score": 7.5}', '{"explanation": "e", "score": -1}',
                                  '{"explanation": "e", "score": "five"}', '{"explanation": "e", "score": true}',
                                  '{"score": 4}', "garbage", ""])
def test_unusable_verdicts_are_rejected_not_clamped(text: str) -> None:
    with pytest.raises(UnparseableAnswer):
        parse_explain_answer(text)


def test_fenced_verdict_parses() -> None:
    assert parse_explain_answer('```json\n{"explanation": "fine", "score": 4}\n```').score == 4


PREP = ["TaskAdherenceExplain", "IntentResolutionExplain", "RelevanceExplain"]


def scores(value: int, **overrides: int | None) -> dict[str, int | None]:
    return {**dict.fromkeys(PREP, value), **{f"{k}Explain": v for k, v in overrides.items()}}


def test_policy_boundaries() -> None:
    assert judge_case(scores(4), DOCUMENTED_POLICY, "prep_default").status == "passed"
    # thresholds are inclusive; TaskAdherence 3.7 needs 4 with integer scores
    assert below_threshold(judge_case(scores(4, TaskAdherence=3), DOCUMENTED_POLICY, "prep_default")) == [
        "TaskAdherenceExplain"]
    for metric in ("TaskAdherence", "IntentResolution", "ToolCallAccuracy"):
        verdict = judge_case(scores(5, **{metric: 2}), DOCUMENTED_POLICY, "prep_default")
        assert verdict.status == "failed" and verdict.hard_fails == [f"{metric}Explain"]
    # 3 is not a hard fail (below 3.0 is), but it is below Relevance's 3.6
    assert judge_case(scores(5, Relevance=3), DOCUMENTED_POLICY, "prep_default").hard_fails == []


def test_composite_renormalises_over_metrics_that_ran() -> None:
    verdict = judge_case({"TaskAdherenceExplain": 5, "CoherenceExplain": 4}, DOCUMENTED_POLICY, "assessment_strict")
    assert verdict.composite == pytest.approx((5 * .22 + 4 * .10) / (.22 + .10))
    assert verdict.pass_mark == 3.70


def test_unscored_and_unknown_profile() -> None:
    assert judge_case(scores(5, Relevance=None), DOCUMENTED_POLICY, "prep_default").status == "unscored"
    # a scored hard fail is certain whatever the missing score would have been
    assert judge_case(scores(5, Relevance=None, TaskAdherence=1), DOCUMENTED_POLICY,
                      "prep_default").status == "failed"
    with pytest.raises(PolicyError, match="assessment_strict, prep_default"):
        judge_case(scores(5), DOCUMENTED_POLICY, "nope")


@given(st.dictionaries(st.sampled_from(EVAL_NAMES), st.one_of(st.none(), st.integers(1, 5)), min_size=1),
       st.sampled_from(["prep_default", "assessment_strict"]))
def test_policy_properties(values: dict[str, int | None], profile: str) -> None:
    verdict = judge_case(values, DOCUMENTED_POLICY, profile)
    if verdict.composite is not None:
        assert 1 <= verdict.composite <= 5
    if any(v is None for v in values.values()):
        assert verdict.status != "passed"
    if verdict.status == "passed":
        assert not verdict.hard_fails and not below_threshold(verdict) and verdict.composite >= verdict.pass_mark


def test_tool_check() -> None:
    expected = [{"tool": "Search", "arguments": {"query": "AZ-900"}}, {"tool": "Fetch", "arguments": {}}]
    good = check_tool_calls(expected, [{"tool": "Fetch"}, {"tool": "Search", "arguments": {"query": " az-900 ",
                                                                                              "top": 3}}])
    assert good.ok and good.matched == 2 and good.unexpected == []
    bad = check_tool_calls(expected, [{"tool": "Search", "arguments": {"query": "AZ-104"}}, {"tool": "Other"}])
    assert not bad.ok and bad.missing == ["Fetch"] and bad.argument_mismatches == ["Search(query)"]
    assert bad.unexpected == ["Other"] and "0/2 expected calls matched" in bad.summary


def below_threshold(judgement: Any) -> list[str]:
    """The evals a case's judgement names as scored below their threshold."""
    return [r.split(": ", 1)[1].split("=")[0] for r in judgement.reasons if r.startswith("below threshold: ")]
