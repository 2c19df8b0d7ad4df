"""xdist glue, registered only when pytest-xdist distributes; public hooks and xdist's public
scheduler protocol only (no private attribute of pytest or xdist).

Workers hand their engine counters to the controller through `workeroutput`. With the share
scheduler (`ShareScheduling`, our own implementation of `xdist.scheduler.protocol.Scheduling`,
chosen through `pytest_xdist_make_scheduler` for `--dist load`, xdist's default with `-n`, and
`--dist worksteal`), every worker receives one fixed contiguous share of the items up front and
starts the LLM work of its whole share when its first item runs (`SharePrefetch`), so the worker's
engine always has work to keep its part of `concurrency` requests in flight; no item is run twice;
a dead worker's remaining items go to the live workers.
"""

from __future__ import annotations

import difflib
import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from ._compat import (
    collect_only,
    is_shutting_down,
    is_worker,
    node_input,
    node_name,
    put_worker_output,
    scheduler_log,
    send_items,
    shut_down,
    worker_count,
    worker_input,
    worker_output,
    xdist_mode,
)
from .session import session_of
from .workers import BUDGET_INPUT, FILES_INPUT, SHARED_DISTS, SHARES_INPUT, STATS_OUTPUT, share_bounds, worker_index


class WorkerHooks:
    """Registered on xdist workers: counters."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_sessionfinish(self) -> None:
        stats = session_of(self.config).scheduler.close()
        put_worker_output(self.config, STATS_OUTPUT, stats or {})


class ControllerHooks:
    """Registered on the xdist controller: add each finished worker's counters."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        session_of(self.config).results.stats.merge(worker_output(node).get(STATS_OUTPUT, {}))


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
        self._check(node)

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
        crashed = self.collection[pending.pop(0)]
        self.pending.extend(pending)
        self._hand_out()
        return crashed

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is not None:
            self._hand_out()  # a replacement worker came up: it may take unowned items
            return
        if not self._same_collections():
            self.log("**Different tests collected, aborting run**")
            return
        collection = self.collection = next(iter(self.node2collection.values()))
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
    def _same_collections(self) -> bool:
        """Whether every worker collected the same items; if not, each difference is reported as a
        collection error (the run then ends with exit 2, running nothing)."""
        (first, reference), *others = sorted(self.node2collection.items(), key=lambda entry: node_name(entry[0]))
        same = True
        for node, collection in others:
            diff = collection_diff(reference, collection, node_name(first), node_name(node))
            if diff:
                same = False
                self.log(diff)
                self.config.hook.pytest_collectreport(report=pytest.CollectReport(
                    nodeid=node_name(node), outcome="failed", longrepr=diff, result=[]))
        return same

    def _check(self, node: Any) -> None:
        if is_shutting_down(node):
            return
        if self.pending:
            self._hand_out()
        elif len(self.node2pending[node]) < 2:
            shut_down(node)

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


class ShareController:
    """Controller side of the share scheduler: tells workers their share and makes the scheduler."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node_input(node)[SHARES_INPUT] = True

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        return ShareScheduling(config, log)


class SharePrefetch:
    """Worker side: start the LLM work of this worker's whole share when its first item is about
    to run, that is once the controller has checked that every worker collected the same items and
    sent the shares (a mismatch then costs no LLM call).

    Items handed over from a dead worker are not prefetched: they start when they run, so an item
    that kills its process takes at most itself down with the next worker.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.started = False

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> None:
        if self.started:
            return
        self.started = True
        session = item.session
        workerinput = worker_input(self.config)
        assert workerinput is not None  # registered on workers only
        index = worker_index(workerinput)
        if index is None:
            return
        start, stop = share_bounds(len(session.items), worker_count(workerinput), index)
        session_of(self.config).scheduler.start(session.items[start:stop], start)


WHOLE_FILE_DISTS = ("loadfile", "loadscope")
"""xdist modes that send every item of a data file to one worker (a case's scope is its file)."""


class FilePrefetch:
    """Worker side for `--dist loadfile`/`loadscope`: xdist sends all items of a data file to one
    worker, so when a file's first item runs this worker starts the LLM work of the whole file
    (otherwise it would run one item at a time). A replacement of a crashed worker, which gets
    only the remaining items, starts each when it runs."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.started: set[Path] = set()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> None:
        if item.path in self.started or worker_index(worker_input(self.config) or {}) is None:
            return
        self.started.add(item.path)
        items = item.session.items
        first = next(i for i, other in enumerate(items) if other.path == item.path)
        count = sum(1 for other in items if other.path == item.path)
        session_of(self.config).scheduler.start(items[first:first + count], first)


class WholeFileController:
    """Controller side of `--dist loadfile`/`loadscope`: tells workers that each data file is theirs."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node_input(node)[FILES_INPUT] = True


class BudgetController:
    """Controller side of `--evalbench-max-cost`: one ledger file for the session, which every
    worker reserves against (llm/budget.py), so the workers together keep the one limit."""

    def __init__(self) -> None:
        import tempfile

        self.directory = Path(tempfile.mkdtemp(prefix="evalbench-budget-"))
        self.ledger = self.directory / "ledger.json"

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node_input(node)[BUDGET_INPUT] = str(self.ledger)

    def pytest_unconfigure(self) -> None:
        import shutil

        shutil.rmtree(self.directory, ignore_errors=True)


def uses_shares(config: pytest.Config) -> bool:
    return xdist_mode(config)[0] in SHARED_DISTS


class SelectionHooks:
    """Registered on the xdist controller, which collects nothing itself: learn the selected items
    from each worker's collection (taken after `-k`/`-m`/`--lf` deselection) and count an item
    whose worker died as such."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if not collect_only(self.config):
            session_of(self.config).outcomes.selected(list(ids))

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        session_of(self.config).outcomes.worker_died(report)


ORPHAN_EXIT = 3
"""Exit status of a worker that stopped because its controller is gone."""


def controller_alive(pid: int) -> bool:
    """Whether the process that started this worker still runs (POSIX: we were not re-parented)."""
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        import ctypes

        kernel32 = ctypes.windll.kernel32
        handle = kernel32.OpenProcess(0x00100000, False, pid)  # SYNCHRONIZE
        if not handle:
            return False
        try:
            return bool(kernel32.WaitForSingleObject(handle, 0) == 0x102)  # WAIT_TIMEOUT: still running
        finally:
            kernel32.CloseHandle(handle)
    return os.getppid() == pid


class OrphanWatchdog:
    """Registered on xdist workers: a worker whose controller died (kill -9, OOM) exits at once
    instead of paying for LLM calls whose results nobody can receive."""

    def __init__(self, interval: float = 0.5) -> None:
        self.parent = os.getppid()
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="evalbench-orphan-watchdog", daemon=True)

    def start(self) -> OrphanWatchdog:
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            if not controller_alive(self.parent):
                sys.stderr.write(f"evalbench: xdist controller (pid {self.parent}) is gone; worker stops\n")
                sys.stderr.flush()
                os._exit(ORPHAN_EXIT)

    def pytest_unconfigure(self) -> None:
        self._stop.set()


def distributes(config: pytest.Config) -> bool:
    """Whether this process is an xdist controller that hands items to workers: xdist's own
    condition (a `--dist` mode and `--tx` nodes, which `-n N` sets), read through its options, so it
    holds however the plugin was loaded (`-p xdist.plugin` registers it under another name)."""
    dist, has_nodes = xdist_mode(config)
    return not is_worker(config) and not collect_only(config) and dist != "no" and has_nodes


def register(config: pytest.Config) -> None:
    """Add the worker or controller hooks when xdist is in use."""
    workerinput = worker_input(config)
    if workerinput is not None:
        config.pluginmanager.register(WorkerHooks(config), "evalbench-xdist-worker")
        config.pluginmanager.register(OrphanWatchdog().start(), "evalbench-xdist-watchdog")
        if workerinput.get(SHARES_INPUT):
            config.pluginmanager.register(SharePrefetch(config), "evalbench-xdist-prefetch")
        elif workerinput.get(FILES_INPUT):
            config.pluginmanager.register(FilePrefetch(config), "evalbench-xdist-prefetch")
    elif distributes(config):
        config.pluginmanager.register(ControllerHooks(config), "evalbench-xdist-controller")
        config.pluginmanager.register(SelectionHooks(config), "evalbench-xdist-selection")
        if config.getoption("evalbench_max_cost") is not None:
            config.pluginmanager.register(BudgetController(), "evalbench-xdist-budget")
        if uses_shares(config):
            config.pluginmanager.register(ShareController(config), "evalbench-xdist-shares")
        elif xdist_mode(config)[0] in WHOLE_FILE_DISTS:
            config.pluginmanager.register(WholeFileController(), "evalbench-xdist-files")
