"""Prices and usage: dollar prices per million tokens (overridable per model in benchmark.yaml's
`pricing:`), the usage files (`.usage.json`: usage per row and phase, so a rerun of some rows keeps the
others' cost) and the phases of `cost.json`, which both kinds write.

Unknown models cost 0.0 but are named in the terminal summary, so a missing price is never silent;
`--evalbench-max-cost` cannot limit them (see `limits.Budget`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_evalbench.base.files import dump_json, read_result, versioned
from pytest_evalbench.formats.spec import PhaseCost
from pytest_evalbench.llm.types import Usage

# (input $, output $) per million tokens; public list prices.
DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "gpt-4o": (2.50, 10.00),
    "gpt-4o-mini": (0.15, 0.60),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-5": (1.25, 10.00),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5-nano": (0.05, 0.40),
    "o4-mini": (1.10, 4.40),
}


class PriceTable:
    """Looks up prices; remembers which models had none."""

    def __init__(self, overrides: Mapping[str, tuple[float, float]] | None = None) -> None:
        self.prices = {**DEFAULT_PRICES, **(overrides or {})}
        self.unpriced: set[str] = set()

    def quote(self, model: str, input_tokens: int, output_tokens: int, *, local: bool = False) -> float:
        """What the tokens would cost, without noting the model as unpriced (a budget reservation)."""
        price = None if local else self.prices.get(model)
        return 0.0 if price is None else (input_tokens * price[0] + output_tokens * price[1]) / 1_000_000

    def cost(self, model: str, input_tokens: int, output_tokens: int, *, local: bool = False) -> float:
        if local:
            return 0.0
        price = self.prices.get(model)
        if price is None:
            if input_tokens or output_tokens:
                self.unpriced.add(model)
            return 0.0
        return (input_tokens * price[0] + output_tokens * price[1]) / 1_000_000


USAGE_FILE = ".usage.json"


def read_usage(path: Path) -> dict[str, Any]:
    """A `.usage.json` file: key -> {phase: usage} ({} when missing; InputError when unreadable,
    see `read_result`: the usage of the rows it holds would be lost)."""
    data: dict[str, Any] = read_result(path, {}, dict)
    return data


def usage_totals(rows: dict[str, Any]) -> dict[str, Usage]:
    """Usage per phase summed over every entry of a usage file."""
    totals: dict[str, Usage] = defaultdict(Usage)
    for usage in rows.values():
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
