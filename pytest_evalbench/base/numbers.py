"""The numbers that come from outside: their bounds, the declared types that apply them, and what
we write.

Every model that reads a number from a file, an endpoint, a span or a cache entry uses one of the
types here (`Probability`, `Threshold`, `Kappa`, `Count`, `TokenCount`, `DollarsPerMillion`,
`Score`), so a 400-digit integer, 1e308, NaN or a log-probability of 800 is refused where it is
read (one line naming file, entry and field) and code past the reader computes with numbers that
cannot overflow. The bounds are far past any real value: they exist so that sums, products, `exp`
and `log` of what was read stay finite.

The hot paths that read one number without a model (the engine, the cache, the transports) use
the same bounds as plain checks: an answer's usage and cost (`is_token_count`, `is_cost`), a
log-probability from an endpoint or a cached answer (`is_logprob`: finite, at most 0). And the
other side: what we write holds finite numbers only (`finite_json`, `NonFiniteNumber` naming file
and field), since JSON has no NaN or infinity.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, TypeAdapter, ValidationError

from pytest_evalbench.base.errors import EvalbenchError, field_path

MAX_INT = 2**63 - 1
"""Largest integer (in magnitude) an input may hold: a signed 64-bit integer, what endpoints and
other JSON readers can hold. Longer ones (Python refuses past 4,300 digits) are one-line errors."""

MAX_COUNT = 10**12
"""Most of anything counted (examples, rows, passes): far past any benchmark, small enough that sums
and products of counts stay exact in a float."""

MAX_TOKENS = 10**9
"""Most tokens one answer may report for its prompt or its completion: a billion is far past any
model's context, so a larger count is a broken or hostile endpoint, not usage to bill."""

MAX_PRICE = 1e6
"""Most dollars per million tokens a price may say: with at most MAX_TOKENS per answer, one answer
costs at most MAX_COST."""

MAX_COST = 1e9
"""Most dollars one row's usage may record."""

MIN_LOGPROB = -1e6
"""Lowest log-probability kept as a number (e^-1e6 is 0 in a float; endpoints write -9999 or so for
'impossible')."""


def _finite(value: Any) -> bool:
    """A finite float, or an integer (not a boolean) a float can hold."""
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool) and -MAX_INT <= value <= MAX_INT


def is_token_count(value: object) -> bool:
    """Whether a usage number from an endpoint or a cache entry can be believed: an integer (not a
    boolean) from 0 to `MAX_TOKENS`."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKENS


def is_logprob(value: object) -> bool:
    """Whether a log-probability from an endpoint or a cache entry can be used: finite, in
    [MIN_LOGPROB, 0] (an integer too large for a float is none)."""
    return _finite(value) and MIN_LOGPROB <= value <= 0.0  # type: ignore[operator]


def is_cost(value: object) -> bool:
    """Whether a recorded cost can be used: finite, in [0, MAX_COST] dollars."""
    return _finite(value) and 0.0 <= value <= MAX_COST  # type: ignore[operator]


def is_json_number(value: object) -> bool:
    """Whether a number can be written to a result file and read back by any JSON reader: finite, and
    an integer within 64 bits."""
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and -MAX_INT <= value <= MAX_INT


def shown_number(value: Any) -> str:
    """A number as a message quotes it: an integer of more than 20 digits by its length (Python
    refuses to print one past 4,300 digits), anything else not a number by its type."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    return repr(value) if isinstance(value, (int, float, bool)) else type(value).__name__


class NonFiniteNumber(EvalbenchError):
    """A writer was handed NaN or an infinity: nothing is written (JSON has no such number, and orjson
    would write it as null, the standard library as a bare `Infinity` no other parser reads)."""


def non_finite_field(value: Any) -> str | None:
    """The dotted field path (list positions from 1) of the first NaN or infinity in `value`, or None;
    walked without recursion."""
    stack: list[tuple[Any, tuple[int | str, ...]]] = [(value, ())]
    while stack:
        item, where = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return field_path(where, value) or "(the value itself)"
        elif isinstance(item, dict):
            stack.extend((v, (*where, k)) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, (*where, i)) for i, v in enumerate(item))
    return None


def refuse_non_finite(value: Any, what: str | Path) -> None:
    """NonFiniteNumber naming `what` (a file) and the field when `value` holds NaN or an infinity."""
    found = non_finite_field(value)
    if found is not None:
        raise NonFiniteNumber(f"{what}: not written: field '{found}' is not a finite number (result files "
                              "hold finite numbers only; this is a bug, please report it)")


def finite_json(value: Any, what: str | Path, **options: Any) -> str:
    """`json.dumps(value, **options)` for a file we write, refusing NaN and infinities (NonFiniteNumber
    naming `what` and the field) instead of writing `NaN` or `Infinity`, which are not JSON."""
    try:
        return json.dumps(value, allow_nan=False, **options)
    except ValueError:
        refuse_non_finite(value, what)
        raise


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
(and 0 everything), deciding judgments without a judge's say."""

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


def number_problem(declared: Any, value: Any) -> str | None:
    """Why `value` is not a `declared` (one of this module's types), in one line; None when it is one."""
    adapter = _ADAPTERS.get(declared)
    if adapter is None:
        adapter = _ADAPTERS[declared] = TypeAdapter(declared)
    try:
        adapter.validate_python(value)
    except ValidationError as exc:
        shown = shown_number(value)
        return f"{shown}: {exc.errors()[0]['msg'].removeprefix('Value error, ').lower()}"
    return None
