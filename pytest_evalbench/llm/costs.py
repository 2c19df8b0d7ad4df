"""Prices and usage: dollar prices of every call (benchmark.yaml's `pricing:` first, then the price data
genai-prices ships), the usage files (`.usage.json`: usage per row and phase, so a rerun of some rows
keeps the others' cost) and the phases of `cost.json`, which both kinds write.

genai-prices is read from the snapshot inside the installed package (no network: its auto-update is never
started), and imported at the first price looked up, so a run that prices nothing never loads it. A model
it matches is priced at its provider's list price, tiers included. Unknown models cost 0.0 but are named
in the terminal summary, so a missing price is never silent; `--evalbench-max-cost` cannot limit them
(see `limits.Budget`).

Every call is priced at its service tier (`Tier`): "standard", "batch" (the provider's Batch API) or
"flex" (`service_tier: flex` in a role's params, `call_tier`). genai-prices' own tier prices are used
where it has them (its `processing: batch` and `service_tier: flex` variants); otherwise the tier is
the standard price times the tier's multiplier (`pricing:`'s `batch` and `flex`, by default
`TIER_DISCOUNT`: half, the OpenAI and Anthropic rate). Input tokens read from the provider's prompt
cache, and those written to it, are priced at the cache-read and cache-write rates; the money the
cache reads saved (against the same tokens at the input price) is counted apart (`Usage.saved`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pytest_evalbench.base.files import dump_json, read_result, versioned
from pytest_evalbench.base.numbers import is_token_count
from pytest_evalbench.formats.spec import PhaseCost
from pytest_evalbench.llm.types import Endpoint, Usage

Tier = Literal["standard", "batch", "flex"]
TIER_DISCOUNT: dict[Tier, float] = {"standard": 1.0, "batch": 0.5, "flex": 0.5}
"""Share of the standard price a tier costs when neither genai-prices nor `pricing:` says: OpenAI's
and Anthropic's Batch APIs and OpenAI's flex tier sell at half the list price."""
_CONTEXT: dict[Tier, dict[str, str]] = {"batch": {"processing": "batch"}, "flex": {"service_tier": "flex"}}
"""genai-prices' price variant of each tier (its `price_context`)."""


def call_tier(endpoint: Endpoint, *, batched: bool = False) -> Tier:
    """The tier a call is priced at: "batch" when it went through the Batch API, "flex" when its role
    asks for `service_tier: flex`, else "standard"."""
    if batched:
        return "batch"
    return "flex" if endpoint.params.get("service_tier") == "flex" else "standard"


@dataclass(frozen=True)
class Tokens:
    """What one call used: prompt tokens (`input`, the prompt's total, as `usage.prompt_tokens` counts
    it), of which `cached` were read from the provider's prompt cache and `cache_write` written to it,
    and completion tokens (`output`)."""

    input: int
    output: int
    cached: int = 0
    cache_write: int = 0

    def __post_init__(self) -> None:
        # bounded: the cached parts never exceed the prompt (an endpoint's odd numbers cost no more than it)
        cached = min(max(0, self.cached), max(0, self.input))
        object.__setattr__(self, "cached", cached)
        object.__setattr__(self, "cache_write", min(max(0, self.cache_write), max(0, self.input) - cached))


def cache_tokens(usage: Mapping[str, Any]) -> tuple[int, int]:
    """(cache-read, cache-write) prompt tokens of an answer's `usage`: OpenAI's
    `prompt_tokens_details.cached_tokens` (and `cache_write_tokens`, as some gateways add), or
    Anthropic's `cache_read_input_tokens` and `cache_creation_input_tokens` as OpenAI-compatible
    gateways pass them on. A value that is not a token count counts as 0."""
    details = usage.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}

    def first(*values: Any) -> int:
        return next((int(v) for v in values if v and is_token_count(v)), 0)

    return (first(details.get("cached_tokens"), usage.get("cache_read_input_tokens")),
            first(details.get("cache_write_tokens"), usage.get("cache_creation_input_tokens")))


class Price(Protocol):
    """Dollars for one model's tokens at a tier."""

    def __call__(self, tokens: Tokens, tier: Tier) -> float: ...


@dataclass(frozen=True)
class Rates:
    """A model's prices from benchmark.yaml's `pricing:` (dollars per million tokens; cache reads and
    writes at the input price unless given; tiers as multipliers of every price)."""

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None
    batch: float = TIER_DISCOUNT["batch"]
    flex: float = TIER_DISCOUNT["flex"]

    def __call__(self, tokens: Tokens, tier: Tier) -> float:
        read = self.input if self.cached_input is None else self.cached_input
        write = self.input if self.cache_write is None else self.cache_write
        plain = tokens.input - tokens.cached - tokens.cache_write
        dollars = (plain * self.input + tokens.cached * read + tokens.cache_write * write
                   + tokens.output * self.output) / 1_000_000
        return dollars * {"standard": 1.0, "batch": self.batch, "flex": self.flex}[tier]


class _Listed:
    """A model's price from genai-prices: its own tier variant where it has one, else the standard
    price times `TIER_DISCOUNT`."""

    def __init__(self, model: str, tiers: set[Tier]) -> None:
        self.model = model
        self.tiers = tiers

    def __call__(self, tokens: Tokens, tier: Tier) -> float:
        from genai_prices import Usage as Counts
        from genai_prices import calc_price

        counts = Counts(input_tokens=tokens.input, output_tokens=tokens.output,
                        cache_read_tokens=tokens.cached, cache_write_tokens=tokens.cache_write)
        own = tier != "standard" and tier in self.tiers
        price = calc_price(counts, self.model, price_context=_CONTEXT[tier] if own else None)
        return float(price.total_price) * (1.0 if own else TIER_DISCOUNT[tier])


def _listed(model: str) -> Price | None:
    """The model's list price from genai-prices' bundled data, or None when it knows no such model (or
    is not installed: it needs Python 3.11)."""
    try:
        from genai_prices import Usage as Counts
        from genai_prices import calc_price
    except ImportError:
        return None
    try:
        found = calc_price(Counts(input_tokens=1, output_tokens=1), model)
    except LookupError:
        return None
    variants = getattr(found.model, "price_variants", None) or ()
    tiers = {tier for tier, context in _CONTEXT.items()
             for variant in variants if dict(getattr(variant, "when", {}) or {}) == context}
    return _Listed(model, tiers)


MAX_UNPRICED = 100
"""Most models without a price one process remembers (an app's spans may name any number)."""


class PriceTable:
    """Looks up prices (benchmark.yaml's `pricing:` wins over genai-prices); remembers which models had none."""

    def __init__(self, overrides: Mapping[str, Rates | tuple[float, float]] | None = None) -> None:
        self._prices: dict[str, Price | None] = {
            model: rates if isinstance(rates, Rates) else Rates(*rates) for model, rates in (overrides or {}).items()}
        self.unpriced: set[str] = set()

    def _price(self, model: str) -> Price | None:
        if model not in self._prices:
            self._prices[model] = _listed(model) if model.strip() else None
        return self._prices[model]

    def known(self, model: str) -> bool:
        """Whether the model has a price (from `pricing:` or genai-prices)."""
        return self._price(model) is not None

    def quote(self, model: str, input_tokens: int, output_tokens: int, *, local: bool = False,
              tier: Tier = "standard", cached_tokens: int = 0, cache_write_tokens: int = 0) -> float:
        """What the tokens would cost, without noting the model as unpriced (a budget reservation)."""
        price = None if local else self._price(model)
        if price is None:
            return 0.0
        return price(Tokens(input_tokens, output_tokens, cached_tokens, cache_write_tokens), tier)

    def cost(self, model: str, input_tokens: int, output_tokens: int, *, local: bool = False,
             tier: Tier = "standard", cached_tokens: int = 0, cache_write_tokens: int = 0) -> float:
        """What the tokens cost at `tier`; a model without a price costs 0.0 and is noted."""
        if local:
            return 0.0
        if self._price(model) is None:
            if (input_tokens or output_tokens) and len(self.unpriced) < MAX_UNPRICED:
                self.unpriced.add(model)
            return 0.0
        return self.quote(model, input_tokens, output_tokens, tier=tier, cached_tokens=cached_tokens,
                          cache_write_tokens=cache_write_tokens)

    def saved(self, model: str, input_tokens: int, cached_tokens: int, *, local: bool = False,
              tier: Tier = "standard") -> float:
        """Dollars the cache reads saved: the cached tokens at the input price less at the cache-read
        price (never negative)."""
        if not cached_tokens or local:
            return 0.0
        full = self.quote(model, input_tokens, 0, tier=tier)
        return max(0.0, full - self.quote(model, input_tokens, 0, tier=tier, cached_tokens=cached_tokens))


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
                     output_tokens=usage.output_tokens, cached_tokens=usage.cached_tokens,
                     saved=round(usage.saved, 6)).model_dump()


def update_cost_file(path: Path, usage: dict[str, Usage], root: Path | None = None) -> None:
    """Set these phases of a cost.json, keeping its other phases (an unreadable file is an error:
    its other phases would be lost)."""
    cost = read_result(path, {}, dict)
    cost.update({phase: phase_cost(phase, value) for phase, value in usage.items()})
    dump_json(path, versioned(cost), root)
