"""Reading an item memo entry (llm/item_memo.py `lookup`): the header as documented in formats.md,
compared whole; the payload's lines parsed as `json.loads` parses them, a lone surrogate included."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from pytest_evalbench.llm.cache import ResponseCache
from pytest_evalbench.llm.item_memo import ItemMemo
from pytest_evalbench.llm.memo import CallLog

CACHE_KEY = "ab" + "0" * 62


def _memo(tmp_path: Path) -> tuple[ItemMemo, str]:
    cache = ResponseCache(tmp_path, "on")
    entry = Path(cache.entry_file(CACHE_KEY))
    entry.parent.mkdir()
    entry.write_text('{"key": "cached answer"}')
    memo = ItemMemo(cast(Any, SimpleNamespace(cache=cache)), "run")
    return memo, str(entry)


def _write(memo: ItemMemo, entry: str, key: str, record: dict[str, Any]) -> None:
    log = CallLog()
    log.calls.append((CACHE_KEY, "simulate", "target", "m", False, 3, 2))
    found = os.stat(entry)
    log.stamps[CACHE_KEY] = (found.st_size, found.st_mtime_ns, found.st_ino)
    memo._store(key, record, log)


def test_the_header_is_the_documented_json_and_a_written_memo_reads_back(tmp_path: Path) -> None:
    memo, entry = _memo(tmp_path)
    key = memo.key('{"id":"x"}', "t", 0)
    record = {"benchmark": "b", "text": "caf\u00e9 \u2028", "cost": 0.1 + 0.2, "big": 10**30}
    _write(memo, entry, key, record)
    head, _, payload = Path(memo.path(key)).read_text().partition("\n")
    digest = hashlib.sha256(payload.encode()).hexdigest()
    assert head == json.dumps({"digest": digest, "key": key, "version": 1}, sort_keys=True)
    found = memo.lookup(key)
    assert found is not None
    assert found[0] == record and found[1] == [(CACHE_KEY, "simulate", "target", "m", False, 3, 2)]
    assert json.loads(found[2]) == record


def test_a_header_that_is_not_exactly_the_written_one_misses(tmp_path: Path) -> None:
    memo, entry = _memo(tmp_path)
    key = memo.key("row", "t", 0)
    _write(memo, entry, key, {"benchmark": "b"})
    path = Path(memo.path(key))
    head, _, payload = path.read_text().partition("\n")
    for header in (head.replace('"version": 1', '"version": 2'), head.replace(key, key[::-1]),
                   head.replace('"digest": "', '"digest": "0')):
        path.write_text(f"{header}\n{payload}")
        assert memo.lookup(key) is None
    path.write_text(f"{head}\n{payload}")
    assert memo.lookup(key) is not None


def test_a_lone_surrogate_in_a_record_reads_back_as_json_loads_reads_it(tmp_path: Path) -> None:
    """Written escaped (ASCII JSON); pydantic-core's parser refuses the escape, `json.loads` reads it."""
    memo, entry = _memo(tmp_path)
    key = memo.key("row", "t", 0)
    record = {"content": "half \ud83d of a pair"}
    _write(memo, entry, key, record)
    assert "\\ud83d" in Path(memo.path(key)).read_text()
    found = memo.lookup(key)
    assert found is not None and found[0] == record
