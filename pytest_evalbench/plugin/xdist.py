"""xdist glue, registered only when pytest-xdist is active; public hooks only.

Workers start the LLM work of every item xdist assigned to them ahead of the test loop and
hand their engine counters to the controller through `workeroutput`.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import pytest

from .session import SESSION_KEY

STATS_OUTPUT = "evalbench_stats"


class WorkerHooks:
    """Registered on xdist workers: prefetch and counters."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._positions: dict[pytest.Item, int] | None = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """Start this item and the next one (xdist gives no public view of a worker's queue)."""
        session = self.config.stash[SESSION_KEY]
        items = item.session.items
        if self._positions is None:
            self._positions = {it: i for i, it in enumerate(items)}
        for it in (item, nextitem):
            if it is not None:
                session.schedule([it], self._positions[it])

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
    elif config.pluginmanager.hasplugin("xdist") and getattr(config.option, "numprocesses", None):
        config.pluginmanager.register(ControllerHooks(config), "evalbench-xdist-controller")
        config.pluginmanager.register(SelectionHooks(config), "evalbench-xdist-selection")
