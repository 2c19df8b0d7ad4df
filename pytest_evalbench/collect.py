"""Collection nodes: a benchmark data file becomes one test item per case.

Items are `pytest.Function`s whose test body only compares the recorded verdict with the pass
rule, so the LLM work happens in fixtures (ERROR on infrastructure problems, FAILED on quality
misses) and users can override `evalbench_*` fixtures like any other.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .errors import EvalbenchError
from .runner import ScenarioCase

CASE_KEY = pytest.StashKey[Any]()
TAIL_MESSAGES = 4
TAIL_CHARS = 400


def check_scenario(evalbench_record: dict[str, Any]) -> None:
    """Pass when the judged behaviour matches the metric's polarity; fail with the judge's reasons."""
    score = evalbench_record["score"]
    if score["passed"] is False:
        pytest.fail(scenario_failure(evalbench_record), pytrace=False)


def check_dataset(evalbench_record: dict[str, Any]) -> None:
    """Pass when the scoring policy passes the case; fail with every metric's score and reason."""
    if evalbench_record["status"] == "failed":
        pytest.fail(evalbench_record["message"], pytrace=False)


def scenario_failure(record: dict[str, Any]) -> str:
    score = record["score"]
    seen = "present" if score["present"] else "absent"
    want = "present" if score["metric_type"] == "positive" else "absent"
    lines = [f"{score['metric_id']} {score['metric_name']!r} ({score['metric_type']}): behaviour {seen}, "
             f"expected {want}", f"judge: {score['justification']}", "transcript tail:"]
    for message in record["conversation"]["transcript"][-TAIL_MESSAGES:]:
        text = " ".join(message["content"].split())
        lines.append(f"  {message['role'].upper()}: {text[:TAIL_CHARS]}{'…' if len(text) > TAIL_CHARS else ''}")
    return "\n".join(lines)


class CaseItem(pytest.Function):
    """One benchmark case (scenario × target × sample, or a dataset case)."""

    def __init__(self, *, case: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stash[CASE_KEY] = case
        node_id = getattr(self, "_id", None)
        if node_id is not None and hasattr(type(node_id), "parse"):
            # pytest >= 9.2 keeps structured ids; without a callspec our "[target-sN]" suffix would be
            # part of the name, and --lf (which parses stored ids) would never match the item.
            self._id = type(node_id).parse(str(node_id))

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"{self.parent.name}::{self.name}" if self.parent else self.name


class CaseFile(pytest.File):
    """scenarios.json (or a dataset JSONL) of the selected benchmark."""

    def collect(self) -> Iterator[CaseItem]:
        from .session import SESSION_KEY

        session = self.config.stash[SESSION_KEY]
        try:
            cases, test = session.cases_for(self.path)
        except EvalbenchError as exc:
            raise self.CollectError(str(exc)) from None
        fixtureinfo = None
        for case in cases:
            item = CaseItem.from_parent(self, name=case.name, callobj=test, case=case, fixtureinfo=fixtureinfo,
                                        keywords=case_keywords(case))
            fixtureinfo = item._fixtureinfo  # identical for every case: resolve fixtures once per file
            yield item


class BrokenBenchmark(pytest.File):
    """Stands for a benchmark whose definition cannot be loaded, so the error is reported once."""

    def __init__(self, *, message: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.message = message

    def collect(self) -> Iterator[pytest.Item]:
        raise self.CollectError(self.message)


def case_keywords(case: Any) -> dict[str, Any]:
    """`-k` can select by metric id, metric type, target and sample as whole words."""
    if isinstance(case, ScenarioCase):
        return {case.scenario.metric_id: True, case.target_id: True, str(case.scenario.metric_type): True}
    return dict(getattr(case, "keywords", {}))
