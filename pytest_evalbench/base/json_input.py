"""The one JSON reader of everything from outside: input files, result files of earlier runs, cache
entries, history and calibration lines, HTTP bodies, tool-call arguments.

Nesting is bounded (MAX_DEPTH, checked without recursion: deep JSON is one error, never a
RecursionError), numbers fit (integers within 64 bits, floats finite: NaN, Infinity and 1e999 are
refused), no key is given twice, and no string holds a lone surrogate. Every problem is one
`InputError` naming file, row (or line) and field. Stdlib `json` parses, through its hooks.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from pytest_evalbench.base.errors import InputError, field_path
from pytest_evalbench.base.numbers import MAX_INT, is_json_number, shown_number

MAX_DEPTH = 64
"""Deepest nesting of lists and mappings accepted in an input file."""


SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
"""A JSON escape of a UTF-16 surrogate: only text holding one can decode to a lone surrogate."""


class BadValue:
    """Stands in the decoded data for a value no input may hold (a number too long or not finite, the
    second value of a duplicate key), so the walk that checks the data can name its row and field."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def label(self) -> str:
        """How the value reads where a row is named by it (`row 3 (id ...)`): the text as written."""
        return self.text

    def __str__(self) -> str:
        return self.label()

    def __repr__(self) -> str:
        return repr(self.label())

    def problem(self) -> str:
        text = self.text
        if text.lstrip("+-").lower() in {"nan", "infinity", "inf", ".nan", ".inf"}:
            return f"{text} is not a number an input file may hold (numbers must be finite)"
        digits = sum(c.isdigit() for c in text)
        shown = text if len(text) <= 24 else f"{text[:20]}… ({digits} digits)"
        if any(c in text for c in ".eE") and not text.lower().startswith(("0x", "-0x", "+0x")):
            return f"number {shown} is too large (numbers must be finite)"
        return f"number {shown} is out of range: integers must lie within ±{MAX_INT} (64 bits)"


class _DuplicateKey(BadValue):
    """The value of a key given twice; it keeps the first value, which names a row whose `id` is the key."""

    __slots__ = ("first",)

    def __init__(self, key: str, first: Any) -> None:
        super().__init__(key)
        self.first = first

    def problem(self) -> str:
        return f"duplicate key {self.text!r} (JSON would keep only the last value silently)"

    def label(self) -> str:
        return self.first.label() if isinstance(self.first, BadValue) else str(self.first)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object; a key given twice is marked, not silently overwritten."""
    data = dict(pairs)
    if len(data) != len(pairs):
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                data[key] = _DuplicateKey(key, seen[key])
                break
            seen[key] = value
    return data


def _parse_int(text: str) -> int | BadValue:
    if len(text) > 20:  # checked before int(): no 4,300-digit conversion, no ValueError from Python's limit
        return BadValue(text)
    value = int(text)
    return value if -MAX_INT <= value <= MAX_INT else BadValue(text)


def _parse_float(text: str) -> float | BadValue:
    value = float(text)
    return value if math.isfinite(value) else BadValue(text)


DECODER = json.JSONDecoder(parse_int=_parse_int, parse_float=_parse_float, parse_constant=BadValue,
                           object_pairs_hook=_object)
"""The JSON decoder of input files: out-of-range numbers, NaN/Infinity and duplicate keys are kept as
markers that `check_depth` reports with their row and field."""
_LENIENT = json.JSONDecoder(parse_int=_parse_int, parse_float=_parse_float, parse_constant=BadValue,
                            object_pairs_hook=_object, strict=False)
"""DECODER letting control characters stand unescaped in strings (as models write newlines and tabs)."""


def surrogate_problem(text: str) -> str:
    """The message for a text holding a lone surrogate, naming the first one."""
    found = SURROGATE.search(text)
    code = f"\\u{ord(found.group()):04x}" if found else "\\ud800"
    return (f"contains a lone surrogate ({code}): half of a UTF-16 pair, not a character, so it cannot be "
            "stored or sent as UTF-8; remove it or write the whole pair")


def _value_problem(value: Any, strings: bool, numbers: bool = False) -> str | None:
    if isinstance(value, BadValue):
        return value.problem()
    if strings and isinstance(value, str) and SURROGATE.search(value):
        return surrogate_problem(value)
    if numbers and _bad_number(value):
        return (f"{shown_number(value)} is not a number a file may hold (numbers must be finite, integers "
                f"within ±{MAX_INT})")
    return None


def _bad_number(value: Any) -> bool:
    """A Python number no file may hold (data handed over as objects, not parsed: an app's reply)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not is_json_number(value)


def _locate(data: Any, strings: bool, numbers: bool = False) -> tuple[str, str] | None:
    """(field path counted from 1, problem) of the first bad value or key, in document order."""
    stack: list[tuple[Any, tuple[int | str, ...]]] = [(data, ())]
    while stack:
        value, where = stack.pop()
        if isinstance(value, dict):
            for key in value:
                if strings and isinstance(key, str) and SURROGATE.search(key):
                    shown = key.encode("utf-8", "backslashreplace").decode("utf-8")
                    return field_path((*where, shown), data), f"key {surrogate_problem(key)}"
            stack.extend((v, (*where, k)) for k, v in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend((v, (*where, i)) for i, v in reversed(list(enumerate(value))))
        else:
            problem = _value_problem(value, strings, numbers)
            if problem is not None:
                return field_path(where, data), problem
    return None


def check_depth(data: Any, path: Path, row: int | str | None = None, strings: bool = True,
                base_depth: int = 0, numbers: bool = False) -> Any:
    """`data` unchanged if its lists and mappings nest at most MAX_DEPTH deep and every value can be
    held: numbers in range and finite, and (with `strings`) no lone surrogate in any string or key.
    Checked without recursion; a problem names the field (list positions from 1). `base_depth`: how
    deep `data` itself sits (1 for an element of a row list). `numbers`: `data` was not parsed here
    (Python objects: an app's reply), so its numbers are checked too."""
    stack: list[tuple[Any, int]] = [(data, base_depth)]
    bad = False
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth >= MAX_DEPTH:
                raise InputError(path, f"nested deeper than {MAX_DEPTH} levels", row=row)
            if isinstance(value, dict):
                if strings and any(isinstance(k, str) and SURROGATE.search(k) for k in value):
                    bad = True
                    break
                children: Iterable[Any] = value.values()
            else:
                children = value
            stack.extend((child, depth + 1) for child in children)
        elif (isinstance(value, BadValue) or (strings and isinstance(value, str) and SURROGATE.search(value))
              or (numbers and _bad_number(value))):
            bad = True
            break
    if bad:
        found = _locate(data, strings, numbers)
        assert found is not None
        raise InputError(path, found[1], row=row, field=found[0] or None)
    return data


def nests_deeper(data: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether `data` holds a list or mapping `limit` levels below it (`data` itself at level 0): the
    depth rule of `check_depth` alone, for data from a decoder that refuses every bad value itself.
    Walked level by level over the containers only (a file of rows has many scalars)."""
    level = [data] if isinstance(data, (dict, list)) else []
    for _ in range(limit):
        level = [child for value in level for child in (value.values() if isinstance(value, dict) else value)
                 if isinstance(child, (dict, list))]
        if not level:
            return False
    return True


def has_surrogate(text: str) -> bool:
    """Whether a text holds a lone surrogate (what a non-UTF-8 byte of a command line or file name decodes to)."""
    return SURROGATE.search(text) is not None


def may_hold_surrogates(text: str) -> bool:
    """Whether decoding this JSON text can give a lone surrogate (it has a surrogate escape)."""
    return _SURROGATE_ESCAPE.search(text) is not None


class _Refused(Exception):
    """Raised by `_STRICT`'s hooks at a value DECODER would mark."""


def _refuse(_: str) -> Any:
    raise _Refused


def _strict_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data = dict(pairs)
    if len(data) != len(pairs):
        raise _Refused
    return data


def _strict_int(text: str) -> int:
    value = _parse_int(text)
    if isinstance(value, BadValue):
        raise _Refused
    return value


def _strict_float(text: str) -> float:
    value = _parse_float(text)
    if isinstance(value, BadValue):
        raise _Refused
    return value


_STRICT = json.JSONDecoder(parse_int=_strict_int, parse_float=_strict_float, parse_constant=_refuse,
                           object_pairs_hook=_strict_object)
"""DECODER's checks, raising at the first bad value instead of marking it: sound text needs no walk."""


def decode_row(buffer: str, position: int) -> tuple[Any, int]:
    """The JSON value at `position` of a row list being read in parts (`json.JSONDecoder.raw_decode`:
    the value and where it ends), by parse_json's rule: ValueError when it holds a value no file may
    hold or nests deeper than MAX_DEPTH in the list (JSONDecodeError, a ValueError, when it is not
    complete in `buffer`). A row with at most MAX_DEPTH brackets is not walked."""
    try:
        value, end = _STRICT.raw_decode(buffer, position)
    except (_Refused, RecursionError):
        raise ValueError("a row holds a value no file may hold, or nests too deep") from None
    if (buffer.count("[", position, end) + buffer.count("{", position, end) >= MAX_DEPTH
            and nests_deeper(value, MAX_DEPTH - 1)):  # the row sits one level down, in the list
        raise ValueError("a row nests too deep")
    return value, end


_ESCAPES = re.compile(rb"\\u(?:003[aA]|[dD][89a-fA-F])")
"""An escaped colon (which the key count would miss) or a surrogate escape: decoded by the standard library."""
_DIGITS = bytes.maketrans(b"123456789{", b"000000000[")
"""Every digit made 0 and every bracket `[`: one copy shows long numbers and counts brackets."""
_LONG_NUMBER = b"0" * 19
"""19 digits in a row (after `_DIGITS`): an integer that may not fit 64 bits, of which orjson makes a float."""


def parse_json(text: str | bytes, path: Path, row: int | None = None, *, surrogates: bool = False,
               control_characters: bool = False) -> Any:
    """JSON text -> data: the one reader of JSON from outside. Syntax, nesting deeper than MAX_DEPTH,
    out-of-range or non-finite numbers, duplicate keys and lone surrogates are one-line InputErrors
    (`row` = the text's line). `text` may be the UTF-8 bytes of a file as read (bytes that are not
    UTF-8: "not UTF-8").

    orjson decodes first, behind one guard: it refuses NaN, infinities, invalid UTF-8 and nesting
    past 1,024 itself, and its result is taken only when the text cannot hide what it does not check
    (a duplicate key: the text holds as many colons as orjson's encoding of the result, each key
    having one and every colon of a string being written as itself; an integer past 64 bits, a
    surrogate or colon escape: none in the text; deeper than MAX_DEPTH: at most MAX_DEPTH brackets,
    or a walk). Anything else is decoded again by the standard library with hooks that mark each bad
    value (`parse_with_library`), so every error is the library's, naming its field. `surrogates`:
    lone surrogates are let through (a recorded answer that held one; the caller makes them U+FFFD).
    `control_characters`: strings may hold control characters unescaped (a model's answer: JSON asks
    for escapes, models write raw newlines and tabs)."""
    # a lone surrogate in a str: orjson refuses its encoding, the library names it
    encoded = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    shape = encoded.translate(_DIGITS)
    if not (b"\\" in encoded and _ESCAPES.search(encoded)) and _LONG_NUMBER not in shape:
        try:
            data = orjson.loads(encoded)
        except orjson.JSONDecodeError:
            pass
        else:
            # orjson goes to 1,024 levels, its encoder to 254 (too deep: the library names it)
            if ((shape.count(b"[") <= MAX_DEPTH or not nests_deeper(data))
                    and (b":" not in encoded or encoded.count(b":") == orjson.dumps(data).count(b":"))):
                return data
    return parse_with_library(text, path, row, surrogates=surrogates, control_characters=control_characters)


def parse_with_library(text: str | bytes, path: Path, row: int | None = None, *, surrogates: bool = False,
                       control_characters: bool = False) -> Any:
    """`parse_json` by the standard library alone, its hooks marking every bad value so the error names
    its field: what `parse_json` falls back to, and the rule its orjson path is held to."""
    if isinstance(text, bytes):
        raw = text
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(path, f"not UTF-8 (byte 0x{raw[exc.start]:02x})",
                             row=row if row is not None else raw[:exc.start].count(b"\n") + 1) from None
    try:
        data = (_LENIENT if control_characters else DECODER).decode(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"invalid JSON: {exc.msg} (column {exc.colno})",
                         row=row if row is not None else exc.lineno) from None
    except RecursionError:
        raise InputError(path, f"nested deeper than {MAX_DEPTH} levels", row=row) from None
    return check_depth(data, path, row, strings=not surrogates and may_hold_surrogates(text))
