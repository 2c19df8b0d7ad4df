"""xdist glue, registered only when pytest-xdist is active; public hooks only.

Workers start the LLM work of every item xdist assigned to them ahead of the test loop and
hand their engine counters to the controller through `workeroutput`.
"""

from __future__ import annotations

from typing import Any

import pytest

from .collect import SESSION_KEY

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


def register(config: pytest.Config) -> None:
    """Add the worker or controller hooks when xdist is in use."""
    if hasattr(config, "workerinput"):
        config.pluginmanager.register(WorkerHooks(config), "evalbench-xdist-worker")
    elif config.pluginmanager.hasplugin("xdist") and getattr(config.option, "numprocesses", None):
        config.pluginmanager.register(ControllerHooks(config), "evalbench-xdist-controller")
