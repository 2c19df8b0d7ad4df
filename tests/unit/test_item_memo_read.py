"""Reading an item memo entry (llm/item_memo.py `lookup`): the header as documented in formats.md,
compared whole; the payload's lines parsed as `json.loads` parses them, a lone surrogate included;
its cache files checked by their bytes, not by where or when they were written."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
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
    log.digests[CACHE_KEY] = hashlib.sha256(Path(entry).read_bytes()).hexdigest()
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


def test_cache_files_are_checked_by_content_not_by_inode_or_time(tmp_path: Path) -> None:
    """A copy of the cache and its memos (new inodes and times, as a fresh checkout) hits; an entry
    rewritten in place to other bytes of the same size, its mtime put back, misses."""
    (tmp_path / "a").mkdir()
    memo, entry = _memo(tmp_path / "a")
    key = memo.key("row", "t", 0)
    _write(memo, entry, key, {"benchmark": "b"})
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    copy = ItemMemo(cast(Any, SimpleNamespace(cache=ResponseCache(tmp_path / "b", "replay"))), "run")
    assert os.stat(Path(copy.cache.entry_file(CACHE_KEY))).st_ino != os.stat(entry).st_ino
    assert copy.lookup(key) is not None
    before = os.stat(entry)
    with open(entry, "r+b") as handle:  # same size, same inode, mtime restored: only the bytes differ
        handle.write(b'{"key": "cachet answer"}')
    os.utime(entry, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(entry)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    assert memo.lookup(key) is None


def test_a_memo_naming_a_file_outside_the_cache_or_a_fifo_misses_without_blocking(tmp_path: Path) -> None:
    """A committed memo is input: a call whose key is not 64 hex digits (here one that climbs out of
    the cache to a file whose digest it lists) misses; a FIFO planted at an entry's path is read as
    empty, a miss, instead of blocking the run."""
    root = tmp_path / "x" / "y"
    root.mkdir(parents=True)
    memo, entry = _memo(root)
    climbing = "../" + "a" * 61
    outside = tmp_path / f"{'a' * 61}.json"
    outside.write_text('{"key": "not an entry"}')
    assert Path(memo.cache.entry_file(climbing)).resolve() == outside.resolve()
    log = CallLog()
    log.calls.append((climbing, "simulate", "target", "m", False, 3, 2))
    log.digests[climbing] = hashlib.sha256(outside.read_bytes()).hexdigest()
    key = memo.key("climbing row", "t", 0)
    memo._store(key, {"benchmark": "b"}, log)
    assert Path(memo.path(key)).is_file() and memo.lookup(key) is None
    key = memo.key("row", "t", 0)
    _write(memo, entry, key, {"benchmark": "b"})
    assert memo.lookup(key) is not None
    os.unlink(entry)
    os.mkfifo(entry)
    assert memo.lookup(key) is None
