"""A stored answer line, read as a dataset line, gives the judge exactly what the live run gave it."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_evalbench.kinds.dataset.answers import answer_line
from pytest_evalbench.kinds.dataset.models import DatasetCase, StoredAnswer, payload_for
from pytest_evalbench.kinds.explain import PAYLOAD_KEYS

EVALS = sorted(PAYLOAD_KEYS)
INVOKED = [{"tool": "Search", "arguments": {"q": "x"}}]


def case(**changes: Any) -> DatasetCase:
    row = {"case_id": "c1", "scenario_id": "S1", "agent_name": "bot", "question": "Plan my week?",
           "required_evals": EVALS, "threshold_profile": "p", "available_tools": ["Search"], "mode": "x", **changes}
    return DatasetCase.model_validate(row)


@pytest.mark.parametrize("answer", ["an answer", "", None])
@pytest.mark.parametrize("changes", [{}, {"context": "ctx", "task_goal": "goal"},
                                     {"explain_inputs": {"CoherenceExplain": {"input": "given", "question": "q2"}}}])
def test_stored_line_judged_as_live(answer: str | None, changes: dict[str, Any]) -> None:
    live = case(**changes)
    stored = StoredAnswer.model_validate_json(answer_line(live, answer, INVOKED))
    assert stored.model_answer == (answer or "") and stored.model_extra == {"mode": "x"}
    for name in EVALS:
        assert payload_for(stored, name) == payload_for(live, name, answer, INVOKED), name
