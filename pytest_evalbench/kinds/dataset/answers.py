"""Stored answers: what a live target answered to the dataset cases that have no `model_answer`,
kept in `answers/<agent>.jsonl` next to the results, so a reviewer can read them and a later run
without that target scores them (the same judge prompts as the live run, so the same cache keys).

Each line is the case's own dataset line with `model_answer` (the reply, "" when it had no text)
and `invoked_tool_calls` (the tool calls the target reported) filled in, plus `explain_inputs` for
every eval input the live run built from the answer (`context` as `Scenario <id> for agent
<name>.`, ...), so the file is itself a valid dataset file (`StoredAnswer`, schema
`answers.schema.json`) and scores the same as a dataset. A run without a target for an agent takes
the answer of each of its answer-less cases from here when the stored line answers the same
`question`; the current dataset row supplies everything else. Written atomically under the result
lock, merged per case (a subset run replaces only its cases), in dataset order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pytest_evalbench.base.errors import InputError
from pytest_evalbench.base.files import atomic_write_text, read_bounded, results_lock
from pytest_evalbench.formats import check_id
from pytest_evalbench.kinds.dataset.models import (
    LIVE_FALLBACK,
    ROW_FIELD,
    Answer,
    DatasetCase,
    DatasetError,
    StoredAnswer,
    load_cases,
    payload_for,
)
from pytest_evalbench.kinds.explain import PAYLOAD_KEYS

ANSWERS_DIR = "answers"


def answers_file(directory: Path, agent: str) -> Path:
    return directory / ANSWERS_DIR / f"{agent}.jsonl"


def answer_line(case: DatasetCase, answer: str | None, invoked: list[dict[str, Any]]) -> str:
    """The case's dataset line answered by `answer`: scoring it as a dataset line judges exactly
    what the live run judged (inputs the row lacks go into `explain_inputs`)."""
    row = case.model_dump(mode="json", exclude_none=True)
    row["model_answer"] = answer or ""
    row["invoked_tool_calls"] = invoked
    live = {name: payload_for(case, name, answer, invoked) for name in case.required_evals}
    explain: dict[str, dict[str, Any]] = {name: dict(given) for name, given in case.explain_inputs.items()}
    for name, payload in live.items():  # what the live run derived from the answer, the row lacks
        for key in PAYLOAD_KEYS[name]:
            if key in LIVE_FALLBACK and getattr(case, ROW_FIELD[key]) in (None, "") and (key != "input" or not answer):
                explain.setdefault(name, {})[key] = payload[key]
    for _ in range(2):  # then whatever still differs (an `input` in explain_inputs, a missing text)
        row["explain_inputs"] = explain
        stored = StoredAnswer.model_validate(row)
        for name, payload in live.items():
            mine = payload_for(stored, name)
            for key, value in payload.items():
                if mine.get(key) != value:
                    explain.setdefault(name, {})[key] = value
    if not explain:
        row.pop("explain_inputs")
    return json.dumps(row, ensure_ascii=False)


def read_stored(directory: Path, agent: str) -> dict[str, tuple[int, StoredAnswer]]:
    """case_id -> (line, stored answer) of answers/<agent>.jsonl ({} without one); a bad line is an
    InputError naming the file, the line and the field."""
    path = answers_file(directory, agent)
    if not path.is_file():
        return {}
    try:
        cases = load_cases(path)
    except DatasetError as exc:
        raise exc.as_input_error() from None
    out: dict[str, tuple[int, StoredAnswer]] = {}
    for line, case in cases:
        if case.agent_name != agent:
            raise InputError(path, f"agent_name {case.agent_name!r} in the answers of agent {agent!r}", row=line,
                             field="agent_name")
        try:
            out[case.case_id] = (line, StoredAnswer.model_validate(case.model_dump()))
        except ValidationError:
            raise InputError(path, "a stored answer needs a model_answer", row=line, field="model_answer") from None
    return out


def stored_answer(directory: Path, case: DatasetCase, cache: dict[str, dict[str, tuple[int, StoredAnswer]]]
                  ) -> Answer | None:
    """The stored answer of an answer-less case, if answers/<agent>.jsonl holds one to its question;
    an answer to an earlier version of the question is an InputError (ask the target again)."""
    agent = case.agent_name
    try:
        check_id(agent, "agent_name")
    except ValueError:
        return None  # not a file name: no file of answers can be its
    if agent not in cache:
        cache[agent] = read_stored(directory, agent)
    found = cache[agent].get(case.case_id)
    if found is None:
        return None
    line, stored = found
    if stored.question != case.question:
        raise InputError(answers_file(directory, agent), f"case {case.case_id!r} answers another question than "
                         f"the dataset's; answer it again with --evalbench-target={agent}=MODEL (or its app)",
                         row=line, field="question")
    return Answer(stored.model_answer, [call.model_dump(exclude_none=True) for call in stored.invoked_tool_calls])


def _kept_lines(path: Path, agent: str, order: Mapping[str, int]) -> dict[str, str]:
    """case_id -> line of the answers already on disk that still belong to the dataset (lines that
    do not parse as a stored answer of this agent are dropped: the file is ours)."""
    try:
        text = read_bounded(path).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    kept: dict[str, str] = {}
    for line in text.splitlines():
        try:
            stored = StoredAnswer.model_validate_json(line)
        except (ValidationError, ValueError):
            continue
        if stored.agent_name == agent and stored.case_id in order:
            kept[stored.case_id] = line
    return kept


def write_answers(directory: Path, answers: Mapping[str, Mapping[str, str]], order: Mapping[str, int],
                  root: Path | None = None) -> list[Path]:
    """Merge this session's answers (agent -> case_id -> line) into answers/<agent>.jsonl under the
    result lock, never writing out of `root` (default `directory`); returns the files written."""
    written: list[Path] = []
    if not answers:
        return written
    with results_lock(directory, root=root or directory):
        for agent, lines in sorted(answers.items()):
            check_id(agent, "agent_name")  # a target id: a safe file name
            path = answers_file(directory, agent)
            merged = {**_kept_lines(path, agent, order), **lines}
            text = "".join(merged[case_id] + "\n" for case_id in sorted(merged, key=lambda c: order.get(c, 0)))
            atomic_write_text(path, text, root or directory)
            written.append(path)
    return written
