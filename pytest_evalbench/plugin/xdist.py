"""xdist glue, registered only when pytest-xdist is active; public hooks only.

Workers hand their engine counters to the controller through `workeroutput`. With the share
scheduler (`ShareScheduling`, chosen through `pytest_xdist_make_scheduler` for `--dist load`,
xdist's default with `-n`, and `--dist worksteal`), every worker receives one fixed contiguous
share of the items up front and starts the LLM work of its whole share before its first test
(`SharePrefetch`), so the worker's engine always has work to keep `concurrency` requests in
flight; no item is run twice; a dead worker's remaining items go to the live workers.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from typing import Any

import pytest
from xdist.scheduler import LoadScheduling

from .collect import SESSION_KEY

STATS_OUTPUT = "evalbench_stats"
SHARES_INPUT = "evalbench_shares"
"""Set in `workerinput` by the controller when the share scheduler runs this session."""
SHARED_DISTS = ("load", "worksteal")


class WorkerHooks:
    """Registered on xdist workers: counters."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_sessionfinish(self) -> None:
        stats = self.config.stash[SESSION_KEY].close_engine()
        self.config.workeroutput[STATS_OUTPUT] = stats or {}  # type: ignore[attr-defined]


class ControllerHooks:
    """Registered on the xdist controller: add each finished worker's counters."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        self.config.stash[SESSION_KEY].stats.merge(getattr(node, "workeroutput", {}).get(STATS_OUTPUT, {}))


# ---------------------------------------------------------------------- fixed shares
def share_bounds(count: int, workers: int, index: int) -> tuple[int, int]:
    """The contiguous slice [start, stop) of `count` items that worker `index` of `workers` runs.

    The first `count % workers` shares hold one item more; the controller and every worker
    compute the same bounds from the same collection.
    """
    size, extra = divmod(count, workers)
    start = index * size + min(index, extra)
    return start, start + size + (1 if index < extra else 0)


def worker_index(workerinput: Mapping[str, Any]) -> int | None:
    """This worker's position among the workers xdist started (`gw3` -> 3); None for a replacement
    of a crashed worker (xdist numbers those past the initial count), which owns no share."""
    workerid = str(workerinput.get("workerid", ""))
    try:
        index = int(workerid.removeprefix("gw"))
    except ValueError:
        return None
    return index if 0 <= index < int(workerinput.get("workercount", 0)) else None


def worker_share(workerinput: Mapping[str, Any], max_cost: float | None, concurrency: int
                 ) -> tuple[float | None, int]:
    """This worker's part of the budget and of the requests in flight (at least one)."""
    workers = int(workerinput["workercount"])
    index = worker_index(workerinput)
    start, stop = share_bounds(concurrency, workers, index if index is not None else workers - 1)
    return (max_cost / workers if max_cost is not None else None), max(1, stop - start)


class ShareScheduling(LoadScheduling):
    """xdist's load scheduler, but every initial worker gets its whole contiguous share at once.

    A worker is told to shut down only when it holds its last item, so while any worker is alive
    the items of one that died (all but the crashing one, which xdist reports) can be handed to it.
    """

    collection: list[str] | None

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is not None:
            self._hand_out()
            return
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        collection: list[str] = next(iter(self.node2collection.values()))
        self.collection = collection
        count = len(collection)
        owned: set[int] = set()
        for node in self.nodes:
            index = worker_index(node.workerinput)
            if index is None:
                continue
            start, stop = share_bounds(count, self.numnodes, index)
            owned.update(range(start, stop))
            self._send(node, list(range(start, stop)))
        self.pending[:] = [i for i in range(count) if i not in owned]  # shares of workers that never came up
        self._hand_out()

    def check_schedule(self, node: Any, duration: float = 0) -> None:
        if node.shutting_down:
            return
        if self.pending:
            self._hand_out()
        elif len(self.node2pending[node]) < 2:
            node.shutdown()

    def _hand_out(self) -> None:
        """Split the unowned items evenly over the live workers; shut down those with nothing left."""
        live = [node for node in self.nodes if not node.shutting_down]
        if self.pending and live:
            pending, self.pending[:] = list(self.pending), []
            for n, node in enumerate(live):
                start, stop = share_bounds(len(pending), len(live), n)
                self._send(node, pending[start:stop])
        for node in live:
            if not self.pending and len(self.node2pending[node]) < 2:
                node.shutdown()

    def _send(self, node: Any, indices: list[int]) -> None:
        if indices:
            self.node2pending[node].extend(indices)
            node.send_runtest_some(indices)


class ShareController:
    """Controller side of the share scheduler: tells workers their share and makes the scheduler."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[SHARES_INPUT] = True

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        return ShareScheduling(config, log)


class SharePrefetch:
    """Worker side: start the LLM work of this worker's whole share before its first test.

    Items handed over from a dead worker are not prefetched: they start when they run, so an item
    that kills its process takes at most itself down with the next worker.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        workerinput: Mapping[str, Any] = self.config.workerinput  # type: ignore[attr-defined]
        index = worker_index(workerinput)
        if index is None or session.testsfailed or self.config.option.collectonly:
            return
        start, stop = share_bounds(len(session.items), int(workerinput["workercount"]), index)
        self.config.stash[SESSION_KEY].schedule(session.items[start:stop], start)


def uses_shares(config: pytest.Config) -> bool:
    return str(config.getoption("dist", "no")) in SHARED_DISTS


class SelectionHooks:
    """Registered on the xdist controller, which collects nothing itself: learn the selected items
    from each worker's collection (taken after `-k`/`-m`/`--lf` deselection) and count an item
    whose worker died as such."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        if not self.config.option.collectonly:
            self.config.stash[SESSION_KEY].selected(list(ids))

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        self.config.stash[SESSION_KEY].worker_died(report)


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


def register(config: pytest.Config) -> None:
    """Add the worker or controller hooks when xdist is in use."""
    if hasattr(config, "workerinput"):
        config.pluginmanager.register(WorkerHooks(config), "evalbench-xdist-worker")
        config.pluginmanager.register(OrphanWatchdog().start(), "evalbench-xdist-watchdog")
        if config.workerinput.get(SHARES_INPUT):
            config.pluginmanager.register(SharePrefetch(config), "evalbench-xdist-prefetch")
    elif (config.pluginmanager.hasplugin("xdist") or config.pluginmanager.hasplugin("xdist.plugin")) and getattr(
            config.option, "numprocesses", None):  # "xdist.plugin": loaded with -p when autoload is off
        config.pluginmanager.register(ControllerHooks(config), "evalbench-xdist-controller")
        config.pluginmanager.register(SelectionHooks(config), "evalbench-xdist-selection")
        if uses_shares(config):
            config.pluginmanager.register(ShareController(config), "evalbench-xdist-shares")
