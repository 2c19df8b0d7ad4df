"""`evalbench merge NAME DIR...`: combine CI shards' outputs into one run's result files.

Each `--evalbench-shard=K/N` run leaves its records (`records.json`, by node id) in its shard
directory. Merging hands the union of those records, in node-id order as one session would, to
the benchmark kind's own `write_results`, so the benchmark directory gets exactly the files an
unsharded run writes. Nothing here imports pytest or makes an LLM call.

Shard directories are often artifacts downloaded from other CI jobs, so their records are input
like any other: every id in them that names a file or directory is checked with the loaders' rule
(`formats.check_id`), a record must belong to this benchmark and agree with itself, and no write
leaves the benchmark directory (`safe_files`), whatever a record says.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

from pytest_evalbench.base.errors import EvalbenchError, InputError
from pytest_evalbench.base.files import atomic_write_text, finite_json, unversioned, versioned
from pytest_evalbench.base.inputs import read_input_json
from pytest_evalbench.formats import check_id
from pytest_evalbench.formats.spec import load_spec, resolve_benchmark_dir
from pytest_evalbench.kinds.protocol import SpecKind, kind_of, spec_kind
from pytest_evalbench.kinds.run import BenchmarkRun, RunSettings

RECORDS_FILE = "records.json"
"""A shard's records by node id, the input of the merge."""


def write_records(directory: Path, records: Mapping[str, Any], root: Path) -> None:
    """A shard's records, written by the plugin at the end of a `--evalbench-shard` session (inside
    `root`, the benchmark directory)."""
    path = directory / RECORDS_FILE
    atomic_write_text(path, finite_json(versioned(dict(sorted(records.items()))), path, ensure_ascii=False) + "\n",
                      root)


class _NotCalled:
    """Stands in for a team's app target: merging writes files and never calls a target."""

    def __call__(self, messages: Any) -> str:  # pragma: no cover - never called
        raise RuntimeError("merge does not run targets")


def read_shard(directory: Path) -> dict[str, Any]:
    path = directory / RECORDS_FILE
    if not path.is_file():
        raise InputError(path, "no shard records here; run pytest with --evalbench-shard=K/N first")
    records = read_input_json(path)
    if not isinstance(records, dict):
        raise InputError(path, "expected a JSON object of records by node id")
    return unversioned(path, records)


def _field(record: Any, path: tuple[str, ...]) -> Any:
    value = record
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def check_record(path: Path, node_id: str, record: Any, benchmark: str, kind: type[SpecKind]) -> None:
    """A shard record's ids, before anything is written: the record of this benchmark, each id the
    kind names (`record_ids`) a safe id by the loaders' rule (full match, so `../x` or a trailing
    newline is refused), and the same id wherever the kind says so (`record_same_ids`: a record
    cannot write one target's run and name another). InputError names file, node id and field."""
    if not isinstance(record, dict):
        raise InputError(path, "expected a JSON object (a record)", row=node_id)
    if record.get("benchmark") != benchmark:
        shown = str(record.get("benchmark"))[:100]
        raise InputError(path, f"record of benchmark {shown!r}, not {benchmark!r}", row=node_id, field="benchmark")
    for fields in kind.record_ids:
        value, name = _field(record, fields), ".".join(fields)
        if not isinstance(value, str):
            raise InputError(path, f"expected an id (text), got {type(value).__name__}", row=node_id, field=name)
        try:
            check_id(value, name)
        except ValueError as exc:
            raise InputError(path, str(exc), row=node_id, field=name) from None
    for group in kind.record_same_ids:
        first = _field(record, group[0])
        for other in group[1:]:
            if _field(record, other) != first:
                raise InputError(path, f"{_field(record, other)!r} differs from {'.'.join(group[0])} "
                                 f"{first!r}", row=node_id, field=".".join(other))


def merge_shards(root: Path, name: str, directories: list[Path]) -> tuple[Path, dict[str, Any]]:
    """Write the merged result files into benchmarks/NAME/; return that directory and the records by node
    id. Every record is checked (`check_record`, then typed) before the first write."""
    bench_dir = resolve_benchmark_dir(root / "benchmarks", name)
    spec = load_spec(bench_dir)
    records: dict[str, Any] = {}
    source: dict[str, Path] = {}
    for directory in directories:
        for node_id, record in read_shard(directory).items():
            if node_id in records:
                raise InputError(directory / RECORDS_FILE, "item is in more than one shard", row=node_id)
            check_record(directory / RECORDS_FILE, node_id, record, spec.name, spec_kind(spec))
            records[node_id] = record
            source[node_id] = directory / RECORDS_FILE
    run = BenchmarkRun(bench_dir, spec, RunSettings(benchmark=name, cache_mode="off"),
                       make_app=lambda target: _NotCalled())
    kind = kind_of(run)

    def checked() -> Iterator[Any]:  # a shard's records are input: each is read back as this version's record
        for node_id in sorted(records):
            try:
                yield kind.record_to_json(kind.record_from_json(records[node_id]))
            except EvalbenchError:
                raise
            except (KeyError, TypeError, ValueError, AttributeError) as exc:  # pydantic's errors are ValueErrors
                problem = f"missing key {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
                raise InputError(source[node_id], f"not a record of this version: {problem}", row=node_id) from None

    kind.write_results(checked())
    return bench_dir, records


def record_merge(root: Path, name: str, records: Mapping[str, Any], shards: int, exit_status: int,
                 url: str | None) -> str:
    """Record the merged shards as one run (the shards record none); the line saying so, or the warning.
    The merge applies no threshold rule: the run's verdict is its cases' (a failed case: failed; items
    without a record: incomplete)."""
    import os

    from pytest_evalbench.store import store_setting

    if store_setting(url, os.environ) is None:
        return ""  # recording off: the store's modules (SQLAlchemy) are not imported
    from pytest_evalbench.formats.provenance import git_commit
    from pytest_evalbench.store.record import cases_of, now, record_run, run_from_parts, store_url

    where = cast(str, store_url(root, url, os.environ))  # None only when off, returned above
    bench_dir = resolve_benchmark_dir(root / "benchmarks", name)
    run = BenchmarkRun(bench_dir, load_spec(bench_dir), RunSettings(benchmark=name, cache_mode="off"),
                       make_app=lambda target: _NotCalled())
    statuses = [(node_id, str(records[node_id].get("status") or "unscored"), "") for node_id in sorted(records)]
    failed = sum(1 for _, status, _ in statuses if status == "failed")
    verdict = "incomplete" if exit_status == 7 else ("failed" if failed else "passed")
    cost = sum(float(u.get("cost") or 0.0) for r in records.values()
               for u in (r.get("usage") or {}).values() if isinstance(u, dict))
    meta = run.meta()
    stored = run_from_parts(
        benchmark=name, kind=run.spec.kind, created=now(), commit=git_commit(root), root=root, env=os.environ,
        targets=dict(meta.get("targets") or {}), judge=meta.get("judge_model"), identities=run.identities(),
        verdict=verdict, exit_status=exit_status, cost=cost, scope="full",
        reason=f"{len(records)} records merged from {shards} shard(s); {failed} failed",
        cases=cases_of(records, statuses))
    run_id, warning = record_run(where, stored, root)
    return warning if warning is not None else f"recorded as run {run_id}"


def item_count(root: Path, name: str) -> int:
    """How many items the benchmark has, as one unsharded session collects them: a merge with fewer
    records (a shard missing, rows errored or not run) is incomplete."""
    bench_dir = resolve_benchmark_dir(root / "benchmarks", name)
    run = BenchmarkRun(bench_dir, load_spec(bench_dir), RunSettings(benchmark=name, cache_mode="off"),
                       make_app=lambda target: _NotCalled())
    return sum(len(cases) for cases in kind_of(run).load_items().values())
