"""The JSON reader's two paths agree: whatever the text, `parse_json` (orjson behind its guard) returns
exactly what the standard library's path (`parse_with_library`, every bad value marked) returns, or
raises exactly its error. The texts are written to hide what orjson does not check: keys given twice
with colons and quotes escaped or spaced, integers near 64 bits, surrogate escapes, nesting around
MAX_DEPTH, raw control characters, bytes that are not UTF-8."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pytest_evalbench.base.errors import InputError
from pytest_evalbench.base.json_input import MAX_DEPTH, parse_json, parse_with_library

HERE = Path("x.json")
CHARACTERS = [*'ab:" \\{[', "\n", "\t", "é", "\ud800", "\udc00", "\U0001f600", "\x00"]


@st.composite
def strings(draw: st.DrawFn) -> str:
    """A JSON string with each character written one of the ways a writer may write it (escaped in
    either case, as itself even where JSON forbids it: a raw quote, a raw control character)."""
    out = []
    for char in draw(st.lists(st.sampled_from(CHARACTERS), max_size=5)):
        forms = [char, *[json.dumps(char)[1:-1]] * 4]  # mostly valid: a raw quote or control character is not
        if ord(char) < 0x10000:
            forms += [f"\\u{ord(char):04x}", f"\\u{ord(char):04X}"]
        out.append(draw(st.sampled_from(forms)))
    return '"' + "".join(out) + '"'


KEYS = st.one_of(st.sampled_from(['"a"', '"\\u0061"', '"a:"', '"a\\u003a"', '"\\""', '"\\u0022"', '":"']), strings())
SPACE = st.sampled_from(["", " ", "\n", "\t", "\r\n "])
NUMBERS = st.one_of(
    st.integers(-(2**65), 2**65).map(str),
    st.sampled_from(["9223372036854775807", "-9223372036854775807", "9223372036854775808", "-9223372036854775808",
                     "18446744073709551615", "18446744073709551616", "1e999", "-0", "-0.0", "1.5e300", "5e-324",
                     "0.1234567890123456789", "1E400", "NaN", "Infinity", "01", "1.", ".5"]),
    st.floats(allow_nan=False, allow_infinity=False).map(repr))
LEAVES = st.one_of(NUMBERS, strings(), st.sampled_from(["true", "false", "null"]))


@st.composite
def containers(draw: st.DrawFn, inner: st.SearchStrategy[str]) -> str:
    values = draw(st.lists(inner, max_size=4))
    if draw(st.booleans()):
        return "[" + ",".join(f"{draw(SPACE)}{v}{draw(SPACE)}" for v in values) + "]"
    keys = draw(st.lists(KEYS, min_size=len(values), max_size=len(values)))
    return "{" + ",".join(f"{draw(SPACE)}{k}{draw(SPACE)}:{draw(SPACE)}{v}" for k, v in zip(keys, values)) + "}"


@st.composite
def texts(draw: st.DrawFn) -> str:
    """A JSON text, nested to about MAX_DEPTH now and then, sometimes cut or padded."""
    text = draw(st.recursive(LEAVES, containers, max_leaves=12))
    depth = draw(st.sampled_from([0, 0, 0, MAX_DEPTH - 2, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1]))
    text = "[" * depth + text + "]" * depth
    return draw(st.sampled_from([text, text, text, text[:-1], f" {text}\n", f"{text},", f'{{"k": {text}, "k": 1}}']))


def outcome(read: Any, text: str | bytes, **flags: bool) -> tuple[str, Any]:
    """("data", the data as canonical JSON: 1 and 1.0, -0.0 and 0 differ) or ("error", its line)."""
    try:
        data = read(text, HERE, **flags)
    except InputError as exc:
        return "error", str(exc)
    return "data", json.dumps(data, sort_keys=True)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts(), st.booleans(), st.booleans(), st.booleans())
@example('{"a":1,"a":2,"b":"\\"\\u003a"}', False, False, False)  # an escaped colon once hid a key given twice
@example('{"a":1,"a":2,"b":"\\"\\u0020:","c" :1}', False, False, False)  # so did an escaped space
def test_the_orjson_path_accepts_and_refuses_exactly_what_the_library_does(
        text: str, surrogates: bool, control_characters: bool, as_bytes: bool) -> None:
    raw: str | bytes = text.encode("utf-8", "surrogatepass") if as_bytes else text
    flags = {"surrogates": surrogates, "control_characters": control_characters}
    assert outcome(parse_json, raw, **flags) == outcome(parse_with_library, raw, **flags)


@pytest.mark.parametrize("text", ['{"a":1,"a":2,"b":"\\"\\u003a"}', '{"a":1,"a":2,"b":"\\"\\u0020:","c" :1}',
                                  '{"a":1,"a":2,"b":"\\u0022\\u003A"}', '{"a" :1,"a":2}'])
def test_a_key_given_twice_is_refused_whatever_escapes_hide_it(text: str) -> None:
    with pytest.raises(InputError, match="duplicate key 'a'"):
        parse_json(text, HERE)


def test_bytes_are_read_as_utf8_text() -> None:
    assert parse_json('{"a": "h\\u00e9", "b": "hé"}'.encode(), HERE) == {"a": "hé", "b": "hé"}
    with pytest.raises(InputError, match=r"x.json:2: not UTF-8 \(byte 0xff\)"):
        parse_json(b'{"a":\n"\xff"}', HERE)
