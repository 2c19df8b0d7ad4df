"""Public fixtures. Each is a thin call into the session object.

Override them in a conftest.py like any pytest fixture; `evalbench_record` is where the LLM work
of an item is awaited (it was usually prefetched long before the test starts).
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from pytest_evalbench.plugin.nodes import CaseItem


@pytest.fixture
def evalbench_case(request: pytest.FixtureRequest) -> Any:
    """The case of the current item: `ScenarioCase` (scenario, target_id, sample) or a dataset case."""
    return cast(CaseItem, request.node).case


@pytest.fixture
def evalbench_record(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The judged result of this item: conversation, score row and usage (waits for the engine)."""
    from pytest_evalbench.plugin.session import session_of  # loaded with --benchmark, before any item runs

    return session_of(request.config).outcomes.record_for(request.node)
