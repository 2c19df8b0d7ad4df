"""Bounded memory (issue #19): the spool, streamed result files and the engine's pipeline window."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

import pytest_evalbench.base.files as store
from pytest_evalbench.base.files import dump_json, dump_json_object, dump_json_rows, iter_json_rows, read_rows
from pytest_evalbench.base.spool import Spool
from pytest_evalbench.llm.cache import ResponseCache
from pytest_evalbench.llm.costs import PriceTable
from pytest_evalbench.llm.engine import Engine, EngineSettings

ROWS: list[Any] = [[], [{}], [{"a": [1, {"b": "x\ny, ] {"}], "c": []}, 3, "é", [], {"k": {}}], [[[]]],
                   [{"id": f"r{i}", "text": "ü" * i, "n": [i, 2.5, None, True]} for i in range(40)]]


def test_spool_keeps_rows_on_disk_and_reads_them_back_in_key_order(tmp_path: Path) -> None:
    spool: Spool[str] = Spool(tmp_path)
    spool.add("b", {"x": 1})
    spool.add("a", {"x": "é\n"})
    spool.add("c", [1, None])
    spool.add("b", {"x": 2})  # a key added again: the later value wins
    assert list(spool) == ["a", "b", "c"] and len(spool) == 3 and "b" in spool and "z" not in spool
    assert list(spool.values()) == [{"x": "é\n"}, {"x": 2}, [1, None]]
    assert list(spool.values()) == list(spool.values())  # every pass reads the file again
    assert list(tmp_path.iterdir()) == []  # anonymous: nothing named is left in the directory
    spool.close()
    assert len(spool) == 0 and list(spool.values()) == []


def test_spool_appends_in_batches_and_reads_between_appends(tmp_path: Path) -> None:
    """Rows are buffered (one write call per batch, not per row: every system call of the test loop
    hands the GIL to the engine thread); a read between appends sees everything added so far."""
    import os

    spool: Spool[str] = Spool(tmp_path)
    for i in range(20):
        spool.add(f"k{i:02d}", {"i": i, "text": "é" * i})
    assert spool._file is not None and os.fstat(spool._file.fileno()).st_size == 0  # still in the buffer
    assert spool["k03"] == {"i": 3, "text": "ééé"} and spool["k19"]["i"] == 19
    spool.add("k20", [20])
    spool.add("k03", {"i": 33})  # replaced after a read: appended at the end, not over what was read
    assert spool["k20"] == [20] and spool["k03"] == {"i": 33} and spool["k02"] == {"i": 2, "text": "éé"}
    assert [v["i"] if isinstance(v, dict) else v for v in spool.values()] == [0, 1, 2, 33, *range(4, 20), [20]]
    spool.close()


@pytest.mark.parametrize("value", [{"big": 2**70}, {"nan": float("nan"), "x": [1]}, {"inf": [float("-inf")]},
                                   {1: "int key"}, {"none": None, "f": 1e16}, {"s": "\u2028\n\"é"}, [0.1, -0.0, 5e-324]])
def test_spool_reads_back_what_json_reads_of_the_standard_encoding(tmp_path: Path, value: Any) -> None:
    """A value orjson encodes as it is is spooled by orjson; one it would write otherwise (NaN as null,
    a 65-bit integer it reads back as a float, a key that is not a string) by the standard library:
    either way it reads back as `json.loads` reads `json.dumps` of it (a NaN stays NaN, so the result
    files still refuse it)."""
    spool: Spool[str] = Spool(tmp_path)
    spool.add("k", value)
    spool.add("other", {"plain": [1, 2.5, "x"]})
    expected = json.loads(json.dumps(value))
    assert json.dumps(spool["k"]) == json.dumps(expected) and spool["other"] == {"plain": [1, 2.5, "x"]}
    assert type(spool["k"]) is type(expected)
    spool.add("k", {"now": "plain"})  # replaced by a value orjson writes: read back by orjson
    assert spool["k"] == {"now": "plain"}
    spool.close()


@pytest.mark.parametrize("rows", ROWS)
def test_streamed_json_files_are_byte_identical(tmp_path: Path, rows: list[Any]) -> None:
    dump_json(tmp_path / "whole.json", rows)
    dump_json_rows(tmp_path / "rows.json", iter(rows))
    assert (tmp_path / "rows.json").read_bytes() == (tmp_path / "whole.json").read_bytes()
    members = {f"k{i}|0": row for i, row in enumerate(rows)}
    dump_json(tmp_path / "whole.json", members)
    dump_json_object(tmp_path / "members.json", iter(members.items()))
    assert (tmp_path / "members.json").read_bytes() == (tmp_path / "whole.json").read_bytes()


@pytest.mark.parametrize("chunk", [1, 3, 64, 1 << 20])
def test_rows_are_read_one_at_a_time_as_a_whole_read_would(tmp_path: Path, chunk: int,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "READ_CHUNK", chunk)
    for rows in ROWS:
        dump_json(tmp_path / "indented.json", rows)
        (tmp_path / "compact.json").write_text(json.dumps(rows))
        for name in ("indented.json", "compact.json"):
            assert list(iter_json_rows(tmp_path / name)) == read_rows(tmp_path / name)
    (tmp_path / "bad.json").write_text('[{"a": 1}, {"b": ')
    assert list(iter_json_rows(tmp_path / "bad.json")) == [{"a": 1}]  # what came before the break
    (tmp_path / "bad.json").write_text('{"a": 1}')
    assert list(iter_json_rows(tmp_path / "bad.json")) == []
    assert list(iter_json_rows(tmp_path / "missing.json")) == []


def test_engine_starts_at_most_a_window_of_pipelines_ahead_of_their_callers(tmp_path: Path) -> None:
    engine = Engine(EngineSettings(concurrency=1), ResponseCache(tmp_path, "off"), PriceTable())
    engine.pipelines.window = 3
    started: list[int] = []
    lock = threading.Lock()

    def pipeline(i: int) -> Any:
        async def run() -> int:
            with lock:
                started.append(i)
            await asyncio.sleep(0.01)
            return i
        return run

    try:
        for i in range(10):
            engine.prefetch(i, pipeline(i), i)
        assert engine.submit(0, pipeline(0), 0).result(timeout=5) == 0
        assert engine.submit(1, pipeline(1), 0).result(timeout=5) == 1
        assert sorted(started) == [0, 1, 2]  # finished but not released: no slot frees up
        assert engine.submit(7, pipeline(7), 0).result(timeout=5) == 7  # a waiting caller never waits for a slot
        engine.release(0)
        engine.release(1)
        for i in (2, 3, 4, 5, 6, 8, 9):
            assert engine.submit(i, pipeline(i), 0).result(timeout=5) == i
            engine.release(i)
        assert sorted(started) == list(range(10)) and len(started) == 10  # each pipeline ran once
        assert engine.pipelines._futures.keys() == {7}  # released results are dropped
    finally:
        engine.close()
