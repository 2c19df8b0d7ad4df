"""`--evalbench-estimate` in pytest: items are collected and selected as for a run (`-k`, node ids,
`--evalbench-target`, shards), then the test loop stops before the first item, as `--collect-only`
does (`pytest_runtestloop` returns True), and the terminal summary prints the estimate. Nothing is
called and nothing is written (no last_run.json, no result or cache file). Under xdist the estimate
runs in the controller alone (`_compat.single_process`), so it is printed once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_evalbench.errors import EvalbenchError
from pytest_evalbench.plugin.nodes import CaseItem
from pytest_evalbench.plugin.selection import Selection
from pytest_evalbench.sanitize import terminal

if TYPE_CHECKING:
    from pytest_evalbench.estimate import Estimate


def wanted(config: pytest.Config) -> bool:
    return bool(config.getoption("evalbench_estimate", False))


class EstimateMode:
    """Plans the selected items' calls and prints the estimate (controller or single process)."""

    def __init__(self, selection: Selection) -> None:
        self.selection = selection
        self.lines: list[str] = []

    def run(self, session: pytest.Session) -> bool:
        """Plan every selected item; the loop stops here (True), so no item runs."""
        from pytest_evalbench.estimate import Estimable, Expectations, estimate, render  # only with --evalbench-estimate

        selection = self.selection
        kind = selection.kind
        if not isinstance(kind, Estimable):
            raise pytest.UsageError("--evalbench-estimate: this kind of benchmark cannot be estimated")
        run = selection.run
        expect = Expectations(run.engine.cache.directory if run.settings.cache_mode != "off" else None, run.engine)
        try:
            result: Estimate = estimate(kind.plan_calls(item.case, expect)
                                        for item in session.items if isinstance(item, CaseItem))
        except EvalbenchError as exc:
            raise pytest.UsageError(terminal(str(exc))) from None
        self.lines = render(result, run.engine.prices, run.settings.engine, expect.entries)
        return True

    def summary(self, terminalreporter: Any) -> None:
        if not self.lines:
            return  # collection failed, or --collect-only: nothing was planned
        terminalreporter.section("evalbench estimate")
        for line in self.lines:
            terminalreporter.write_line(terminal(line))
