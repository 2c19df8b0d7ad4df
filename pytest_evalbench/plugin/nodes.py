"""Collection nodes: a benchmark data file becomes one test item per case.

pytest loads this module in every run of a project that has the plugin installed: what only a
benchmark run needs is imported inside the functions that run with `--benchmark`.

Items are `pytest.Function`s whose test body only reports the outcome the core decided, so the
LLM work happens in fixtures (ERROR on infrastructure problems, FAILED on quality misses) and
users can override `evalbench_*` fixtures like any other.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import pytest

from pytest_evalbench.plugin._compat import ShortErrorTraceback, add_k_keywords, fix_structured_nodeid, message_repr
from pytest_evalbench.plugin.memory_bound import file_fixture_info


class CaseSource(Protocol):
    """What collection needs of the session: the cases of one data file. Collection names this
    protocol, not the session class, so the nodes module imports nothing of the plugin above it."""

    def cases_for(self, path: Path) -> list[Any]:
        """The cases of one data file of the selected benchmark."""


PLUGIN_KEY: pytest.StashKey[object] = pytest.StashKey()
"""The plugin object in `config.stash` (`session.plugin_of` gives it typed). Defined here, in a module
loaded with the plugin, so the key is one object for the whole process even when pytester's in-process
runs drop lazily imported modules."""
SOURCE_KEY: pytest.StashKey[CaseSource] = pytest.StashKey()
"""Where collection gets the cases (the session's `Selection`)."""


class Decided(NamedTuple):
    """What the kind decided for an item, from its setup until its teardown (`bookkeeping.py`)."""

    outcome: Any
    """The kind's outcome (a `kinds.Outcome`)."""
    record: dict[str, Any] | None
    """The item's record (JSON) until its teardown report carries it; None for a sample not drawn."""


CASE_DECIDED: pytest.StashKey[Decided] = pytest.StashKey()
"""An item's `Decided`, one stash entry: pytest's own entries of an item's stash fit the smallest
dictionary, and two of ours would double its table for the rest of the session (each item keeps
its stash to the end)."""


def check_case(evalbench_record: dict[str, Any]) -> None:
    """The test body: it needs the item's record (the LLM work, done in setup); `CaseItem.runtest`
    then reports the outcome."""


class CaseItem(ShortErrorTraceback):
    """One benchmark case (scenario × target × sample, or a dataset case)."""

    def __init__(self, *, case: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        add_k_keywords(self, case.keywords)  # what -k matches
        fix_structured_nodeid(self)  # --lf/--nf/--sw on pytest >= 9.2

    def reportinfo(self) -> tuple[Any, int | None, str]:
        """The data file, line 0: pytest reports a skip raised while the item gets its record (in the
        judged-row hook or a conftest fixture) at the item's location, which needs a line number."""
        return self.path, 0, self.name

    def runtest(self) -> None:
        """Run the test body, then fail with the core's message when the case's outcome is `failed`
        (xfail when its judge is unreliable: the failure is shown but cannot fail the build)."""
        super().runtest()
        outcome = self.stash[CASE_DECIDED].outcome
        if outcome.status == "failed":
            from pytest_evalbench.base.safe_text import terminal

            message = terminal(outcome.message)  # the judge's justification and the last exchange
            if not outcome.convicts:
                pytest.xfail(message)
            pytest.fail(message, pytrace=False)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> Any:  # type: ignore[override]  # as Function's
        """A failed case reports its message alone, as pytest prints any `pytrace=False` failure, but
        without pytest walking the traceback through its runner's frames to print none of them."""
        decided = self.stash.get(CASE_DECIDED, None)
        if decided is not None and decided.outcome.status == "failed" and isinstance(excinfo.value, pytest.fail.Exception):
            report = message_repr(self.config, excinfo)
            if report is not None:
                return report
        return super().repr_failure(excinfo)


class CaseFile(pytest.File):
    """A data file of the selected benchmark (scenarios.json or a dataset JSONL)."""

    def collect(self) -> Iterator[CaseItem]:
        from pytest_evalbench.base.errors import EvalbenchError
        from pytest_evalbench.base.safe_text import terminal

        session = self.config.stash[SOURCE_KEY]
        try:
            cases = session.cases_for(self.path)
        except EvalbenchError as exc:
            raise self.CollectError(terminal(str(exc))) from None  # it may quote names from the input files
        info = file_fixture_info(self, check_case)
        for case in cases:
            yield CaseItem.from_parent(self, name=case.name, callobj=check_case, case=case, fixtureinfo=info,
                                       keywords=dict(case.keywords))


class BrokenBenchmark(pytest.File):
    """Stands for a benchmark whose definition cannot be loaded, so the error is reported once."""

    def __init__(self, *, message: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.message = message

    def collect(self) -> Iterator[pytest.Item]:
        from pytest_evalbench.base.safe_text import terminal

        raise self.CollectError(terminal(self.message))  # it may quote names from benchmark.yaml
