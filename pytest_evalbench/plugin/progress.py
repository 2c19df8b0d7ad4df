"""The live progress line and the test status letters of our items (a role of the session; `session.py`
keeps the hooks; `render/progress.py` draws the line)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_evalbench.plugin._compat import collect_only, is_xdist_controller, read, terminal_writer, xfail_reason
from pytest_evalbench.plugin.bookkeeping import STATUS_ATTR, Bookkeeping
from pytest_evalbench.plugin.nodes import CaseItem
from pytest_evalbench.plugin.selection import Selection
from pytest_evalbench.render.progress import Counts, ProgressReporter
from pytest_evalbench.render.views import JUDGE_UNRELIABLE


class Progress:
    """Counts finished items and redraws the progress line (rate-limited)."""

    def __init__(self, config: pytest.Config, selection: Selection, books: Bookkeeping) -> None:
        self.config = config
        self.selection = selection
        self.books = books
        self.done = 0  # teardown reports of cases: one per finished item
        self.total = 0
        self.progress: ProgressReporter | None = None

    def collection_finish(self, session: pytest.Session) -> None:
        """Start the progress line once the number of items is known."""
        self.total = sum(1 for item in session.items if isinstance(item, CaseItem)) or len(session.items)
        found = terminal_writer(self.config)
        every = self.config.getoption("evalbench_progress_every")
        if found is None or collect_only(self.config) or every < 0:
            return
        writer, isatty = found
        live = isatty and self.config.getoption("verbose") <= 0 and every > 0
        self.progress = ProgressReporter(writer, live=live, every=every)

    def teststatus(self, report: pytest.TestReport) -> Any:
        """With the live progress line, our items print no letters (the line counts them instead);
        with -v a failure of an unreliable judge reads `XFAIL (judge unreliable)`, its documented status."""
        if report.when != "call" or not self.selection.is_case(report.nodeid):
            return None
        if self.progress is not None and self.progress.live:
            return report.outcome, "", ""
        if xfail_reason(report) is not None and read(report, STATUS_ATTR) == "failed":
            return "xfailed", "x", f"XFAIL ({JUDGE_UNRELIABLE})"
        return None

    def track(self, report: pytest.TestReport) -> None:
        if report.when != "teardown" or self.progress is None or not self.selection.is_case(report.nodeid):
            return
        self.done += 1
        self.redraw()

    def redraw(self) -> None:
        """Redraw the line if it is due (also while an item waits: `Scheduler.heartbeat`)."""
        if self.progress is None or not self.progress.due(self.done, max(self.total, self.done)):
            return  # most items: the line is redrawn at most every 0.2 s (every `every` s in CI logs)
        counts = Counts(done=self.done, total=max(self.total, self.done),
                        failed=len(self.books.failed), errored=len(self.books.errors))
        run = self.selection.loaded_run()
        if run is not None and not is_xdist_controller(self.config):
            engine = run.engine
            counts.in_flight, counts.requests, counts.cache_hits = (engine.in_flight, engine.stats.requests,
                                                                    engine.stats.cache_hits)
            counts.tokens = sum(u.input_tokens + u.output_tokens for u in engine.stats.usage.values())
            counts.cost = engine.stats.spent
            counts.batches = engine.batches.progress()
        self.progress.update(counts)

    def finish(self) -> None:
        """Leave the live line on screen and move below it."""
        if self.progress is not None:
            self.progress.finish()
