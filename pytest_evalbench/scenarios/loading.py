"""Reading scenarios.json: each row checked against the spec's metrics."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..loading import read_json, validate_as
from ..spec import BenchmarkSpec
from .models import Scenario

SCENARIOS_FILE = "scenarios.json"


def load_scenarios(bench_dir: Path, spec: BenchmarkSpec) -> list[Scenario]:
    """Parse scenarios.json, check each row against the spec's metrics, fill metric name/type."""
    path = bench_dir / SCENARIOS_FILE
    data = read_json(path)
    if not isinstance(data, list):
        raise InputError(path, "expected a JSON list of scenario rows")
    if not data:
        raise InputError(path, "no scenario rows: write some or run `evalbench gen-scenarios`")
    metrics = {m.id: m for m in spec.metrics}
    seen: dict[str, int] = {}
    rows: list[Scenario] = []
    for index, raw in enumerate(data, start=1):  # 1-based, as people count rows
        label = f"{index}" + (f" (id {raw.get('id')})" if isinstance(raw, dict) and "id" in raw else "")
        if not isinstance(raw, dict):
            raise InputError(path, "expected an object", row=label)
        row: Scenario = validate_as(Scenario, raw, path, row=label)
        if row.id in seen:
            raise InputError(path, f"duplicate id {row.id!r} (also row {seen[row.id]})", row=label, field="id")
        seen[row.id] = index
        metric = metrics.get(row.metric_id)
        if metric is None:
            known = ", ".join(metrics) or "none: benchmark.yaml has no metrics"
            raise InputError(path, f"unknown metric id {row.metric_id!r}; benchmark.yaml defines {known}",
                             row=label, field="metric_id")
        if row.metric_type is not None and row.metric_type != metric.type:
            raise InputError(path, f"metric_type {row.metric_type!r} contradicts benchmark.yaml "
                             f"({metric.id} is {metric.type})", row=label, field="metric_type")
        row.metric_name = row.metric_name or metric.name
        row.metric_type = metric.type
        rows.append(row)
    return rows
