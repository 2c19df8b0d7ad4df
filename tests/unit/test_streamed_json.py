"""The one JSON writer (files.write_json, orjson underneath): streamed lists and objects are written
byte for byte as the same data held in memory, at any depth, empty or not; the layout is
`json.dumps(indent=2, ensure_ascii=False)`'s, and every value reads back equal; a streamed container
is iterated once, as the writer reaches it."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_evalbench.base.files import StreamedDict, StreamedList, write_json

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)))
EXACT = st.none() | st.booleans() | st.integers() | TEXT
"""Scalars `json.dumps` and orjson write alike (floats may differ in notation: 1e-05 and 0.00001)."""


def nested(scalars: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=20)


VALUES = nested(EXACT | st.floats(allow_nan=False, allow_infinity=False))


def streamed(value: Any, *, deep: bool) -> Any:
    """The same data with lists and objects (the outermost, or every one with `deep`) as streams."""
    def inner(v: Any) -> Any:
        return streamed(v, deep=True) if deep else v
    if isinstance(value, list):
        return StreamedList(inner(v) for v in value)
    if isinstance(value, dict):
        return StreamedDict((k, inner(v)) for k, v in value.items())
    return value


def written(data: Any) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "out.json"
        write_json(path, data, Path(tmp))
        return path.read_bytes()


def expected(value: Any) -> bytes:
    return (json.dumps(value, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


@settings(max_examples=150, deadline=None)
@given(VALUES, st.booleans())
def test_streamed_data_is_written_as_the_same_data_held_in_memory(value: Any, deep: bool) -> None:
    out = written(streamed(value, deep=deep))
    assert out == written(value)
    assert json.loads(out) == value


@settings(max_examples=150, deadline=None)
@given(nested(EXACT), st.booleans())
def test_the_layout_is_json_dumps_indent_2(value: Any, deep: bool) -> None:
    assert written(streamed(value, deep=deep)) == expected(value)


def test_what_orjson_cannot_write_is_written_by_json() -> None:
    """An integer beyond 64 bits (a hostile usage number) and keys that are not strings are written
    as `json` writes them, not an error; the other values beside them as orjson writes them, streamed
    or not."""
    value = {"rows": StreamedList([{"tokens": 10**30}, {"tokens": 1}]), 1: True, None: 2}
    assert written(value) == expected({"rows": [{"tokens": 10**30}, {"tokens": 1}], 1: True, None: 2})
    beside = {"": [-(2**63) - 1], "0": 1e-05}  # a float orjson writes as 0.00001, json as 1e-05
    assert written(beside) == written(streamed(beside, deep=False)) == written(streamed(beside, deep=True))
    assert json.loads(written(beside)) == beside


def test_empty_streams_and_empty_nested_streams() -> None:
    assert written(StreamedList(iter([]))) == b"[]\n"
    assert written(StreamedDict(iter([]))) == b"{}\n"
    nested = {"a": StreamedList([]), "b": [StreamedDict([])], "c": StreamedList([StreamedList([1])])}
    assert written(nested) == expected({"a": [], "b": [{}], "c": [[1]]})


def test_a_stream_is_consumed_as_it_is_written() -> None:
    """The generator is iterated exactly once (a stream cannot be read twice)."""
    pulled: list[int] = []

    def rows() -> Iterator[dict[str, int]]:
        for i in range(3):
            pulled.append(i)
            yield {"row": i}

    assert written(StreamedList(rows())) == expected([{"row": 0}, {"row": 1}, {"row": 2}])
    assert pulled == [0, 1, 2]
