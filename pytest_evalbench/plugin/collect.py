"""Collection nodes: a benchmark data file becomes one test item per case.

Items are `pytest.Function`s whose test body only reports the outcome the core decided, so the
LLM work happens in fixtures (ERROR on infrastructure problems, FAILED on quality misses) and
users can override `evalbench_*` fixtures like any other.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from ..errors import EvalbenchError

if TYPE_CHECKING:
    from .session import EvalbenchSession

SESSION_KEY: pytest.StashKey[EvalbenchSession] = pytest.StashKey()
"""The session object in `config.stash`. Defined here, in a module loaded with the plugin, so the key
is one object for the whole process even when pytester's in-process runs drop lazily imported modules."""
CASE_KEY = pytest.StashKey[Any]()
OUTCOME_KEY = pytest.StashKey[Any]()


def check_case(evalbench_record: dict[str, Any], request: pytest.FixtureRequest) -> None:
    """Fail with the core's message when the case's outcome is `failed` (xfail when its judge is
    unreliable: the failure is shown but cannot fail the build)."""
    outcome = request.node.stash[OUTCOME_KEY]
    if outcome.status == "failed":
        if not outcome.convicts:
            pytest.xfail(outcome.message)
        pytest.fail(outcome.message, pytrace=False)


class CaseItem(pytest.Function):
    """One benchmark case (scenario × target × sample, or a dataset case)."""

    def __init__(self, *, case: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stash[CASE_KEY] = case
        self.extra_keyword_matches.update(case.keywords)  # what -k matches (pytest 9.2 ignores `keywords=` there)
        node_id = getattr(self, "_id", None)
        if node_id is not None and hasattr(type(node_id), "parse"):
            # pytest >= 9.2 keeps structured ids (path, names, params) and --lf/--nf compare them with
            # the stored ids parsed back; Function derives params only from a callspec, which only
            # Metafunc.parametrize builds (CallSpec and Metafunc's constructor are private), and does
            # not forward Node's `nodeid=`. Items made by pytest's own parametrization (a Module whose
            # public `obj` is a synthesized module, `metafunc.parametrize` per row; node ids byte-identical)
            # were measured at 10,000 rows: collection 2.3-2.6x slower, peak RSS +11% (an extra
            # FunctionDefinition and Metafunc per row). So this one private attribute stays
            # (tests: --lf, --nf, --sw in test_scenarios.py).
            self._id = type(node_id).parse(str(node_id))

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, self.name


class CaseFile(pytest.File):
    """A data file of the selected benchmark (scenarios.json or a dataset JSONL)."""

    def collect(self) -> Iterator[CaseItem]:
        session = self.config.stash[SESSION_KEY]
        try:
            cases = session.cases_for(self.path)
        except EvalbenchError as exc:
            raise self.CollectError(str(exc)) from None
        for case in cases:
            yield CaseItem.from_parent(self, name=case.name, callobj=check_case, case=case,
                                       keywords=dict(case.keywords))


class BrokenBenchmark(pytest.File):
    """Stands for a benchmark whose definition cannot be loaded, so the error is reported once."""

    def __init__(self, *, message: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.message = message

    def collect(self) -> Iterator[pytest.Item]:
        raise self.CollectError(self.message)
