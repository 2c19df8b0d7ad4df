"""The one hypothesis strategy module for hostile values: what a planted file, a hostile endpoint, an MCP
server or a traced app can hand a reader. Every property test of a reader draws from here, so a new
kind of attack added here reaches every reader at once.

- numbers: integers past 64 bits (400 digits), 1e308 and its neighbours, NaN and the infinities,
  negative counts, booleans where numbers go;
- texts: control and invisible characters, terminal escapes, CI workflow commands, lone surrogates,
  long texts;
- wrong types: null, lists, objects and text where a number or an object is expected;
- depth: lists and objects nested thousands deep;
- JSON text of all of them, including what only a hostile writer emits (NaN, Infinity, 1e999,
  duplicate keys, a 400-digit integer, brackets 100,000 deep).
"""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import strategies as st

HUGE = 10**400
NUMBERS = st.one_of(
    st.sampled_from([HUGE, -HUGE, 2**63, 2**64, -(2**63) - 1, 10**20, -1, -30_000, 0, 1, 800, 10**9 + 1,
                     1e308, 1.7e308, -1e308, 5e-324, 1e-300, 0.5, 1.0, 0.0, -0.0, 1.0000001,
                     math.inf, -math.inf, math.nan]),
    st.integers(), st.floats(allow_nan=True, allow_infinity=True))
"""Numbers no reader may take as they are: out of every range, not finite, or at a bound's edge."""

TEXTS = st.one_of(
    st.sampled_from(["", " ", "\x00", "\x1b[31mred\x1b[0m", "\x07", "::error::x", "##[error]x", "\u202eevil",
                     "\u200b", "\ufeff", "\ud800", "a\udfffb", "x" * 100_000, "NaN", "Infinity", "1e999",
                     "true", "null", "{", "[" * 50]),
    st.text(max_size=30))
"""Texts with control, invisible and bidirectional characters, lone surrogates, and long ones."""

WRONG_TYPES = st.sampled_from([None, True, False, [], {}, [1, 2], {"a": 1}, "1", "0.5"])
"""Values of a type other than the one a field holds."""

LEAVES = st.one_of(NUMBERS, TEXTS, WRONG_TYPES)


def nested(depth: int, leaf: Any = 1, as_dict: bool = False) -> Any:
    """`leaf` inside `depth` lists (or one-key objects), built without recursion."""
    value = leaf
    for _ in range(depth):
        value = {"a": value} if as_dict else [value]
    return value


class Deep:
    """A value nested `depth` deep, built when a test asks (`unwrap`): hypothesis prints examples by
    recursion, so it is handed this shallow stand-in."""

    def __init__(self, depth: int, leaf: Any, as_dict: bool) -> None:
        self.depth, self.leaf, self.as_dict = depth, leaf, as_dict

    def __repr__(self) -> str:
        return f"nested({self.depth}, {self.leaf!r:.40}, as_dict={self.as_dict})"


def unwrap(value: Any) -> Any:
    """The hostile value itself (a `Deep` built)."""
    return nested(value.depth, value.leaf, value.as_dict) if isinstance(value, Deep) else value


DEEP = st.builds(Deep, st.sampled_from([65, 200, 1_000, 5_000]), LEAVES, st.booleans())
"""Values nested past every reader's limit (and past the interpreter's recursion limit)."""

VALUES = st.one_of(
    LEAVES, DEEP,
    st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=3)
                 | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=8))
"""Any hostile value, shallow or deep (a deep one as `Deep`: `unwrap` it)."""


def json_text(value: Any) -> str:
    """`value` as a hostile writer would write it: NaN, Infinity and huge integers as they are (not
    JSON), deep nesting without recursion."""
    value = unwrap(value)
    depth, inner = 0, value
    while isinstance(inner, (list, dict)) and len(inner) == 1 and depth < 10_000:
        key = next(iter(inner)) if isinstance(inner, dict) else None
        if isinstance(inner, dict) and key != "a":
            break
        inner = inner[key] if isinstance(inner, dict) else inner[0]
        depth += 1
    if depth > 50:
        opener, closer = ('{"a":', "}") if isinstance(value, dict) else ("[", "]")
        return opener * depth + json_text(inner) + closer * depth
    try:
        return json.dumps(value, allow_nan=True)
    except (ValueError, RecursionError):
        return "null"


RAW_JSON = st.sampled_from([
    "NaN", "-Infinity", "Infinity", "1e999", "-1e999", "1" + "0" * 400, "[" * 100_000, "{" * 50_000,
    '{"a": 1, "a": 2}', '"\\ud800"', "[1e308, 1.7e308]", "18446744073709551616", "-9223372036854775809",
    "", "{", "[1,]", "\x00", '{"a": ' * 3_000 + "1" + "}" * 3_000])
"""JSON texts only a hostile writer emits."""

JSON_TEXTS = st.one_of(RAW_JSON, VALUES.map(json_text))
"""Hostile JSON text: any hostile value written as JSON, or text no JSON writer would emit."""


def placed(template: Any, path: tuple[Any, ...], value: Any) -> Any:
    """A copy of `template` (JSON-like) with `value` at `path` (keys and list positions)."""
    out = json.loads(json.dumps(template))
    node = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return out
