"""The share scheduler on its own: bounds, worker ids, a dead worker's items, the concurrency split."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_evalbench.plugin.xdist import ShareScheduling, share_bounds, worker_index, worker_share


class FakeConfig:
    def __init__(self, workers: int) -> None:
        self.values = {"tx": [f"{workers}*popen"], "maxschedchunk": None}

    def getvalue(self, name: str) -> Any:
        return self.values[name]

    getoption = getvalue


class FakeNode:
    def __init__(self, workerid: str, workercount: int) -> None:
        self.workerinput = {"workerid": workerid, "workercount": workercount}
        self.gateway = type("Gateway", (), {"id": workerid})()
        self.shutting_down = False
        self.sent: list[int] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


@pytest.mark.parametrize(("count", "workers"), [(10, 3), (2, 4), (0, 2), (12, 2), (10_001, 7)])
def test_shares_are_contiguous_balanced_and_cover_everything(count: int, workers: int) -> None:
    bounds = [share_bounds(count, workers, i) for i in range(workers)]
    assert [i for a, b in bounds for i in range(a, b)] == list(range(count))
    sizes = [b - a for a, b in bounds]
    assert max(sizes) - min(sizes) <= 1


def test_worker_index_and_concurrency_split() -> None:
    assert worker_index({"workerid": "gw1", "workercount": 2}) == 1
    assert worker_index({"workerid": "gw2", "workercount": 2}) is None  # a replacement owns no share
    assert worker_index({"workerid": "local"}) is None
    splits = [worker_share({"workerid": f"gw{i}", "workercount": 3}, 3.0, 64) for i in range(3)]
    assert sum(c for _, c in splits) == 64 and {cost for cost, _ in splits} == {1.0}
    assert worker_share({"workerid": "gw1", "workercount": 2}, None, 1) == (None, 1)


def scheduler(count: int, workers: int) -> tuple[ShareScheduling, list[FakeNode]]:
    sched = ShareScheduling(FakeConfig(workers))  # type: ignore[arg-type]
    nodes = [FakeNode(f"gw{i}", workers) for i in range(workers)]
    collection = [f"t.py::test_{i}" for i in range(count)]
    for node in nodes:
        sched.add_node(node)  # type: ignore[arg-type]
        sched.add_node_collection(node, collection)  # type: ignore[arg-type]
    sched.schedule()
    return sched, nodes


def test_whole_shares_up_front_and_shutdown_at_the_last_item() -> None:
    sched, (a, b) = scheduler(9, 2)
    assert (a.sent, b.sent) == ([0, 1, 2, 3, 4], [5, 6, 7, 8])
    assert not a.shutting_down
    for index in [0, 1, 2, 3]:
        sched.mark_test_complete(a, index)  # type: ignore[arg-type]
    assert a.shutting_down and not b.shutting_down  # holds its last item: xdist needs the shutdown now


def test_a_dead_workers_items_go_to_the_live_ones_once() -> None:
    sched, (a, b, c) = scheduler(12, 3)
    sched.mark_test_complete(b, 4)  # type: ignore[arg-type]
    crashed = sched.remove_node(b)  # type: ignore[arg-type]
    assert crashed == "t.py::test_5"  # xdist reports the item it was running
    assert a.sent == [0, 1, 2, 3, 6] and c.sent == [8, 9, 10, 11, 7]
    everything = [*a.sent, 4, 5, *c.sent]
    assert sorted(everything) == list(range(12))  # nothing lost, nothing twice
    assert not sched.tests_finished
