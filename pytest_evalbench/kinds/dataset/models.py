"""One JSONL case of a dataset benchmark (eval-dataset-schema.md), and loading with line numbers.

Every documented field is modelled; extra keys (e.g. `workflow_mode` of comparative rows) are
kept and copied into case_results.json. Each required eval's payload must be derivable, from
`explain_inputs` or from the row's own fields, so a case cannot reach the evaluator with half its
inputs. A case without `model_answer` (AgentsLeague's comparative file) is answered live by the
target named like its `agent_name`; its inputs are then built from the answer and the row, as the
original runner builds them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from pytest_evalbench.base.errors import MAX_SHOWN_ERRORS, InputError
from pytest_evalbench.base.inputs import read_text
from pytest_evalbench.base.json_input import parse_json
from pytest_evalbench.formats import Input, check_id
from pytest_evalbench.formats.checks import Trajectory
from pytest_evalbench.formats.results import ToolCall
from pytest_evalbench.formats.spec import all_errors
from pytest_evalbench.kinds.explain import PAYLOAD_KEYS, EvalName

ROW_FIELD = {"input": "model_answer", "question": "question", "context": "context",
             "relevantContext": "relevant_context", "goal": "task_goal", "availableTools": "available_tools",
             "invokedTools": "invoked_tool_calls"}


LIVE_FALLBACK = {
    "input": lambda case, answer: answer,
    "context": lambda case, answer: case.context or case.relevant_context or scenario_sentence(case),
    "relevantContext": lambda case, answer: case.relevant_context or case.context or scenario_sentence(case),
    "goal": lambda case, answer: case.task_goal or case.question,
}
"""How a live-answered case fills inputs its row lacks: its other fields, then what AgentsLeague's
runner uses (`Scenario <id> for agent <name>.` as context; the question as the goal)."""


def scenario_sentence(case: DatasetCase) -> str:
    return (f"Scenario {case.scenario_id} for agent {case.agent_name}." if case.scenario_id
            else f"Agent: {case.agent_name}.")


class InvokedToolCall(ToolCall):
    """A tool call as the transcripts record it; dataset rows may carry extra keys."""

    model_config = ConfigDict(extra="allow")


class ExpectedToolCall(InvokedToolCall):
    reason: Optional[str] = None  # the document's field; the original data writes `outcome` instead


class DatasetCase(Input):
    """One line of a dataset JSONL file: unknown keys kept, near misses of known ones refused."""

    case_id: str
    scenario_id: Optional[str] = None
    agent_name: str
    phase: Optional[Literal["preparation", "assessment"]] = None
    difficulty: Optional[Literal["easy", "medium", "hard"]] = None
    quality_band: Optional[Literal["excellent", "good", "mixed", "poor"]] = None
    topic_family: Optional[str] = None
    learner_level: Optional[Literal["beginner", "intermediate", "advanced"]] = None
    question: str
    context: Optional[str] = None
    model_answer: Optional[str] = None
    """The stored answer; without one, the target whose id is `agent_name` answers `question`."""
    reference_answer: Optional[str] = None
    task_goal: Optional[str] = None
    relevant_context: Optional[str] = None
    available_tools: list[str] = Field(default_factory=list)
    expected_tool_calls: list[ExpectedToolCall] = Field(default_factory=list)
    invoked_tool_calls: list[InvokedToolCall] = Field(default_factory=list)
    explain_inputs: dict[EvalName, dict[str, Any]] = Field(default_factory=dict)
    required_evals: list[EvalName] = Field(min_length=1)
    threshold_profile: str
    expected_contract: Optional[str] = None
    expected_trajectory: Optional[Trajectory] = None
    """A judge-free check of the invoked calls against `calls`, else `expected_tool_calls`, by its mode."""

    @field_validator("case_id")
    @classmethod
    def _safe_id(cls, value: str) -> str:
        return check_id(value, "case_id")

    @model_validator(mode="after")
    def _payloads_derivable(self) -> DatasetCase:
        for name in self.required_evals:
            given = self.explain_inputs.get(name, {})
            for key in PAYLOAD_KEYS[name]:
                if key in given or (self.model_answer is None and key in LIVE_FALLBACK):
                    continue
                value = getattr(self, ROW_FIELD[key])
                if value is None or (key not in ("availableTools", "invokedTools") and value == ""):
                    raise ValueError(f"{name} needs '{key}': give explain_inputs.{name}.{key} "
                                     f"or the field '{ROW_FIELD[key]}'")
        return self


class StoredAnswer(DatasetCase):
    """One line of answers/<agent>.jsonl: a dataset line whose answer is the target's."""

    model_answer: str
    """What the target answered ("" when its reply had no text)."""


@dataclass(frozen=True)
class DatasetItem:
    """One test item of a dataset benchmark."""

    case: DatasetCase
    path: Path
    line: int
    index: int
    stored: Optional[Answer] = None
    """The answer of answers/<agent>.jsonl for an answer-less case whose agent has no target."""

    @property
    def name(self) -> str:
        return self.case.case_id

    @property
    def row_id(self) -> str:
        return self.case.case_id

    @property
    def keywords(self) -> dict[str, Any]:
        return {self.case.agent_name: True, self.case.threshold_profile: True}


@dataclass(frozen=True)
class Answer:
    """A stored answer as the runner uses it: the text and the tool calls, as the live target gave them."""

    text: str
    invoked: list[dict[str, Any]]


class DatasetError(Exception):
    """A bad JSONL line: file, line number, field and what is wrong, in one line; with `lines`, every
    problem found (of one line, or of the file's first lines), `total` counting them all."""

    def __init__(self, path: Path, line: int | None, field: str | None, message: str,
                 lines: list[str] | None = None, total: int | None = None) -> None:
        self.path, self.line, self.field, self.message = path, line, field, message
        self.lines = lines or [self.line_of(path, line, field, message)]
        self.total = max(total or 0, len(self.lines))
        more = [f"and {self.total - len(self.lines)} more"] if self.total > len(self.lines) else []
        super().__init__(self.lines[0] if self.total == 1
                         else f"{self.total} problems:\n" + "\n".join(self.lines + more))

    @staticmethod
    def line_of(path: Path, line: int | None, field: str | None, message: str) -> str:
        where = f"{path}:{line}" if line is not None else str(path)
        return f"{where}: {f'field {field!r}: ' if field else ''}{message}"

    def as_input_error(self) -> InputError:
        """The same problems as an InputError (the first one's file, line and field; the others shown)."""
        return InputError(self.path, self.message, row=self.line, field=self.field, others=self.lines[1:],
                          total=self.total)


def load_cases(path: Path) -> list[tuple[int, DatasetCase]]:
    """(line number, case) for every non-blank line. A file that cannot be read raises DatasetError;
    the lines' problems (JSON syntax, nesting, schema, duplicate ids) are gathered and raised as one
    DatasetError that shows the first MAX_SHOWN_ERRORS, each with its line and field."""
    try:
        text = read_text(path)
    except InputError as exc:
        raise DatasetError(path, exc.row if isinstance(exc.row, int) else None, None, exc.message) from None
    cases: list[tuple[int, DatasetCase]] = []
    seen: dict[str, int] = {}
    problems: list[str] = []
    count, first = 0, None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            found = _case(path, number, line, seen)
        except DatasetError as exc:
            first = first or exc
            count += len(exc.lines)
            problems += exc.lines[:MAX_SHOWN_ERRORS - len(problems)]
            continue
        seen[found.case_id] = number
        cases.append((number, found))
    if first is not None:
        raise DatasetError(path, first.line, first.field, first.message, lines=problems, total=count)
    if not cases:
        raise DatasetError(path, None, None, "no cases (the file is empty)")
    return cases


def _case(path: Path, number: int, line: str, seen: dict[str, int]) -> DatasetCase:
    """One line of a dataset file as a case; DatasetError naming every problem of the line."""
    try:
        data = parse_json(line, path, row=number)
    except InputError as exc:
        raise DatasetError(path, number, exc.field, exc.message) from None
    if not isinstance(data, dict):
        raise DatasetError(path, number, None, "expected a JSON object")
    try:
        case = DatasetCase.model_validate(data)
    except ValidationError as exc:
        found = all_errors(exc, data)
        loc, message = found[0]
        raise DatasetError(path, number, loc or None, message,
                           lines=[DatasetError.line_of(path, number, where or None, text)
                                  for where, text in found]) from None
    if case.case_id in seen:
        raise DatasetError(path, number, "case_id",
                           f"duplicate case_id {case.case_id!r} (also line {seen[case.case_id]})")
    return case


def payload_for(case: DatasetCase, eval_name: str, answer: str | None = None,
                invoked: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The eval's inputs: explain_inputs first, row fields next; a fresh app answer overrides both.
    With a fresh answer, inputs the row lacks are built as AgentsLeague's live runner builds them."""
    payload: dict[str, Any] = {}
    given = case.explain_inputs.get(eval_name, {})  # type: ignore[call-overload]
    for key in PAYLOAD_KEYS[eval_name]:
        if key in given:
            payload[key] = given[key]
        elif answer is not None and key in LIVE_FALLBACK:
            payload[key] = LIVE_FALLBACK[key](case, answer)
        else:
            value = getattr(case, ROW_FIELD[key])
            payload[key] = [v.model_dump(exclude_none=True) for v in value] if key == "invokedTools" else value
    if answer is not None:
        payload["input"] = answer
    if invoked is not None and "invokedTools" in payload:
        payload["invokedTools"] = invoked
    return payload
