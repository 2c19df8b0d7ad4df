"""The files authoring writes: the `metrics:` block of benchmark.yaml (edited as text so the
author's comments and keys survive), scenario rows checked against their schema, and cost.json."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from pytest_evalbench import schemas
from pytest_evalbench.costs import update_cost_file
from pytest_evalbench.errors import InputError
from pytest_evalbench.input_yaml import read_yaml
from pytest_evalbench.llm.types import Usage
from pytest_evalbench.loading import SPEC_FILE, field_path, validate_as
from pytest_evalbench.scenarios.models import Scenario
from pytest_evalbench.spec import BenchmarkSpec
from pytest_evalbench.store import atomic_write_text

COST_FILE = "cost.json"
_METRICS_KEY_RE = re.compile(r"""^(?:metrics|"metrics"|'metrics')[ \t]*:(?:[ \t]|\r?\n|$)""")
_NOT_A_KEY_START = frozenset(" \t#-]},\r\n")

# --------------------------------------------------------------------------- files


def write_cost(bench_dir: Path, phase: str, usage: Usage) -> None:
    """Set one phase key of `<bench>/cost.json`, keeping the others (an unreadable file is an error)."""
    update_cost_file(bench_dir / COST_FILE, {phase: usage}, bench_dir)


def _is_top_level_key(line: str) -> bool:
    """A column-0 line that starts a mapping key (not a comment, list item, flow closer or doc marker)."""
    return bool(line) and line[0] not in _NOT_A_KEY_START and not line.startswith("...")


def replace_metrics_block(text: str, metrics: list[dict[str, Any]]) -> str:
    """Replace only the top-level `metrics:` block (or append one), keeping every other line.

    The block runs from the `metrics:` line to the next top-level key; blank lines and column-0
    comments just before that key belong to the key and stay.
    """
    newline = "\r\n" if "\r\n" in text else "\n"
    block = yaml.safe_dump({"metrics": metrics}, sort_keys=False, allow_unicode=True, default_flow_style=False,
                           width=100)
    if newline != "\n":
        block = block.replace("\n", newline)
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if _METRICS_KEY_RE.match(line)), None)
    if start is None:
        if text and not text.endswith(("\n", "\r")):
            text += newline
        return text + block
    end = start + 1
    while end < len(lines) and not _is_top_level_key(lines[end]):
        end += 1
    while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].startswith("#")):
        end -= 1
    return "".join(lines[:start]) + block + "".join(lines[end:])


def write_metrics(bench_dir: Path, metrics: list[dict[str, Any]]) -> BenchmarkSpec:
    """Splice the metrics into benchmark.yaml, prove nothing else changed and that it validates,
    then write it atomically; returns the spec as written."""
    path = bench_dir / SPEC_FILE
    text = path.read_text(encoding="utf-8")
    before = read_yaml(path)
    new_text = replace_metrics_block(text, metrics)
    try:
        after = yaml.safe_load(new_text)
    except yaml.YAMLError:
        after = None
    unchanged = (isinstance(before, dict) and isinstance(after, dict)
                 and {k: v for k, v in before.items() if k != "metrics"}
                 == {k: v for k, v in after.items() if k != "metrics"}
                 and after.get("metrics") == metrics)
    if not unchanged:
        raise InputError(path, "cannot replace the top-level `metrics:` block safely (unusual layout); write it "
                         "as a plain block (`metrics:` at column 0) and rerun (the answer is cached)")
    spec: BenchmarkSpec = validate_as(BenchmarkSpec, after, path)
    atomic_write_text(path, new_text, bench_dir)
    return spec


def scenario_rows_schema_check(rows: list[dict[str, Any]], path: Path) -> None:
    """Every row against the Scenario model, then the whole list against the shipped JSON Schema."""
    for row in rows:
        validate_as(Scenario, row, path, row=row.get("id"))
    try:
        jsonschema.validate(rows, schemas.load("scenarios"))
    except jsonschema.ValidationError as exc:
        where = field_path(list(exc.absolute_path), rows).replace(".", "/")
        raise InputError(path, f"generated rows violate scenarios.schema.json at {where or '/'}: "
                         f"{exc.message}") from None
