"""`evalbench merge NAME DIR...`: combine CI shards' outputs into one run's result files.

Each `--evalbench-shard=K/N` run leaves its records (`records.json`, by node id) in its shard
directory. Merging hands the union of those records, in node-id order as one session would, to
the benchmark kind's own `write_results`, so the benchmark directory gets exactly the files an
unsharded run writes. Nothing here imports pytest or makes an LLM call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .context import BenchmarkRun
from .errors import InputError
from .kinds import kind_of
from .llm.cache import atomic_write_text
from .loading import load_spec, read_json, resolve_benchmark_dir
from .settings import RunSettings

RECORDS_FILE = "records.json"
"""A shard's records by node id, the input of the merge."""


def write_records(directory: Path, records: Mapping[str, Any]) -> None:
    """A shard's records, written by the plugin at the end of a `--evalbench-shard` session."""
    atomic_write_text(directory / RECORDS_FILE,
                      json.dumps(dict(sorted(records.items())), ensure_ascii=False) + "\n")


class _NotCalled:
    """Stands in for a team's app target: merging writes files and never calls a target."""

    def __call__(self, messages: Any) -> str:  # pragma: no cover - never called
        raise RuntimeError("merge does not run targets")


def read_shard(directory: Path) -> dict[str, Any]:
    path = directory / RECORDS_FILE
    if not path.is_file():
        raise InputError(path, "no shard records here; run pytest with --evalbench-shard=K/N first")
    records = read_json(path)
    if not isinstance(records, dict):
        raise InputError(path, "expected a JSON object of records by node id")
    return records


def merge_shards(root: Path, name: str, directories: list[Path]) -> tuple[Path, int]:
    """Write the merged result files into benchmarks/NAME/; return that directory and the record count."""
    bench_dir = resolve_benchmark_dir(root / "benchmarks", name)
    records: dict[str, Any] = {}
    for directory in directories:
        for node_id, record in read_shard(directory).items():
            if node_id in records:
                raise InputError(directory / RECORDS_FILE, "item is in more than one shard", row=node_id)
            records[node_id] = record
    run = BenchmarkRun(bench_dir, load_spec(bench_dir), RunSettings(benchmark=name, cache_mode="off"),
                       make_app=lambda target: _NotCalled())
    kind = kind_of(run)
    kind.write_results(kind.record_from_json(records[k]) for k in sorted(records))
    return bench_dir, len(records)
