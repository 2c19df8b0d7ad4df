"""Reading scenarios.json: each row checked against the spec's metrics."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pytest_evalbench._models import unknown_keys
from pytest_evalbench.errors import InputError
from pytest_evalbench.file_version import unversioned
from pytest_evalbench.input_json import DECODER, check_depth, may_hold_surrogates, parse_json, read_text
from pytest_evalbench.loading import validate_as, warn_unknown
from pytest_evalbench.scenarios.models import Scenario
from pytest_evalbench.spec import MAX_ID_LENGTH, BenchmarkSpec

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
    for index, raw in enumerate(iter_json_list(read_text(path), path)):
        label = row_label(index, raw)
        if not isinstance(raw, dict):
            raise InputError(path, "expected an object", row=label)
        row: Scenario = validate_as(Scenario, unversioned(path, raw, index + 1), path, row=label)
        del raw
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
        yield row
    if index < 0:
        raise InputError(path, "no scenario rows: write some or run `evalbench gen-scenarios`")
    warn_unknown(path, unknown, unknown)


def row_label(index: int, raw: Any) -> str:
    """How errors name a row: its position from 1 and, when it has one, its id (`3 (id m01_s001_v02)`)."""
    shown = str(raw.get("id"))[:MAX_ID_LENGTH + 1] if isinstance(raw, dict) and "id" in raw else None
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
    text raises (`input_json.parse_json`), so messages do not depend on where the break is."""
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
