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
from collections.abc import Callable, Iterable, Iterator
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


_PADS = ["  " * level for level in range(32)]


def _pad(level: int) -> str:
    return _PADS[level] if level < 32 else "  " * level


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


_NESTED = (*_PLAIN, IndentedText)


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
        if isinstance(member, _NESTED) and (member or type(member) not in _PLAIN):
            return False
    return True


def _text(value: list[Any] | tuple[Any, ...] | dict[Any, Any], level: int) -> str:
    """The text of a plain (not streamed) container at depth `level`, built as strings, not pieces."""
    if not value:
        return "{}" if type(value) is dict else "[]"
    if _flat(value):
        text = _FLAT.encoder(level)(value)
        return f"{text[0]}\n{_pad(level + 1)}{text[1:-1]}\n{_pad(level)}{text[-1]}"
    if not isinstance(value, dict) and _records(value):
        return _record_list(value, level)
    inner, deeper = "\n" + _pad(level + 1), level + 1
    parts: list[str] = []
    add = parts.append
    if type(value) is dict:  # exact str keys and values, and plain containers, without a call through _member
        for k, v in value.items():
            key = encode_basestring(k) if type(k) is str else _key(k)
            kind = type(v)
            if kind is str:
                add(f"{key}: {encode_basestring(v)}")
            elif kind in _PLAIN:
                add(f"{key}: {_text(v, deeper)}")
            else:
                add(f"{key}: {_member(v, deeper)}")
        return f"{{{inner}{(',' + inner).join(parts)}\n{_pad(level)}}}"
    for v in value:
        add(_text(v, deeper) if type(v) in _PLAIN else _member(v, deeper))
    return f"[{inner}{(',' + inner).join(parts)}\n{_pad(level)}]"


def _records(value: list[Any] | tuple[Any, ...]) -> bool:
    """Every member a non-empty plain dict of scalars (a transcript's messages, a file's rows)."""
    return all(type(member) is dict and member and _flat(member) for member in value)


def _record_list(value: list[Any] | tuple[Any, ...], level: int) -> str:
    """A list of flat non-empty dicts in one C call at the members' depth, then their brackets moved
    to their lines: `},` + the separator + `{` occurs only between two members (a member's values are
    scalars or empty containers, followed by `,` only when a key follows; strings escape newlines)."""
    inner, deeper = _pad(level + 1), _pad(level + 2)
    text = _FLAT.encoder(level + 1)(value)  # `[{"k": v,\n<deeper>"k": v},\n<deeper>{...}]`
    body = text[2:-2].replace(f"}},\n{deeper}{{", f"\n{inner}}},\n{inner}{{\n{deeper}")
    return f"[\n{inner}{{\n{deeper}{body}\n{inner}}}\n{_pad(level)}]"


def _member(value: Any, level: int) -> str:
    kind = type(value)
    if kind in _PLAIN:
        return _text(value, level)
    if kind is IndentedText:
        return value.text.replace("\n", "\n" + _pad(level)) if level else value.text
    if isinstance(value, _PLAIN):  # a list or dict subclass (e.g. a stream): iterated as json iterates it
        return "".join(iterencode(value, level))
    return _scalar(value)


def iterencode(value: Any, level: int = 0) -> Iterator[str]:
    """The JSON text of `value` at indent depth `level`, in pieces: a list or dict subclass (a
    `store.StreamedList`) is iterated once, as the standard library iterates it, a member at a time;
    plain containers are each one piece."""
    if type(value) in _PLAIN or not isinstance(value, _PLAIN):
        yield _member(value, level)
    elif isinstance(value, dict):
        yield from _streamed(value.items(), bool(value), level, "{}")
    else:
        yield from _streamed(((None, v) for v in value), bool(value), level, "[]")


def _streamed(members: Iterable[tuple[Any, Any]], filled: bool, level: int, brackets: str) -> Iterator[str]:
    """A container's members as they are iterated (`key` None: a list's)."""
    if not filled:
        yield brackets
        return
    inner = "\n" + _pad(level + 1)
    opening = brackets[0] + inner
    for key, member in members:
        head = opening if brackets == "[]" else f"{opening}{_key(key)}: "
        if isinstance(member, _PLAIN) and type(member) not in _PLAIN:
            yield head
            yield from iterencode(member, level + 1)
        else:
            yield head + _member(member, level + 1)
        opening = "," + inner
    yield "\n" + _pad(level) + brackets[1]


def indented(value: Any) -> str:
    """`json.dumps(value, indent=2, ensure_ascii=False)`, byte for byte."""
    return _member(value, 0)
