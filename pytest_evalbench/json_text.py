"""Indented JSON text, byte for byte what `json.dumps(value, indent=2, ensure_ascii=False)` writes, at
the speed of the standard library's C encoder where the layout allows.

With an `indent`, the standard library never runs its C encoder: every string, number and bracket
of a 100,000-row result file goes through a chain of Python generators (seconds of a large run's
finish). Here only the layout is done in Python, one container at a time: a list or object whose
members are all scalars (or empty containers) is encoded by the C encoder in one call, with the
item separator of its depth (`",\\n" + indent`), and only its brackets are moved to their lines
(a JSON text never holds a raw newline outside layout: strings escape it). Every scalar is encoded
by the standard library (strings by its C `encode_basestring`, numbers and anything else by
`json.JSONEncoder.encode`). A circular value is a RecursionError here, not json's ValueError.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from json.encoder import encode_basestring
from typing import Any

_SCALAR = json.JSONEncoder(ensure_ascii=False)
_C_ENCODER: Callable[..., Callable[[Any, int], Any]] | None = getattr(json.encoder, "c_make_encoder", None)
_PLAIN = (list, tuple, dict)
_CONSTANTS = {True: "true", False: "false", None: "null"}


class IndentedText:
    """A value's JSON text as `indented(value)` wrote it (at the top level), written verbatim where it
    stands in a value `iterencode` writes (re-indented to its depth): a row encoded once, when it
    arrives, is never parsed and encoded again to be written."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _pad(level: int) -> str:
    return "  " * level


def _key(key: object) -> str:
    """An object key as the standard library writes it: a string, or a number, bool or None as text."""
    if isinstance(key, str):
        return encode_basestring(key)
    if isinstance(key, (int, float)) or key is None:  # bool is an int: `true`/`false`, as json writes them
        return encode_basestring(_SCALAR.encode(key))
    raise TypeError(f"keys must be str, int, float, bool or None, not {key.__class__.__name__}")


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return encode_basestring(value)
    if type(value) is int:
        return int.__repr__(value)
    if value is None or value is True or value is False:
        return _CONSTANTS[value]
    return _SCALAR.encode(value)  # floats (NaN, Infinity) and anything else, as json encodes them


class _Flat:
    """C encoders of plain containers whose members are all scalars, one per depth (the item
    separator carries the depth's indent)."""

    def __init__(self) -> None:
        self._by_level: dict[int, Callable[[Any], str]] = {}

    def encoder(self, level: int) -> Callable[[Any], str]:
        found = self._by_level.get(level)
        if found is None:
            separator = ",\n" + _pad(level + 1)
            if _C_ENCODER is not None:
                encode = _C_ENCODER(None, _SCALAR.default, encode_basestring, None, ": ", separator,
                                    False, False, True)

                def found(value: Any, encode: Callable[[Any, int], Any] = encode) -> str:
                    return "".join(encode(value, 0))
            else:  # no C accelerator (another Python implementation): the public path, same text
                found = json.JSONEncoder(ensure_ascii=False, separators=(separator, ": ")).encode
            self._by_level[level] = found
        return found


_FLAT = _Flat()


def _flat(value: list[Any] | tuple[Any, ...] | dict[Any, Any]) -> bool:
    """Every member a scalar or an empty plain container (an empty one is `[]`/`{}` at any depth)."""
    for member in value.values() if type(value) is dict else value:
        if isinstance(member, (*_PLAIN, IndentedText)) and (member or type(member) not in _PLAIN):
            return False
    return True


def iterencode(value: Any, level: int = 0) -> Iterator[str]:
    """The JSON text of `value` at indent depth `level`, in pieces (lists and dicts of any kind are
    iterated once, as the standard library iterates them: `store.StreamedList` relies on it)."""
    kind = type(value)
    if kind in _PLAIN and value and _flat(value):
        text = _FLAT.encoder(level)(value)
        yield f"{text[0]}\n{_pad(level + 1)}{text[1:-1]}\n{_pad(level)}{text[-1]}"
    elif isinstance(value, dict):
        yield from _object(value, level)
    elif isinstance(value, (list, tuple)):
        yield from _array(value, level)
    elif kind is IndentedText:
        yield value.text.replace("\n", "\n" + _pad(level)) if level else value.text
    else:
        yield _scalar(value)


def _object(value: dict[Any, Any], level: int) -> Iterator[str]:
    if not value:
        yield "{}"
        return
    inner = "\n" + _pad(level + 1)
    opening = "{" + inner
    for key, member in value.items():
        if isinstance(member, (*_PLAIN, IndentedText)):
            yield f"{opening}{_key(key)}: "
            yield from iterencode(member, level + 1)
        else:
            yield f"{opening}{_key(key)}: {_scalar(member)}"
        opening = "," + inner
    yield "\n" + _pad(level) + "}"


def _array(value: list[Any] | tuple[Any, ...], level: int) -> Iterator[str]:
    if not value:
        yield "[]"
        return
    inner = "\n" + _pad(level + 1)
    opening = "[" + inner
    for member in value:
        if isinstance(member, (*_PLAIN, IndentedText)):
            yield opening
            yield from iterencode(member, level + 1)
        else:
            yield opening + _scalar(member)
        opening = "," + inner
    yield "\n" + _pad(level) + "]"


def indented(value: Any) -> str:
    """`json.dumps(value, indent=2, ensure_ascii=False)`, byte for byte."""
    return "".join(iterencode(value))
