"""CI shards: `--evalbench-shard=K/N` runs a deterministic, balanced K-th of N parts of the items.

Every case of the benchmark is ranked by the sha256 of its node id and dealt round-robin over the
N shards: every shard gets the same number of cases (give or take one), and a case's shard depends
only on the benchmark's cases, never on collection order or on what -k, --lf or node ids select.
Each shard writes its result files under `benchmarks/NAME/shards/K-of-N/` together with its raw
records (`records.json`), from which `evalbench merge NAME DIR...` writes exactly the files one unsharded run would have written.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import pytest

from pytest_evalbench.merge import write_records
from pytest_evalbench.plugin.session import session_of


def shard_of(node_ids: Iterable[str], count: int) -> dict[str, int]:
    """Node id -> shard number 1..count (balanced; stable under reordering)."""
    ranked = sorted(node_ids, key=lambda node_id: (hashlib.sha256(node_id.encode()).hexdigest(), node_id))
    return {node_id: rank % count + 1 for rank, node_id in enumerate(ranked)}


class ShardPlugin:
    """Deselects the other shards' items; on the controller, keeps this shard's records for the merge."""

    def __init__(self, config: pytest.Config, shard: tuple[int, int]) -> None:
        self.config = config
        self.index, self.count = shard

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Deal every case of the benchmark, not just the ones collected: an item's shard does not
        depend on -k, --lf or node ids, so a printed rerun command with the shard runs its items."""
        every = set(session_of(config).selection.case_node_ids())
        shards = shard_of(every | {item.nodeid for item in items}, self.count)
        keep = [item for item in items if shards[item.nodeid] == self.index]
        dropped = [item for item in items if shards[item.nodeid] != self.index]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep

    def pytest_evalbench_results(self, config: pytest.Config, benchmark: str, results: list[dict[str, Any]],
                                 records: list[dict[str, Any]]) -> None:
        session = session_of(config)
        write_records(session.selection.run.output_dir, session.outcomes.records, session.bench_dir)
