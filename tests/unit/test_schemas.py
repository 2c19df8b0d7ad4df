"""The shipped JSON Schemas are current, and the example benchmarks' inputs validate."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from pytest_evalbench.cli import schemas

ROOT = Path(__file__).parents[2]


def test_shipped_schemas_equal_the_generated_ones() -> None:
    generated = schemas.generate()
    shipped = {p.name.removesuffix(".schema.json") for p in schemas.SCHEMA_DIR.glob("*.schema.json")}
    assert shipped == set(generated), "run `python -m pytest_evalbench schemas`"
    for name, schema in generated.items():
        assert schemas.load(name) == json.loads(json.dumps(schema)), f"{name}: run `python -m pytest_evalbench schemas`"


@pytest.mark.parametrize("bench", ["demo", "support-app"])
def test_example_inputs_validate(bench: str) -> None:
    jsonschema.validate(yaml.safe_load((ROOT / "benchmarks" / bench / "benchmark.yaml").read_text()),
                        schemas.load("benchmark"))
    jsonschema.validate(json.loads((ROOT / "benchmarks" / bench / "scenarios.json").read_text()),
                        schemas.load("scenarios"))


def test_dataset_block_of_benchmark_yaml_is_in_the_schema() -> None:
    """benchmark.schema.json describes `dataset:` (files, policy): the example validates, a typo does not."""
    schema = schemas.load("benchmark")
    spec = yaml.safe_load((ROOT / "benchmarks" / "agents" / "benchmark.yaml").read_text())
    jsonschema.validate(spec, schema)
    spec["dataset"]["policy"]["default_profil"] = spec["dataset"]["policy"].pop("default_profile")
    with pytest.raises(jsonschema.ValidationError, match="default_profil"):
        jsonschema.validate(spec, schema)


def test_example_cases_validate_line_by_line() -> None:
    """schemas/cases.schema.json describes one JSONL line; every example case passes, a broken one does not."""
    schema = schemas.load("cases")
    lines = (ROOT / "benchmarks" / "agents" / "cases.jsonl").read_text().splitlines()
    for line in lines:
        jsonschema.validate(json.loads(line), schema)
    broken = json.loads(lines[0])
    del broken["case_id"]
    with pytest.raises(jsonschema.ValidationError, match="case_id"):
        jsonschema.validate(broken, schema)
