"""The three kinds of pydantic model of the package, defined once.

- `Strict`: a record this package writes and reads back (result rows, summaries, labels, policy):
  an unknown key is an error.
- `StrictAnswer`: what a model must answer (a judge's judgment): no unknown key and no coercion
  (`"true"` is not `true`), so a sloppy answer is unparseable, never silently read.
- `Input`: a file people write (benchmark.yaml, scenarios.json, dataset rows): lenient and lossless.

Models build their validators on first use (`defer_build`): importing a module costs little. `Int`
and `Num` are the number fields of input files; `OneLine`, `PlainText` and `check_id` bound their texts
and ids.
"""

from __future__ import annotations

import difflib
import re
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from pytest_evalbench.base.safe_text import CONTROL

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

    @model_validator(mode="wrap")
    @classmethod
    def _no_near_misses(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """Every near miss of this mapping is an error at its key, reported with every other problem of
        the mapping and the mappings inside it: one mistake never hides another."""
        misses: list[InitErrorDetails] = []
        fields = cls.__pydantic_fields__  # `model_fields` without its descriptor (rows are validated by the thousand)
        if isinstance(data, dict) and not data.keys() <= fields.keys():  # every key known: no near miss
            known = list(fields)
            for key in data:
                if isinstance(key, str) and key not in fields:
                    close = difflib.get_close_matches(key, known, n=1, cutoff=NEAR_MISS_CUTOFF)
                    if close:
                        said = f"unknown key {key!r}: did you mean `{close[0]}`?"
                        misses.append(InitErrorDetails(type=PydanticCustomError("near_miss", _literal(said)),
                                                       loc=(key,), input=data[key]))
        if not misses:
            return handler(data)
        try:
            handler(data)
        except ValidationError as exc:  # the mapping's other problems, at their own fields
            misses += [InitErrorDetails(type=PydanticCustomError(e["type"], _literal(e["msg"])),
                                        loc=e["loc"], input=e.get("input")) for e in exc.errors()]
        raise ValidationError.from_exception_data(cls.__name__, misses)


def _literal(message: str) -> str:
    """A message as a pydantic error template that says it as it is (its braces are not placeholders)."""
    return message.replace("{", "{{").replace("}", "}}")


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


# ids and texts of input files

MAX_ID_LENGTH = 100
SAFE_ID = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_ID_LENGTH - 1}}}")
"""Ids of targets, metrics, scenarios and cases name directories, files and pytest node ids. Always
`fullmatch`ed (`match` with `$` accepts a trailing newline)."""
_WINDOWS_DEVICES = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}
MAX_NAME_LENGTH = 200
"""Longest benchmark `name` and metric `name` (they head reports and summaries), and longest
demographic axis or value and check rule text."""
MAX_TEXT_LENGTH = 20_000
"""Longest description, definition, example or "matters because" text of benchmark.yaml."""
_CONTROL = re.compile(f"[{CONTROL}\ud800-\udfff]")
"""Characters no text of benchmark.yaml may hold: the control characters (`base.safe_text.CONTROL`:
ESC, CR, C1, line and paragraph separators, direction overrides, the byte-order mark) and lone
surrogates. Newlines and tabs are checked separately (allowed in multi-line texts only)."""


def _printable(value: str, one_line: bool) -> str:
    """`value` when it holds no control character (and, `one_line`, no line break or tab); the length
    bound is the field's `max_length`, which pydantic checks first."""
    bad = _CONTROL.search(value) or (re.search("[\n\t]", value) if one_line else None)
    if bad is not None:
        what = "a line break or tab" if bad.group() in "\n\t" else f"the control character {bad.group()!r}"
        raise ValueError(f"holds {what} at position {bad.start() + 1}; it is shown in terminals, CI logs "
                         f"and reports, so it must be {'one line of ' if one_line else ''}printable text")
    return value


def one_line(value: str) -> str:
    """A name shown in titles, tables and terminals: one line of printable text (`OneLine` bounds its length)."""
    return _printable(value, one_line=True)


def plain_text(value: str) -> str:
    """A text shown in reports and prompts: printable, newlines and tabs allowed (`PlainText` bounds its length)."""
    return _printable(value, one_line=False)


OneLine = Annotated[str, Field(max_length=MAX_NAME_LENGTH), AfterValidator(one_line)]
PlainText = Annotated[str, Field(max_length=MAX_TEXT_LENGTH), AfterValidator(plain_text)]


def check_id(value: str, what: str) -> str:
    """`value` if it is safe as a file name and a node id on every platform, else ValueError."""
    if not SAFE_ID.fullmatch(value) or value.endswith("."):
        raise ValueError(f"{what} {value[:MAX_ID_LENGTH]!r}{'…' if len(value) > MAX_ID_LENGTH else ''} must be "
                         f"1-{MAX_ID_LENGTH} letters, digits, '.', '_' or '-', starting with a letter or digit "
                         "and not ending with '.' (it names files and test ids)")
    if value.split(".", maxsplit=1)[0].lower() in _WINDOWS_DEVICES:
        raise ValueError(f"{what} {value!r} is a reserved device name on Windows")
    return value
