"""Collection nodes: a benchmark data file becomes one test item per case.

Items are `pytest.Function`s whose test body only reports the outcome the core decided, so the
LLM work happens in fixtures (ERROR on infrastructure problems, FAILED on quality misses) and
users can override `evalbench_*` fixtures like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from ..errors import EvalbenchError
from ..sanitize import terminal
from ._compat import (
    OneLineErrors,
    add_k_keywords,
    fix_structured_nodeid,
    fixture_info,
    plain_call,
    plain_fixture,
    share_location,
    skips_at_item,
)


class CaseSource(Protocol):
    """What collection needs of the session: the cases of one data file. Collection names this
    protocol, not the session class, so the nodes module imports nothing of the plugin above it."""

    def cases_for(self, path: Path) -> list[Any]:
        """The cases of one data file of the selected benchmark."""


SESSION_KEY: pytest.StashKey[object] = pytest.StashKey()
"""The session object in `config.stash` (`session.session_of` gives it typed). Defined here, in a module
loaded with the plugin, so the key is one object for the whole process even when pytester's in-process
runs drop lazily imported modules."""
SOURCE_KEY: pytest.StashKey[CaseSource] = pytest.StashKey()
"""Where collection gets the cases (the session's `Selection`)."""
RECORD_KEY: pytest.StashKey[Callable[[CaseItem], dict[str, Any]]] = pytest.StashKey()
"""What the `evalbench_record` fixture returns for an item (`Outcomes.record_for`): items whose file
has no fixture but the plugin's own call it directly (`CaseFile.direct_record`)."""
FIXTURES_MODULE = __name__.rpartition(".")[0] + ".fixtures"
"""Where the plugin's `evalbench_record` is defined (a definition elsewhere overrides it)."""


def check_case(evalbench_record: dict[str, Any]) -> None:
    """The test body: it needs the item's record (the LLM work, done in setup); `CaseItem.runtest`
    then reports the outcome. No `request` argument: pytest builds a fixture definition (with
    `inspect.signature`) for every use of `request`, per item."""


class CaseItem(OneLineErrors):
    """One benchmark case (scenario × target × sample, or a dataset case)."""

    one_line = (EvalbenchError,)  # their one-line message replaces pytest's traceback (make_report)
    __slots__ = ("case", "case_outcome", "case_record")
    """The case, its record (JSON) and the kind's outcome while the item runs (`outcomes.py` sets and
    clears the last two). Slots, not stash keys: pytest's own keys fill the stash's smallest table
    (5 entries), one more resizes it for the whole session (~130 bytes per item, 13 MB at 100,000)."""

    def __init__(self, *, case: Any, location_of: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if location_of is not None:  # the file's relative path, as pytest computes it for every item
            share_location(self, location_of)
        self.case = case
        self.case_record: Any = None
        self.case_outcome: Any = None
        add_k_keywords(self, case.keywords)  # what -k matches
        fix_structured_nodeid(self)  # --lf/--nf/--sw on pytest >= 9.2

    def setup(self) -> None:
        """Fill the test body's argument. When nothing overrides or adds to the plugin's fixtures for
        this file (decided at collection), call what `evalbench_record` would return directly: pytest's
        fixture request, definition and finalizers cost more per item than the rest of the setup.
        The same exceptions end the setup (an ERROR), so reports are the same."""
        record_for = self.parent.direct_record if isinstance(self.parent, CaseFile) else None
        if record_for is None:
            super().setup()
            return
        with skips_at_item():
            self.funcargs["evalbench_record"] = record_for(self)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        """The data file, line 0: pytest reports a skip raised while the item gets its record (in the
        judged-row hook or a conftest fixture) at the item's location, which needs a line number."""
        return self.path, 0, self.name

    def runtest(self) -> None:
        """Run the test body (unless it would do nothing: `CaseFile.direct_call`), then fail with the
        core's message when the case's outcome is `failed` (xfail when its judge is unreliable: the
        failure is shown but cannot fail the build)."""
        if not (isinstance(self.parent, CaseFile) and self.parent.direct_call):
            super().runtest()
        outcome = self.case_outcome
        if outcome.status == "failed":
            message = terminal(outcome.message)  # the judge's justification and the last exchange
            if not outcome.convicts:
                pytest.xfail(message)
            pytest.fail(message, pytrace=False)


class CaseFile(pytest.File):
    """A data file of the selected benchmark (scenarios.json or a dataset JSONL)."""

    direct_record: Callable[[CaseItem], dict[str, Any]] | None = None
    """Set at collection when this file's items may get their record without pytest's fixture
    machinery (`_compat.plain_fixture`); None: through the `evalbench_record` fixture."""
    direct_call = False
    """Set at collection when this file's items get their record directly and nothing implements
    `pytest_pyfunc_call` but pytest (`_compat.plain_call`): `check_case`, which does nothing with the
    record it is given, is not called."""

    def collect(self) -> Iterator[CaseItem]:
        session = self.config.stash[SOURCE_KEY]
        try:
            cases = session.cases_for(self.path)
        except EvalbenchError as exc:
            raise self.CollectError(terminal(str(exc))) from None  # it may quote names from the input files
        location: str | None = None
        info = fixture_info(self, check_case)  # one fixture closure for the file's items, as parametrize shares one
        if plain_fixture(self.config, info, "evalbench_record", FIXTURES_MODULE):
            self.direct_record = self.config.stash.get(RECORD_KEY, None)
            self.direct_call = self.direct_record is not None and plain_call(self.config)
        for case in cases:
            item = CaseItem.from_parent(self, name=case.name, callobj=check_case, case=case, fixtureinfo=info,
                                        keywords=dict(case.keywords), location_of=location)
            location = location or item.location[0]  # computed by pytest once per file, shared after
            yield item


class BrokenBenchmark(pytest.File):
    """Stands for a benchmark whose definition cannot be loaded, so the error is reported once."""

    def __init__(self, *, message: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.message = message

    def collect(self) -> Iterator[pytest.Item]:
        raise self.CollectError(terminal(self.message))  # it may quote names from benchmark.yaml
