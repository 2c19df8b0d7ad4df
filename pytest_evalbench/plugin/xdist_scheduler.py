"""The share scheduler: our implementation of xdist's public scheduler protocol
(`xdist.scheduler.protocol.Scheduling`) that gives every initial worker its whole contiguous share
at once (see xdist.py for how it is chosen and how workers prefetch their share)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from pytest_evalbench.plugin._compat import (
    is_shutting_down,
    node_input,
    node_name,
    scheduler_log,
    send_items,
    shut_down,
    worker_count,
)
from pytest_evalbench.plugin.options import share_bounds, worker_index


class ShareScheduling:
    """A scheduler for xdist's public protocol (`xdist.scheduler.protocol.Scheduling`): every initial
    worker gets its whole contiguous share at once.

    A worker is told to shut down only when it holds its last item (xdist runs an item once the
    next one, or the shutdown, has arrived), so while any worker is alive the items of one that died
    (all but the crashing one, which xdist reports) can be handed to it.
    """

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        self.config = config
        self.log: Callable[..., None] = scheduler_log(log)
        self.node2collection: dict[Any, list[str]] = {}
        self.node2pending: dict[Any, list[int]] = {}
        """Per live worker, the indices it was sent and has not finished, in the order it runs them."""
        self.pending: list[int] = []
        """Indices owned by no live worker yet (shares of workers that died or never came up)."""
        self.collection: list[str] | None = None
        self.expected: int | None = None
        """How many workers xdist starts (`workercount` of the first one): collection is complete when
        that many have reported theirs."""
        self.index: dict[str, int] = {}
        """Node id -> its position in the collection."""
        self.torn_down: set[int] = set()
        """Items whose teardown report arrived and whose `runtest_protocol_complete` has not yet: a
        worker that dies in between was running nothing (the item's record is already in)."""

    # ---------------------------------------------------------------- protocol
    @property
    def nodes(self) -> list[Any]:
        return list(self.node2pending)

    @property
    def collection_is_completed(self) -> bool:
        return self.expected is not None and len(self.node2collection) >= self.expected

    @property
    def tests_finished(self) -> bool:
        return (self.collection_is_completed and not self.pending
                and all(len(pending) < 2 for pending in self.node2pending.values()))

    @property
    def has_pending(self) -> bool:
        return bool(self.pending) or any(self.node2pending.values())

    def add_node(self, node: Any) -> None:
        assert node not in self.node2pending
        if self.expected is None:
            self.expected = worker_count(node_input(node))
        self.node2pending[node] = []

    def add_node_collection(self, node: Any, collection: Sequence[str]) -> None:
        assert node in self.node2pending
        if self.collection is not None and list(collection) != self.collection:
            # a replacement of a crashed worker collected something else: it gets no items
            self.log(collection_diff(self.collection, collection, "the first workers", node_name(node)))
            shut_down(node)
            return
        self.node2collection[node] = list(collection)

    def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
        self.node2pending[node].remove(item_index)
        self.torn_down.discard(item_index)
        if is_shutting_down(node):
            return
        if self.pending:
            self._hand_out()
        elif len(self.node2pending[node]) < 2:
            shut_down(node)

    def mark_test_pending(self, item: str) -> None:
        assert self.collection is not None
        self.pending.insert(0, self.collection.index(item))
        self._hand_out()

    def remove_pending_tests_from_node(self, node: Any, indices: Sequence[int]) -> None:
        raise NotImplementedError("the share scheduler never steals items")

    def remove_node(self, node: Any) -> str | None:
        """Forget a worker that finished or died; a dead one's remaining items go to the live ones.
        Returns the item it was running when it died (xdist reports that one as crashed)."""
        pending = self.node2pending.pop(node)
        if not pending or self.collection is None:
            return None
        first = pending.pop(0)
        crashed = None if first in self.torn_down else self.collection[first]  # died after its teardown
        self.torn_down.discard(first)
        self.pending.extend(pending)
        self._hand_out()
        return crashed

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is not None:
            self._hand_out()  # a replacement worker came up: it may take unowned items
            return
        if not same_collections(self):
            self.log("**Different tests collected, aborting run**")
            return
        collection = self.collection = next(iter(self.node2collection.values()))
        self.index = {nodeid: i for i, nodeid in enumerate(collection)}
        owned: set[int] = set()
        for node in self.nodes:
            index = worker_index(node_input(node))
            if index is None:
                continue
            start, stop = share_bounds(len(collection), worker_count(node_input(node)), index)
            owned.update(range(start, stop))
            self._send(node, list(range(start, stop)))
        self.pending[:] = [i for i in range(len(collection)) if i not in owned]  # shares of absent workers
        self._hand_out()

    # ---------------------------------------------------------------- ours
    def teardown_reported(self, nodeid: str) -> None:
        """An item's teardown report reached the controller (`ShareController` tells): its worker sends
        `runtest_protocol_complete` next, and a worker killed in between was running no item."""
        index = self.index.get(nodeid)
        if index is not None:
            self.torn_down.add(index)

    def _hand_out(self) -> None:
        """Split the unowned items evenly over the live workers; shut down those with nothing left."""
        live = [node for node in self.nodes if not is_shutting_down(node) and node in self.node2collection]
        if self.pending and live:
            pending, self.pending[:] = list(self.pending), []
            for n, node in enumerate(live):
                start, stop = share_bounds(len(pending), len(live), n)
                self._send(node, pending[start:stop])
        for node in live:
            if not self.pending and len(self.node2pending[node]) < 2:
                shut_down(node)

    def _send(self, node: Any, indices: list[int]) -> None:
        if indices:
            self.node2pending[node].extend(indices)
            send_items(node, indices)


def collection_diff(reference: Sequence[str], other: Sequence[str], reference_id: str, other_id: str) -> str | None:
    """Why two workers' collections differ (a unified diff of their node ids), or None if they don't."""
    if list(reference) == list(other):
        return None
    diff = "\n".join(line.rstrip() for line in difflib.unified_diff(list(reference), list(other),
                                                                     fromfile=reference_id, tofile=other_id))
    return (f"Different tests were collected between {reference_id} and {other_id}; every worker must "
            f"collect the same benchmark items. The difference is:\n{diff}")


def same_collections(scheduler: ShareScheduling) -> bool:
    """Whether every worker collected the same items; if not, each difference is reported as a
    collection error (the run then ends with exit 2, running nothing)."""
    (first, reference), *others = sorted(scheduler.node2collection.items(), key=lambda entry: node_name(entry[0]))
    same = True
    for node, collection in others:
        diff = collection_diff(reference, collection, node_name(first), node_name(node))
        if diff:
            same = False
            scheduler.log(diff)
            scheduler.config.hook.pytest_collectreport(report=pytest.CollectReport(
                nodeid=node_name(node), outcome="failed", longrepr=diff, result=[]))
    return same
