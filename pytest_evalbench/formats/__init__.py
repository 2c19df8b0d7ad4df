"""The three kinds of pydantic model of the package, defined once.

- `Strict`: a record this package writes and reads back (result rows, summaries, labels, policy):
  an unknown key is an error.
- `StrictAnswer`: what a model must answer (a judge's verdict): no unknown key and no coercion
  (`"true"` is not `true`), so a sloppy answer is unparseable, never silently read.
- `Input`: a file people write (benchmark.yaml, scenarios.json, dataset rows): lenient and lossless.

Models build their validators on first use (`defer_build`): importing a module costs little. `Int`
and `Num` are the number fields of input files.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, model_validator

NEAR_MISS_CUTOFF = 0.8
"""difflib ratio from which an unknown key counts as a misspelt known key (`turn` -> `turns`)."""


def _not_bool(value: Any) -> Any:
    """YAML `true` is not the number 1 (pydantic's lax mode would accept it)."""
    if isinstance(value, bool):
        raise ValueError("expected a number, not true/false")
    return value


Int = Annotated[int, BeforeValidator(_not_bool)]
Num = Annotated[float, BeforeValidator(_not_bool)]
"""Numbers of files people write: a YAML `true` is not 1."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class StrictAnswer(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Input(BaseModel):
    """A model of a file people write (benchmark.yaml, scenarios.json): lenient and lossless.

    Keys other systems write are kept (`model_extra`), reported once as warnings (`unknown_keys`)
    and never change behaviour; a key that is a near miss of a known one is an error with a
    suggestion, so a typo cannot silently drop a setting."""

    model_config = ConfigDict(extra="allow", defer_build=True)

    @model_validator(mode="before")
    @classmethod
    def _no_near_misses(cls, data: Any) -> Any:
        if isinstance(data, dict):
            fields = cls.model_fields  # a descriptor: read once (rows are validated by the thousand)
            known = list(fields)
            misses = []
            for key in data:
                if isinstance(key, str) and key not in fields:
                    close = difflib.get_close_matches(key, known, n=1, cutoff=NEAR_MISS_CUTOFF)
                    if close:
                        misses.append(f"unknown key {key!r}: did you mean `{close[0]}`?")
            if misses:  # every near miss of this mapping at once
                raise ValueError("; ".join(misses))
        return data


def unknown_keys(model: BaseModel, prefix: str = "") -> list[str]:
    """Dotted paths of every kept unknown key in a validated model tree (`scenario.foo`, `metrics.2.bar`:
    list positions from 1)."""
    found = [f"{prefix}{key}" for key in (model.model_extra or {})]
    for name in type(model).model_fields:
        value = getattr(model, name)
        items = (value.items() if isinstance(value, dict) else enumerate(value, start=1) if isinstance(value, list)
                 else [(None, value)])
        for index, item in items:
            if isinstance(item, BaseModel):
                found += unknown_keys(item, f"{prefix}{name}." + ("" if index is None else f"{index}."))
    return found
