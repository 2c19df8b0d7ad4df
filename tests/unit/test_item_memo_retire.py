"""Memos of other plugin code (llm/item_memo.py `_retire_other_code`): their keys hash that code, so
none can hit again; the first memo a process writes under other code than `.items/plugin-code`
names removes them (committed memos would otherwise only grow the repository), never anything
outside `.items/`, and memos of the same code stay."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from pytest_evalbench.llm.cache import ResponseCache
from pytest_evalbench.llm.item_memo import CODE_FILE, OLD_IGNORE, ItemMemo, code_fingerprint
from pytest_evalbench.llm.memo import CallLog

CACHE_KEY = "cd" + "1" * 62


def _process(root: Path) -> ItemMemo:
    """An item memo as a new process opens it (nothing prepared yet)."""
    return ItemMemo(cast(Any, SimpleNamespace(cache=ResponseCache(root, "on"))), "run")


def _store(memo: ItemMemo, row: str) -> Path:
    log = CallLog()
    log.calls.append((CACHE_KEY, "simulate", "target", "m", False, 3, 2))
    log.digests[CACHE_KEY] = "0" * 64
    key = memo.key(row, "t", 0)
    memo._store(key, {"benchmark": "b"}, log)
    return Path(memo.path(key))


def test_memos_of_other_code_go_before_the_first_new_one_and_nothing_else(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    first = [_store(_process(root), "row a")]
    memos = root / ".items"
    assert (memos / CODE_FILE).read_text() == f"{code_fingerprint()}\n"
    same = _process(root)  # same code: what is there stays
    first.append(_store(same, "row b"))
    assert all(p.is_file() for p in first)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "keep.item").write_text("not a memo of this cache")
    os.symlink(outside, memos / "zz")  # a planted link: never followed
    (memos / ".gitignore").write_text(OLD_IGNORE)
    (memos / "notes.txt").write_text("someone's file")
    (memos / CODE_FILE).write_text("an older plugin\n")
    upgraded = _process(root)
    new = _store(upgraded, "row c")
    assert new.is_file() and not any(p.exists() for p in first)
    assert (outside / "keep.item").is_file() and (memos / "notes.txt").is_file()
    assert not (memos / ".gitignore").exists()
    assert (memos / CODE_FILE).read_text() == f"{code_fingerprint()}\n"


def test_memos_written_before_the_code_file_existed_are_retired(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    old = _store(_process(root), "row a")
    (root / ".items" / CODE_FILE).unlink()  # as a version before it left them
    new = _store(_process(root), "row b")
    assert new.is_file() and not old.exists()
