"""json_text writes `json.dumps(indent=2, ensure_ascii=False)`'s text byte for byte (the result files'
bytes must not change with the encoder): any nesting, empty containers, tuples, every key type json
accepts, non-finite floats, int/str subclasses, control and non-ASCII characters; pre-encoded rows
(`IndentedText`) land at any depth as if encoded there; what json refuses is refused."""

from __future__ import annotations

import enum
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_evalbench.json_text import IndentedText, indented, iterencode


class Colour(str, enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8)
SCALARS = (st.none() | st.booleans() | st.integers() | st.floats() | TEXT
           | st.sampled_from([Colour.RED, Level.HIGH, math.inf, -math.inf, 1e-05, 1e22, -0.0, "\u2028\x7f\x00\n\"\\"]))
KEYS = TEXT | st.integers() | st.floats() | st.booleans() | st.none() | st.sampled_from([Colour.RED, Level.HIGH])
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=30)


def reference(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


@settings(max_examples=400, deadline=None)
@given(VALUES)
def test_text_is_json_dumps_text(value: Any) -> None:
    assert indented(value) == reference(value)


@settings(max_examples=150, deadline=None)
@given(st.lists(VALUES, max_size=4), st.integers(min_value=0, max_value=3))
def test_pre_encoded_rows_land_at_any_depth(rows: list[Any], depth: int) -> None:
    def nest(value: Any, n: int) -> Any:
        return value if n == 0 else {"k": [nest(value, n - 1)]}

    written = indented(nest([IndentedText(indented(row)) for row in rows], depth))
    assert written == reference(nest(rows, depth))


def test_result_file_shapes() -> None:
    """The rows result files hold: flat rows, rows with nested objects and lists, empty members."""
    row = {"id": "m01_s001", "sample": 0, "present": True, "passed": None, "score": 0.5, "landmarks": [],
           "demographic": {}, "target": {"id": "t", "model": "m"},
           "transcript": [{"role": "user", "content": "héllo\n\t\"x\""}, {"role": "assistant", "content": ""}],
           "audit": {"ended_early": False, "stated_objective": [], "turns": [1, 2]}}
    data = [row, row, {"a": {"b": {"c": [[], {}, [1.5, -2, None]]}}}]
    assert indented(data) == reference(data)
    assert "".join(iterencode(row, 0)) == reference(row)


@pytest.mark.parametrize("value", [{(1, 2): 1}, {"a": {(1,): 1}}, [object()], {"a": [1, {2, 3}]}])
def test_what_json_refuses_is_refused(value: Any) -> None:
    with pytest.raises(TypeError):
        json.dumps(value, indent=2)
    with pytest.raises(TypeError):
        indented(value)


def test_nan_without_allowance_is_not_needed_but_nan_is_spelled_as_json_spells_it() -> None:
    assert indented([math.nan, {"x": math.nan}, {math.nan: [math.inf]}]) == reference(
        [math.nan, {"x": math.nan}, {math.nan: [math.inf]}])


FLAT_MEMBERS = SCALARS | st.sampled_from([[], {}, (), "},\n  {", "}", "{", '"},', "}, {"])
RECORDS = st.lists(st.dictionaries(KEYS | st.sampled_from(["}", "{", "},\n    {"]), FLAT_MEMBERS, min_size=1, max_size=4),
                   min_size=1, max_size=5)


@settings(max_examples=300, deadline=None)
@given(RECORDS, st.integers(min_value=0, max_value=3), st.booleans())
def test_lists_of_flat_objects_at_any_depth(records: list[dict[Any, Any]], depth: int, as_tuple: bool) -> None:
    """A list of non-empty objects of scalars (a transcript's messages) is encoded in one call and its
    brackets moved to their lines: braces, commas and newlines inside strings and keys, empty members,
    any depth, a tuple."""
    value: Any = tuple(records) if as_tuple else records
    for _ in range(depth):
        value = {"k": [value, 1]}
    assert indented(value) == reference(value)
