"""Usage ledgers (`.usage.json`: usage per row and phase, so a rerun of some rows keeps the others'
cost) and the phases of `cost.json`, which both kinds write."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from pytest_evalbench.file_version import versioned
from pytest_evalbench.llm.types import Usage
from pytest_evalbench.spec import PhaseCost
from pytest_evalbench.store import dump_json, read_result

USAGE_LEDGER = ".usage.json"


def read_ledger(path: Path) -> dict[str, Any]:
    """A `.usage.json` ledger: key -> {phase: usage} ({} when missing; InputError when unreadable,
    see `read_result`: the usage of the rows it holds would be lost)."""
    data: dict[str, Any] = read_result(path, {}, dict)
    return data


def ledger_totals(ledger: dict[str, Any]) -> dict[str, Usage]:
    """Usage per phase summed over every entry of a ledger."""
    totals: dict[str, Usage] = defaultdict(Usage)
    for usage in ledger.values():
        for phase, value in usage.items():
            totals[phase].add(Usage.from_json(value))
    return totals


def phase_cost(phase: str, usage: Usage) -> dict[str, Any]:
    """One phase entry of a cost.json."""
    return PhaseCost(phase=phase, cost=round(usage.cost, 6), input_tokens=usage.input_tokens,
                     output_tokens=usage.output_tokens).model_dump()


def update_cost_file(path: Path, usage: dict[str, Usage], root: Path | None = None) -> None:
    """Set these phases of a cost.json, keeping its other phases (an unreadable file is an error:
    its other phases would be lost)."""
    cost = read_result(path, {}, dict)
    cost.update({phase: phase_cost(phase, value) for phase, value in usage.items()})
    dump_json(path, versioned(cost), root)
