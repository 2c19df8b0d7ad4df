"""xdist glue, registered only when pytest-xdist distributes: public hooks and xdist's public scheduler
protocol (`xdist_scheduler.py`); what is undocumented goes through `_compat`.

Workers hand their engine counters to the controller through `workeroutput`. With the share scheduler
(`ShareScheduling`, our implementation of `xdist.scheduler.protocol.Scheduling`, chosen through
`pytest_xdist_make_scheduler` for `--dist load`, xdist's default with `-n`, and `--dist worksteal`), every
worker receives one fixed contiguous share of the items up front and starts the LLM work of its whole
share when its first item runs (`SharePrefetch`), so the worker's engine always has work to keep its part
of `concurrency` requests in flight; no item is run twice; a dead worker's remaining items go to the live
workers. A worker whose controller died stops at once (`OrphanWatchdog`).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_evalbench.plugin._compat import (
    collect_only,
    is_worker,
    node_input,
    put_worker_output,
    worker_count,
    worker_input,
    worker_output,
    xdist_mode,
)
from pytest_evalbench.plugin.options import (
    BUDGET_INPUT,
    FILES_INPUT,
    SHARED_DISTS,
    SHARES_INPUT,
    STATS_OUTPUT,
    share_bounds,
    worker_index,
)
from pytest_evalbench.plugin.session import plugin_of

if TYPE_CHECKING:
    from pytest_evalbench.plugin.xdist_scheduler import ShareScheduling


class WorkerHooks:
    """Registered on xdist workers: counters."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_sessionfinish(self) -> None:
        stats = plugin_of(self.config).scheduler.close()
        put_worker_output(self.config, STATS_OUTPUT, stats or {})


class ControllerHooks:
    """Registered on the xdist controller: add each finished worker's counters."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        plugin = plugin_of(self.config)
        plugin.results.stats.merge(worker_output(node).get(STATS_OUTPUT, {}))
        plugin.reporting.import_store_early()  # a worker is done: its core is free for the end's imports


class ShareController:
    """Controller side of the share scheduler: tells workers their share and makes the scheduler."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.scheduling: ShareScheduling | None = None

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node_input(node)[SHARES_INPUT] = True

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        from pytest_evalbench.plugin.xdist_scheduler import ShareScheduling  # the controller's alone

        self.scheduling = ShareScheduling(config, log)
        return self.scheduling

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A teardown report in: a worker that dies before its next item was running none (otherwise
        xdist would count a scored item as crashed)."""
        if report.when == "teardown" and self.scheduling is not None:
            self.scheduling.teardown_reported(report.nodeid)


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
        share = self._share(item.session)
        if share is not None:
            start, stop = share
            plugin_of(self.config).scheduler.start(item.session.items[start:stop], start)

    def _share(self, session: pytest.Session) -> tuple[int, int] | None:
        """[start, stop) of this worker's share of the items; None for a replacement worker."""
        workerinput = worker_input(self.config)
        assert workerinput is not None  # registered on workers only
        index = worker_index(workerinput)
        return None if index is None else share_bounds(len(session.items), worker_count(workerinput), index)


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
        plugin_of(self.config).scheduler.start(items[first:first + count], first)


class WholeFileController:
    """Controller side of `--dist loadfile`/`loadscope`: tells workers that each data file is theirs."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node_input(node)[FILES_INPUT] = True


class BudgetController:
    """Controller side of `--evalbench-max-cost`: one ledger file for the session, which every
    worker reserves against (`llm.limits.Budget`), so the workers together keep the one limit."""

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
            plugin_of(self.config).books.selected(list(ids))

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        plugin_of(self.config).books.worker_died(report)


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
