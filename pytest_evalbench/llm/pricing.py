"""Dollar prices per million tokens, overridable per model in benchmark.yaml (`pricing:`).

Unknown models cost 0.0 but are reported in the terminal summary, so a missing price is never
silent (the original pipeline hid it); `--evalbench-max-cost` cannot limit them (see `budget.py`).
"""

from __future__ import annotations

from collections.abc import Mapping

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
