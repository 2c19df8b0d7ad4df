"""Rows of a scenario benchmark: scenarios.json (read with each row checked against the spec's metrics),
conversations.json, scores.json and the records one item produces.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

from pytest_evalbench.base.errors import MAX_SHOWN_ERRORS, InputError
from pytest_evalbench.base.files import unversioned
from pytest_evalbench.base.inputs import read_text
from pytest_evalbench.base.json_input import DECODER, BadValue, check_depth, may_hold_surrogates, parse_json
from pytest_evalbench.formats import MAX_ID_LENGTH, unknown_keys
from pytest_evalbench.formats.results import ModelResult, RateSummary, Status
from pytest_evalbench.formats.scenario_rows import (
    UNSET_OPTIONAL,
    ConversationRow,
    JudgeVote,
    Landmark,
    Scenario,
    ScoreRow,
    TargetRef,
    UserAudit,
)
from pytest_evalbench.formats.spec import BenchmarkSpec, Metric, validate_as, warn_unknown
from pytest_evalbench.llm.types import Usage

__all__ = ["UNSET_OPTIONAL", "ConversationRow", "JudgeVote", "Landmark", "ModelResult", "RateSummary", "Scenario",
           "ScenarioRecord", "ScoreRow", "TargetRef", "UserAudit", "derive_pass"]
"""The rows themselves are `formats/scenario_rows.py`'s (re-exported: the kind's modules read them here)."""


def derive_pass(present: bool | None, metric_type: str) -> tuple[bool | None, Literal[0, 1] | None]:
    """`passed` and `score` from the judge's `present` (output-schema.md): a negative metric
    passes when the behaviour is absent. Unscored stays unscored."""
    if present is None:
        return None, None
    passed = present if metric_type == "positive" else not present
    return passed, 1 if passed else 0


@dataclass
class ScenarioRecord:
    """What one scenario item produced. `status` and the score's `passed`/`score` stay unset until
    `ScenarioKind.outcome` derives them, once, after the judged-row hook."""

    benchmark: str
    target_id: str
    conversation: ConversationRow
    score: ScoreRow
    usage: dict[str, Usage]
    status: Optional[Status] = None
    trajectory_detail: Optional[str] = None
    """When the checks decided and no rule held: what the trajectory rules found differed
    (`CheckDecision.differed`), repeated on the failure's first line."""

    def to_json(self) -> dict[str, Any]:
        """The record as it crosses the worker -> controller boundary and the hooks see it
        (`trajectory_detail` only when there is one)."""
        data = {"benchmark": self.benchmark, "target_id": self.target_id, "conversation": self.conversation.to_json(),
                "score": self.score.to_json(), "usage": {k: v.to_json() for k, v in self.usage.items()},
                "status": self.status}
        if self.trajectory_detail is not None:
            data["trajectory_detail"] = self.trajectory_detail
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScenarioRecord:
        detail = data.get("trajectory_detail")
        return cls(data["benchmark"], data["target_id"], ConversationRow.model_validate(data["conversation"]),
                   ScoreRow.model_validate(data["score"]),
                   {k: Usage.from_json(v) for k, v in data["usage"].items()}, data.get("status"),
                   detail if isinstance(detail, str) else None)


SCENARIOS_FILE = "scenarios.json"


def load_scenarios(bench_dir: Path, spec: BenchmarkSpec) -> list[Scenario]:
    """Parse scenarios.json, check each row against the spec's metrics and turns, fill metric name/type.
    Rows are numbered from 1 in errors."""
    return list(iter_scenarios(bench_dir, spec))


def iter_scenarios(bench_dir: Path, spec: BenchmarkSpec) -> Iterator[Scenario]:
    """`load_scenarios` one row at a time: each row is parsed from the file's text and validated as it
    is reached, so 100,000 rows are never one parsed list plus 100,000 models at once. The
    unknown-keys warning comes once the last row is read."""
    path = bench_dir / SCENARIOS_FILE
    metrics = {m.id: m for m in spec.metrics}
    seen: dict[str, int] = {}
    unknown: dict[str, list[str]] = {}
    index = -1
    problems: list[InputError] = []  # the first MAX_SHOWN_ERRORS rows' problems, shown at once
    count = 0
    for index, raw in enumerate(iter_json_list(read_text(path), path)):
        try:
            row = _checked_row(path, spec, metrics, seen, unknown, index, raw)
        except InputError as exc:
            count += 1
            if len(problems) < MAX_SHOWN_ERRORS:
                problems.append(exc)
            continue
        del raw
        if not problems:  # after a bad row, the rest is only checked
            yield row
    if problems:
        raise InputError.gather(problems, count)
    if index < 0:
        raise InputError(path, "no scenario rows: write some or run `evalbench gen-scenarios`")
    warn_unknown(path, unknown, unknown)


def _checked_row(path: Path, spec: BenchmarkSpec, metrics: dict[str, Metric], seen: dict[str, int],
                 unknown: dict[str, list[str]], index: int, raw: Any) -> Scenario:
    """One row of scenarios.json, validated and checked against benchmark.yaml; InputError otherwise."""
    label = row_label(index, raw)
    if not isinstance(raw, dict):
        raise InputError(path, "expected an object", row=label)
    row: Scenario = validate_as(Scenario, unversioned(path, raw, index + 1), path, row=label)
    if row.id in seen:
        raise InputError(path, f"duplicate id {row.id!r} (also row {seen[row.id]})", row=label, field="id")
    seen[row.id] = index + 1
    metric = metrics.get(row.metric_id)
    if metric is None:
        known = ", ".join(metrics) or "none: benchmark.yaml has no metrics"
        raise InputError(path, f"unknown metric id {row.metric_id!r}; benchmark.yaml defines {known}",
                         row=label, field="metric_id")
    if row.metric_type is not None and row.metric_type != metric.type:
        raise InputError(path, f"metric_type {row.metric_type!r} contradicts benchmark.yaml "
                         f"({metric.id} is {metric.type})", row=label, field="metric_type")
    turns = spec.generation.turns
    for number, landmark in enumerate(row.landmarks):
        if spec.generation.landmarks and landmark.turn > turns:
            raise InputError(path, f"landmark turn {landmark.turn} is beyond generation.turns ({turns}) of "
                             "benchmark.yaml, so it would never fire", row=label,
                             field=f"landmarks.{number + 1}.turn")
    check_demographic(row.demographic, spec.demographics, path, label)
    row.metric_name = row.metric_name or metric.name
    row.metric_type = metric.type
    for key in unknown_keys(row):  # landmarks.3.note -> landmarks.note: one entry per key
        unknown.setdefault(re.sub(r"\.\d+\.", ".", key), []).append(str(index + 1))
    return row


def row_label(index: int, raw: Any) -> str:
    """How errors name a row: its position from 1 and, when it has one, its id (`3 (id m01_s001_v02)`;
    an id given twice by its first value)."""
    value = raw.get("id") if isinstance(raw, dict) else None
    if isinstance(value, BadValue):
        value = value.label()
    shown = str(value)[:MAX_ID_LENGTH + 1] if isinstance(raw, dict) and "id" in raw else None
    if shown is not None and shown.isprintable():  # a lone surrogate or a newline is shown escaped
        return f"{index + 1} (id {shown})"
    return f"{index + 1}" + (f" (id {shown!r})" if shown is not None else "")


SHOWN_VALUES = 10
"""How many of an axis's values an error lists."""


def check_demographic(demographic: dict[str, str], axes: dict[str, list[str]], path: Path, label: str) -> None:
    """Each axis of a row's `demographic` is an axis of benchmark.yaml's `demographics` and its value one of
    that axis's values (a typo would make a demographic group of its own). Rows of a benchmark that
    declares no demographics (impactbench keeps them in its config.yaml) are not checked."""
    if not axes:
        return
    for axis, value in demographic.items():
        values = axes.get(axis)
        if values is None:
            close = difflib.get_close_matches(axis, list(axes), n=1, cutoff=0)
            raise InputError(path, f"unknown demographic axis {axis!r}; benchmark.yaml's demographics has "
                             f"{_listed(list(axes))}" + (f"; closest: {close[0]!r}" if close else ""),
                             row=label, field=f"demographic.{axis}")
        if value not in values:
            close = difflib.get_close_matches(value, values, n=1, cutoff=0)
            raise InputError(path, f"demographic value {value!r} is not one of axis {axis!r}'s values in "
                             f"benchmark.yaml ({_listed(values)})" + (f"; closest: {close[0]!r}" if close else ""),
                             row=label, field=f"demographic.{axis}")


def _listed(values: list[str]) -> str:
    shown = ", ".join(repr(v) for v in values[:SHOWN_VALUES])
    return shown + (f" and {len(values) - SHOWN_VALUES} more" if len(values) > SHOWN_VALUES else "")


_SPACE = re.compile(r"[ \t\n\r]*")


def iter_json_list(text: str, path: Path) -> Iterator[Any]:
    """The values of a JSON list text, decoded one at a time (each checked for depth as an element
    of the list). Anything else, or broken JSON, raises the `InputError` that parsing the whole
    text raises (`input_json.parse_json`), so messages do not depend on where the break is.
    Our own loop over the stdlib decoder (as `base.files.iter_json_rows`): each row gets the same checks
    and messages as a whole-file parse, which a streaming library's events would have to rebuild."""
    decoder = DECODER
    strings = may_hold_surrogates(text)  # one scan of the text, so a file without escapes skips the string checks

    def whole() -> InputError:
        data = parse_json(text, path)  # raises for broken JSON
        if not isinstance(data, list):
            return InputError(path, "expected a JSON list of scenario rows")
        return InputError(path, "invalid JSON")  # not reached: a list that parses whole parses row by row

    index = 0
    position = _SPACE.match(text, 0).end()  # type: ignore[union-attr]
    if text[position:position + 1] != "[":
        raise whole()
    position = _SPACE.match(text, position + 1).end()  # type: ignore[union-attr]
    if text[position:position + 1] != "]":
        while True:
            try:
                value, position = decoder.raw_decode(text, position)
            except (ValueError, RecursionError):
                raise whole() from None
            try:
                check_depth(value, path, strings=strings, base_depth=1)
            except InputError as exc:  # the row's label is made only when it is needed
                raise InputError(path, exc.message, row=row_label(index, value), field=exc.field) from None
            index += 1
            yield value
            position = _SPACE.match(text, position).end()  # type: ignore[union-attr]
            separator = text[position:position + 1]
            position = _SPACE.match(text, position + 1).end()  # type: ignore[union-attr]
            if separator == "]":
                break
            if separator != ",":
                raise whole()
    else:
        position = _SPACE.match(text, position + 1).end()  # type: ignore[union-attr]
    if position != len(text):
        raise whole()
