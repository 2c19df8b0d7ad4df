"""The share scheduler on its own: bounds, worker ids, a dead worker's items, the concurrency split."""

from __future__ import annotations

import pytest

from pytest_evalbench.plugin.options import share_bounds, worker_index, worker_share
from pytest_evalbench.plugin.xdist_scheduler import ShareScheduling


class FakeHooks:
    def __init__(self) -> None:
        self.reports: list[pytest.CollectReport] = []

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self.reports.append(report)


class FakeConfig:
    """Only what the scheduler may use: the public hook caller."""

    def __init__(self) -> None:
        self.hook = FakeHooks()


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
    splits = [worker_share({"workerid": f"gw{i}", "workercount": 3}, 64) for i in range(3)]
    assert sum(splits) == 64
    assert worker_share({"workerid": "gw1", "workercount": 2}, 1) == 1


def scheduler(count: int, workers: int) -> tuple[ShareScheduling, list[FakeNode]]:
    sched = ShareScheduling(FakeConfig())  # type: ignore[arg-type]
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


def scheduler_members() -> list[str]:
    """The public members of xdist's scheduler protocol (`xdist.scheduler.protocol`, xdist >= 3.6)."""
    try:
        from xdist.scheduler.protocol import Scheduling
    except ImportError:  # xdist 3.5, the supported floor, has no protocol module: what its DSession calls
        return ["add_node", "add_node_collection", "collection_is_completed", "has_pending", "mark_test_complete",
                "nodes", "remove_node", "remove_pending_tests_from_node", "schedule", "tests_finished"]
    return [m for m in vars(Scheduling) if not m.startswith("_")]


def test_it_is_xdists_public_protocol_not_a_subclass() -> None:
    from xdist.scheduler import LoadScheduling

    assert not issubclass(ShareScheduling, LoadScheduling)
    members = scheduler_members()
    assert members and all(callable(getattr(ShareScheduling, m, None)) or isinstance(getattr(ShareScheduling, m), property)
                           for m in members)


def test_collection_completes_only_when_every_worker_reported() -> None:
    sched = ShareScheduling(FakeConfig())  # type: ignore[arg-type]
    a, b = FakeNode("gw0", 2), FakeNode("gw1", 2)
    sched.add_node(a)  # type: ignore[arg-type]
    sched.add_node(b)  # type: ignore[arg-type]
    sched.add_node_collection(a, ["t.py::x", "t.py::y"])  # type: ignore[arg-type]
    assert not sched.collection_is_completed and not sched.tests_finished and not sched.has_pending
    sched.add_node_collection(b, ["t.py::x", "t.py::y"])  # type: ignore[arg-type]
    assert sched.collection_is_completed
    sched.schedule()
    assert (a.sent, b.sent) == ([0], [1]) and a.shutting_down and b.shutting_down
    assert sched.has_pending and sched.tests_finished  # each holds its last item, already told to stop


def test_different_collections_are_a_collection_error_and_nothing_runs() -> None:
    config = FakeConfig()
    sched = ShareScheduling(config)  # type: ignore[arg-type]
    a, b = FakeNode("gw0", 2), FakeNode("gw1", 2)
    for node, ids in ((a, ["t.py::x", "t.py::y"]), (b, ["t.py::x", "t.py::z"])):
        sched.add_node(node)  # type: ignore[arg-type]
        sched.add_node_collection(node, ids)  # type: ignore[arg-type]
    sched.schedule()
    assert a.sent == b.sent == []
    [report] = config.hook.reports
    assert report.failed and report.nodeid == "gw1"
    assert "Different tests were collected between gw0 and gw1" in str(report.longrepr)
    assert "-t.py::y" in str(report.longrepr) and "+t.py::z" in str(report.longrepr)
    assert sched.tests_finished and not sched.has_pending


def test_a_replacement_worker_takes_the_dead_ones_items_after_collecting() -> None:
    sched, (a, b) = scheduler(6, 2)
    for index in [0, 1]:
        sched.mark_test_complete(a, index)  # type: ignore[arg-type]
    assert a.shutting_down  # holds its last item (2)
    assert sched.remove_node(b) == "t.py::test_3"  # died running its first item
    assert sched.pending == [4, 5] and not sched.tests_finished
    spare = FakeNode("gw2", 2)  # xdist numbers a replacement past the initial count
    sched.add_node(spare)  # type: ignore[arg-type]
    sched.schedule()  # not collected yet: gets nothing
    assert spare.sent == []
    sched.add_node_collection(spare, [f"t.py::test_{i}" for i in range(6)])  # type: ignore[arg-type]
    sched.schedule()
    assert spare.sent == [4, 5] and not sched.pending
    sched.mark_test_complete(spare, 4)  # type: ignore[arg-type]
    assert spare.shutting_down


def test_a_replacement_with_another_collection_gets_nothing_and_stops() -> None:
    sched, (_, b) = scheduler(4, 2)
    sched.remove_node(b)  # type: ignore[arg-type]
    spare = FakeNode("gw2", 2)
    sched.add_node(spare)  # type: ignore[arg-type]
    sched.add_node_collection(spare, ["t.py::other"])  # type: ignore[arg-type]
    sched.schedule()
    assert spare.sent == [] and spare.shutting_down


def test_an_item_put_back_pending_runs_again_once() -> None:
    sched, (a, b) = scheduler(4, 2)
    sched.mark_test_complete(a, 0)  # type: ignore[arg-type]
    sched.mark_test_pending("t.py::test_0")
    assert sorted(a.sent + b.sent) == [0, 0, 1, 2, 3]


def test_a_worker_killed_after_an_items_teardown_report_was_running_nothing() -> None:
    # xdist sends `runtest_protocol_complete` after an item's teardown report: a worker killed in
    # between (a prefetched item's app kills its process) had finished that item, whose record is in
    sched, (a, b) = scheduler(6, 2)
    sched.mark_test_complete(b, 3)  # type: ignore[arg-type]
    sched.teardown_reported("t.py::test_4")
    assert sched.remove_node(b) is None  # not counted as crashed: it was scored
    assert a.sent == [0, 1, 2, 5]  # its remaining item goes to the live worker; the finished one never again
    sched, (a, b) = scheduler(6, 2)
    sched.teardown_reported("t.py::test_2")  # another worker's item: says nothing about b
    assert sched.remove_node(b) == "t.py::test_3"  # killed while running its first item
