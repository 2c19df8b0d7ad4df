"""JSON Schemas of every file pytest-evalbench reads or writes, generated from the pydantic models
(`spec.py`, `scenarios/models.py`, `dataset/`, `calibration/`).

The generated files ship in `pytest_evalbench/schemas/`; a test asserts they are current, and the
integration tests validate every written file against them with `jsonschema`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from pytest_evalbench.base.files import FORMAT_VERSION, VERSION_KEY
from pytest_evalbench.cli.mutate import MutationReport
from pytest_evalbench.formats.results import ModelResult
from pytest_evalbench.formats.scenario_rows import ConversationRow, Scenario, ScoreRow
from pytest_evalbench.formats.spec import BenchmarkSpec, PhaseCost
from pytest_evalbench.kinds.dataset.kind import DatasetSettings
from pytest_evalbench.kinds.dataset.models import DatasetCase, StoredAnswer
from pytest_evalbench.kinds.dataset.summary import DATASET_TYPES
from pytest_evalbench.kinds.labels import CalibrationEntry
from pytest_evalbench.kinds.scenarios.aggregate import RejudgeReport

SCHEMA_DIR = Path(__file__).parents[1] / "schemas"
"""The generated JSON Schemas ship as package data at the package's top."""

TYPES: dict[str, Any] = {
    "benchmark": BenchmarkSpec,
    "scenarios": list[Scenario],
    "conversations": list[ConversationRow],
    "scores": list[ScoreRow],
    "results": list[ModelResult],
    "cost": dict[str, PhaseCost],
    "cases": DatasetCase,
    "answers": StoredAnswer,
    **DATASET_TYPES,
    "calibration": list[CalibrationEntry],
    "rejudge": RejudgeReport,
    "mutants": MutationReport,
}
"""`cases` describes one line of a dataset benchmark's JSONL file (input, validated as read);
`answers` one line of answers/<agent>.jsonl (written by a run, read back as a dataset line)."""
INPUT_FILES = {"benchmark", "scenarios", "cases", "answers"}
"""Files people write: their schemas describe what the loader accepts (validation mode)."""


def _with_dataset_block(schema: dict[str, Any]) -> dict[str, Any]:
    """benchmark.yaml's `dataset:` described by the dataset kind's model (spec.py keeps it an untyped
    mapping so that a scenario run never imports the dataset kind; it is validated when the kind loads)."""
    block = TypeAdapter(DatasetSettings).json_schema(mode="validation")
    schema["$defs"].update(block.pop("$defs", {}))
    schema["$defs"]["DatasetSettings"] = block
    schema["properties"]["dataset"] = {"anyOf": [{"$ref": "#/$defs/DatasetSettings"}, {"type": "null"}],
                                       "default": None, "title": "Dataset"}
    return schema


VERSIONED = {"scenarios", "conversations", "scores", "results", "cost", "case_results", "agent_summary", "calibration",
             "rejudge", "mutants"}
"""Files whose rows (a list file) or whose object (cost.json) carry `version` (see `file_version`)."""


def _with_version(schema: dict[str, Any]) -> dict[str, Any]:
    """`version` on each row of a list file, or beside the phases of cost.json; optional, since
    files written before it existed are read too."""
    node = schema.get("items", schema)
    if "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
    node.setdefault("properties", {})[VERSION_KEY] = {
        "const": FORMAT_VERSION, "type": "integer", "title": "Version",
        "description": "The file format version (absent in files written before it existed)."}
    return schema


def generate() -> dict[str, dict[str, Any]]:
    schemas = {}
    for name, tp in TYPES.items():
        schema = TypeAdapter(tp).json_schema(mode="validation" if name in INPUT_FILES else "serialization")
        if name == "benchmark":
            schema = _with_dataset_block(schema)
        if name in VERSIONED:
            schema = _with_version(schema)
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["title"] = f"pytest-evalbench {name}"
        schemas[name] = schema
    return schemas


def write(directory: Path = SCHEMA_DIR) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, schema in generate().items():
        path = directory / f"{name}.schema.json"
        path.write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def load(name: str) -> dict[str, Any]:
    return json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text(encoding="utf-8"))
