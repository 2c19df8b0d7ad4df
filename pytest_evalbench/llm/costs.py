"""Prices and usage: dollar prices of every call (benchmark.yaml's `pricing:` first, then the price data
genai-prices ships), the usage files (`.usage.json`: usage per row and phase, so a rerun of some rows
keeps the others' cost) and the phases of `cost.json`, which both kinds write.

genai-prices is read from the snapshot inside the installed package (no network: its auto-update is never
started), and imported at the first price looked up, so a run that prices nothing never loads it. A model
it matches is priced at its provider's list price, tiers included. Unknown models cost 0.0 but are named
in the terminal summary, so a missing price is never silent; `--evalbench-max-cost` cannot limit them
(see `limits.Budget`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pytest_evalbench.base.files import dump_json, read_result, versioned
from pytest_evalbench.formats.spec import PhaseCost
from pytest_evalbench.llm.types import Usage

Quote = Callable[[int, int], float]
"""Dollars for (input tokens, output tokens) of one model."""


def _per_million(input_price: float, output_price: float) -> Quote:
    return lambda tokens_in, tokens_out: (tokens_in * input_price + tokens_out * output_price) / 1_000_000


def _listed(model: str) -> Quote | None:
    """The model's list price from genai-prices' bundled data, or None when it knows no such model (or
    is not installed: it needs Python 3.11)."""
    try:
        from genai_prices import Usage as Tokens
        from genai_prices import calc_price
    except ImportError:
        return None
    try:
        calc_price(Tokens(input_tokens=1, output_tokens=1), model)
    except LookupError:
        return None

    def quote(tokens_in: int, tokens_out: int) -> float:
        return float(calc_price(Tokens(input_tokens=tokens_in, output_tokens=tokens_out), model).total_price)

    return quote


MAX_UNPRICED = 100
"""Most models without a price one process remembers (an app's spans may name any number)."""


class PriceTable:
    """Looks up prices (benchmark.yaml's `pricing:` wins over genai-prices); remembers which models had none."""

    def __init__(self, overrides: Mapping[str, tuple[float, float]] | None = None) -> None:
        self._quotes: dict[str, Quote | None] = {model: _per_million(*price) for model, price in (overrides or {}).items()}
        self.unpriced: set[str] = set()

    def _quote(self, model: str) -> Quote | None:
        if model not in self._quotes:
            self._quotes[model] = _listed(model) if model.strip() else None
        return self._quotes[model]

    def known(self, model: str) -> bool:
        """Whether the model has a price (from `pricing:` or genai-prices)."""
        return self._quote(model) is not None

    def quote(self, model: str, input_tokens: int, output_tokens: int, *, local: bool = False) -> float:
        """What the tokens would cost, without noting the model as unpriced (a budget reservation)."""
        price = None if local else self._quote(model)
        return 0.0 if price is None else price(input_tokens, output_tokens)

    def cost(self, model: str, input_tokens: int, output_tokens: int, *, local: bool = False) -> float:
        if local:
            return 0.0
        price = self._quote(model)
        if price is None:
            if (input_tokens or output_tokens) and len(self.unpriced) < MAX_UNPRICED:
                self.unpriced.add(model)
            return 0.0
        return price(input_tokens, output_tokens)


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
