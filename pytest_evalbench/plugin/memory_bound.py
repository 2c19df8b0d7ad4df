"""What keeps a benchmark run within its memory bound: peak RSS at 100,000 items within 1.25 x
pytest's floor for as many bare items (figure 4 of `tests/perf/targets.py`; the figures, with and
without each of these, are in docs/performance.md).

- Every item of a data file gets the same fixture closure, computed once for the file, as pytest's
  own parametrization shares one per test function; pytest would otherwise compute and keep one
  per item.
- Our items' passed setup and teardown reports are not kept until the session ends. pytest's
  terminal reporter keeps every report of the session, those only to look for teardown output
  when it prints its summaries; ours hold none to print. Each is taken off the reporter's list
  once every plugin has seen it; the call report stays, and so does any report with teardown output.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pytest_evalbench.plugin._compat import fixture_info, has_teardown_output, passed_phase_reports


def file_fixture_info(file: pytest.File, func: Callable[..., Any]) -> Any:
    """The fixture closure every item of `file` with test function `func` shares."""
    return fixture_info(file, func)


class QuietReports:
    """Takes our items' quiet setup/teardown reports off the terminal reporter's list."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._kept: list[Any] | None = None

    def drop(self, report: pytest.TestReport) -> None:
        """Every plugin has seen this setup or teardown report of one of our items: drop it when it
        passed without teardown output and is the last report the terminal reporter kept."""
        kept = self._kept
        if kept is None:
            found = passed_phase_reports(self.config)
            kept = self._kept = found if found is not None else []  # the reporter's own list, even while empty
        if kept and kept[-1] is report and report.passed and not has_teardown_output(report):
            kept.pop()
