"""Reading scenarios.json: each row checked against the spec's metrics."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..loading import check_depth, parse_json, read_text, validate_as, warn_unknown
from ..spec import MAX_ID_LENGTH, BenchmarkSpec, unknown_keys
from .models import Scenario

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
        shown = str(raw.get("id"))[:MAX_ID_LENGTH + 1] if isinstance(raw, dict) and "id" in raw else None
        label = f"{index + 1}" + (f" (id {shown})" if shown is not None else "")
        if not isinstance(raw, dict):
            raise InputError(path, "expected an object", row=label)
        row: Scenario = validate_as(Scenario, raw, path, row=label)
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
                                 "benchmark.yaml, so it would never fire", row=label, field=f"landmarks.{number}.turn")
        row.metric_name = row.metric_name or metric.name
        row.metric_type = metric.type
        for key in unknown_keys(row):  # landmarks.3.note -> landmarks.note: one entry per key
            unknown.setdefault(re.sub(r"\.\d+\.", ".", key), []).append(str(index + 1))
        yield row
    if index < 0:
        raise InputError(path, "no scenario rows: write some or run `evalbench gen-scenarios`")
    warn_unknown(path, unknown, unknown)


_SPACE = re.compile(r"[ \t\n\r]*")


def iter_json_list(text: str, path: Path) -> Iterator[Any]:
    """The values of a JSON list text, decoded one at a time (each checked for depth as an element
    of the list). Anything else, or broken JSON, raises the `InputError` that parsing the whole
    text raises (`loading.parse_json`), so messages do not depend on where the break is."""
    decoder = json.JSONDecoder()

    def whole() -> InputError:
        data = parse_json(text, path)  # raises for broken JSON
        if not isinstance(data, list):
            return InputError(path, "expected a JSON list of scenario rows")
        return InputError(path, "invalid JSON")  # not reached: a list that parses whole parses row by row

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
            check_depth([value], path)
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
