"""Completeness, the run's one promise to CI: every selected item ends either as a scored row
(passed/failed), as a sample not drawn by design (sequential sampling: its case was settled), or as
an incompleteness with a reason (an error of any kind, a skip, or never having
reported at all); the gate allows exit 0/1/6 only when `Completeness.reasons()` is empty (`outcome.py`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

SCORED = ("passed", "failed")
NOT_DRAWN = "not drawn"
"""A sample sequential sampling did not draw because its case was settled: accounted for by design."""
NOT_RUN = "not run"
WORKER_DIED = "worker died"


def crash_reason(exc: BaseException) -> str:
    """The reason recorded for an item that raised something that is not one of the plugin's errors."""
    return f"crashed ({type(exc).__name__})"


@dataclass
class Completeness:
    """Selected items, their scored statuses and their errors, merged over every process."""

    selected: set[str] = field(default_factory=set)
    scored: dict[str, str] = field(default_factory=dict)
    """nodeid -> the kind's status ("passed", "failed", "unscored")."""
    errors: dict[str, str] = field(default_factory=dict)
    """nodeid -> why it is not a scored row (first reason wins)."""

    def select(self, ids: list[str] | set[str]) -> None:
        self.selected.update(ids)

    def error(self, nodeid: str, reason: str) -> None:
        self.errors.setdefault(nodeid, reason)

    def status(self, nodeid: str, status: str) -> None:
        self.scored[nodeid] = status

    def missing(self) -> list[str]:
        """Selected items that never reported a status nor an error."""
        return sorted(i for i in self.selected if i not in self.scored and i not in self.errors)

    def unaccounted(self) -> dict[str, str]:
        """Every item that is not a scored row, with its reason."""
        out = dict(self.errors)
        for nodeid, status in self.scored.items():
            if status not in SCORED and status != NOT_DRAWN:
                out.setdefault(nodeid, status)
        out.update(dict.fromkeys(self.missing(), NOT_RUN))
        return dict(sorted(out.items()))

    def reasons(self, interrupted: bool) -> list[str]:
        """Why the numbers are incomplete, counted per reason; [] means every selected item is scored."""
        counts = Counter(self.unaccounted().values())
        reasons = [f"{n} item{'s' if n > 1 else ''} {kind}" for kind, n in sorted(counts.items())]
        if interrupted:
            reasons.append("session interrupted")
        return reasons
