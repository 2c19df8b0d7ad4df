"""The numbers that come from outside, as declared types: finite and inside a stated range.

Every model that reads a number from a file, an endpoint, a span or a cache entry uses one of these
types, so a 400-digit integer, 1e308, NaN or a log-probability of 800 is refused where it is read
(one line naming file, entry and field) and code past the reader computes with numbers that cannot
overflow. The bounds are far past any real value: they exist so that sums, products, `exp` and
`log` of what was read stay finite.

The bounds are defined in `base/numbers.py`, with the same checks as plain functions for the hot
paths that read one number without a model: an answer's usage and cost (`is_token_count`,
`is_cost`), a log-probability from an endpoint or a cached answer (`is_logprob`: finite, at most 0).
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, TypeAdapter, ValidationError

from pytest_evalbench.base.numbers import MAX_COUNT, MAX_PRICE, MAX_TOKENS, shown_number


def _number(value: Any) -> Any:
    """Only a number is a number: `true` is not 1 and `"0.5"` is text (pydantic's lax mode would take
    both); NaN and the infinities are no numbers to compare with a bound."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number, not {'true/false' if isinstance(value, bool) else type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("numbers must be finite")
    return value


Probability = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False), BeforeValidator(_number)]
"""A share or probability: a pass rate, P(present), an agreement."""

Threshold = Annotated[float, Field(gt=0.0, lt=1.0, allow_inf_nan=False), BeforeValidator(_number)]
"""A calibrated cut on P(present), strictly inside (0, 1): a cut of 1 would call nothing present
(and 0 everything), turning verdicts without a judge's say."""

Kappa = Annotated[float, Field(ge=-1.0, le=1.0, allow_inf_nan=False), BeforeValidator(_number)]
"""Cohen's kappa (and its interval's ends)."""

Count = Annotated[int, Field(ge=0, le=MAX_COUNT), BeforeValidator(_number)]
"""Something counted: examples, rows, passes."""

TokenCount = Annotated[int, Field(ge=0, le=MAX_TOKENS), BeforeValidator(_number)]
"""Tokens one answer or one traced model call reports."""

DollarsPerMillion = Annotated[float, Field(ge=0.0, le=MAX_PRICE, allow_inf_nan=False), BeforeValidator(_number)]
"""Dollars per million tokens."""


Score = Annotated[float, Field(ge=0.0, le=5.0, allow_inf_nan=False), BeforeValidator(_number)]
"""A dataset eval's score (1..5; 0 where a writer records no score as zero)."""


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def number_problem(kind: Any, value: Any) -> str | None:
    """Why `value` is not a `kind` (one of this module's types), in one line; None when it is one."""
    adapter = _ADAPTERS.get(kind)
    if adapter is None:
        adapter = _ADAPTERS[kind] = TypeAdapter(kind)
    try:
        adapter.validate_python(value)
    except ValidationError as exc:
        shown = shown_number(value)
        return f"{shown}: {exc.errors()[0]['msg'].removeprefix('Value error, ').lower()}"
    return None
