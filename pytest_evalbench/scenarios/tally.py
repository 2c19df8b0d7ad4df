"""What the finish counts of this session's records as they pass to the store: read from their JSON
(this session's spooled records were valid when spooled and are not validated again)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from pytest_evalbench.reliability import judged_unreliably

AUDIT_FLAGS = ("ended_early", "stated_objective", "broke_character")


class RecordTally:
    """Panel agreement per row, failures an unreliable judge decided (per metric) and simulated-user
    audit flags (per flag), counted in the store's one pass over the records."""

    def __init__(self, unreliable: dict[str, str]) -> None:
        self.unreliable = unreliable
        self.agreement: list[tuple[str, float | None]] = []
        self.failures: Counter[str] = Counter()
        self.audited: Counter[str] = Counter()

    def counted(self, records: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """`records` (`ScenarioRecord.to_json`'s shape), counted as they pass."""
        agreement, failures, audited, unreliable = self.agreement, self.failures, self.audited, self.unreliable
        for record in records:
            if (found := record["conversation"].get("user_audit")) is not None:  # as Counter.update counts them
                audited["ended_early"] += found["ended_early"]  # (not through it: 1.3 us an item)
                audited["stated_objective"] += bool(found["stated_objective"])
                audited["broke_character"] += bool(found["broke_character"])
            score = record["score"]
            if (value := score.get("agreement")) is not None:  # a panel's: kept per row (one pair, not one per item)
                agreement.append((score["metric_id"], value))
            if record.get("status") == "failed" and judged_unreliably(unreliable, score["metric_id"],
                                                                      score.get("decided_by")):
                failures[score["metric_id"]] += 1
            yield record

    def audit_counts(self) -> dict[str, int]:
        return {k: self.audited[k] for k in AUDIT_FLAGS}
