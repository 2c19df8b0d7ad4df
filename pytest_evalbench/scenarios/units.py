"""scores.json rows as compact pass/fail units (`gate.rows.OutcomeRow`), with repeated strings shared:
what results.json is computed from and the gate pairs with the baseline (100,000 at N = 100,000)."""

from __future__ import annotations

from typing import Any

from pytest_evalbench.gate.rows import OutcomeRow
from pytest_evalbench.scenarios.models import ScoreRow


class OutcomeUnits:
    """Units of one pass over rows: equal targets, metric ids, names and types share one string."""

    def __init__(self) -> None:
        self._shared: dict[Any, Any] = {}

    def unit(self, target: str, id: str, metric_id: str, sample: int, passed: bool | None,
            metric_name: str | None, metric_type: str | None, decided_by: str | None) -> OutcomeRow:
        shared = self._shared.setdefault
        return OutcomeRow(shared(target, target), id, shared(metric_id, metric_id), sample, passed,
                          shared(metric_name, metric_name), shared(metric_type, metric_type), decided_by)

    def of_json(self, row: dict[str, Any]) -> OutcomeRow:
        """The unit of a row as its model dumped it (this session's, before it is written)."""
        return self.unit(row["target_model"], row["id"], row["metric_id"], row["sample"], row["passed"],
                         row["metric_name"], row["metric_type"], row.get("decided_by"))

    def of(self, row: ScoreRow) -> OutcomeRow:
        """A validated row's unit."""
        return self.unit(row.target_model, row.id, row.metric_id, row.sample, row.passed, row.metric_name,
                        row.metric_type, row.decided_by)
