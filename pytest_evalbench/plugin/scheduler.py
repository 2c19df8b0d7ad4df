"""The one place the plugin starts LLM work (a role of the session; `session.py` keeps the hooks).

Every item's pipeline (`kind.run_item`) reaches the engine through `Scheduler`: `start` prefetches a
run of items (a single process before the loop, an xdist worker's share or data file when its first
item runs), `wait` is what an item's `evalbench_record` fixture blocks on (submitting the item if
nothing prefetched it), `release` forgets a finished item, `close` stops the engine.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from pytest_evalbench.kinds.protocol import AnyKind
from pytest_evalbench.plugin.nodes import CaseItem

if TYPE_CHECKING:
    from pytest_evalbench.kinds.run import BenchmarkRun


BEAT = 1.0
"""Seconds between two redraws of the progress line while an item waits for its LLM work."""


class RunSource(Protocol):
    """What the scheduler needs of the session: the run (its engine) and the benchmark's kind."""

    @property
    def run(self) -> BenchmarkRun: ...

    @property
    def kind(self) -> AnyKind: ...

    def loaded_run(self) -> BenchmarkRun | None:
        """The run if it was loaded (an engine may be running), else None (nothing to stop)."""


class Scheduler:
    """Starts, awaits, releases and stops the LLM work of this process's items."""

    def __init__(self, source: RunSource, heartbeat: Callable[[], None] | None = None) -> None:
        self.source = source
        self.heartbeat = heartbeat
        """Called about every `BEAT` seconds while an item waits (the progress line stays current while
        provider batches take minutes)."""

    def start(self, items: Sequence[pytest.Item], first: int = 0) -> None:
        """Start the LLM work of these items, earlier positions first."""
        self.source.kind.expect_cases([item.case for item in items if isinstance(item, CaseItem)])
        for position, item in enumerate(items, start=first):
            if isinstance(item, CaseItem):
                self.source.run.engine.prefetch(item.nodeid, self._pipeline(item), position)

    def wait(self, item: CaseItem) -> Any:
        """The item's typed record: its pipeline's result (usually prefetched: priority unused). In a
        replay the engine's loop runs while an item waits, never beside the test loop (`Engine.awaited`)."""
        self.source.kind.expect_cases([item.case])
        engine = self.source.run.engine
        future = engine.submit(item.nodeid, self._pipeline(item), 0)
        awaited = engine.awaited(future)
        beat = None if self.heartbeat is None else BEAT
        while concurrent.futures.wait(awaited, timeout=beat).not_done and self.heartbeat is not None:
            self.heartbeat()
        return future.result()

    def release(self, nodeid: str) -> None:
        """The item is done: nothing of it stays in the engine."""
        run = self.source.loaded_run()
        if run is not None:
            run.engine.release(nodeid)

    def close(self) -> dict[str, Any] | None:
        """Stop this process's engine; its counters, or None if it never started."""
        run = self.source.loaded_run()
        if run is None:
            return None
        run.engine.close()
        return run.engine.stats.to_json()

    def _pipeline(self, item: CaseItem) -> Callable[[], Any]:
        case = item.case
        kind = self.source.kind
        return lambda: kind.run_item(case)
