"""The item memo (issue 27): a fully cached item's finished record, kept so a later replay of the same
item reads one file instead of re-running its chain of cached calls.

An item whose every call was answered from a cache file or fetched and stored by this process (none
shared in flight, unstored, corrupt or changed by redaction) leaves `<cache>/.items/<k2>/<key>.item`:
per call, the cache key, what the engine counted for it (phase, role, model, tokens) and the sha256
of the cache file's bytes as it was read or written; then the record's JSON as the kind gives it for
a memo (the scenario kind: its outcome decided, so a hit's text is what the spool stores). The key
hashes the package's own code, everything of the run that shapes requests
(`BenchmarkRun.replay_material`) and the case. A hit requires every listed cache file to hold the
same bytes (a deleted or re-recorded entry is a miss, so the chain replays; a copy or a fresh
checkout of the same files hits), the record free of the run's secrets, and the file sound: its first
line `{"digest", "key", "version"}`, the rest the payload whose sha256 is `digest`: a line of the
calls' JSON, then a line of the record's JSON. Anything else (a missing, corrupt, oversized or
unreadable file, or a memo of an older payload) is a miss, never an error. A hit adds to the
engine's counters exactly what replaying the chain would. Read where the cache is read (`on`,
`replay`), written only where cache entries are written too (`on`: a replay stays read-only; writing
10,000 memos during one cost it 5-6 s); never for an app target (its replies are not cached). Not
git-ignored: committed beside the cache they hit in a fresh checkout, so CI's replays skip the chains;
the first write of a process whose plugin code differs from the one `.items/plugin-code` names removes
every memo there first (none of them can hit again).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic_core import from_json

from ..file_version import FORMAT_VERSION, VERSION_KEY
from ..redaction import SECRETS
from ..safe_files import check_dir
from ..store import atomic_write_text
from .cache import MAX_ENTRY_BYTES, file_digest, read_bounded
from .engine import Engine
from .memo import ITEM_CALLS, Call, CallLog
from .types import Usage

R = TypeVar("R")

MEMO_DIR = ".items"
"""Under the cache directory; not a two-character entry directory (the estimate scans `??/*.json`)."""
SUFFIX = ".item"
_CACHE_KEY = re.compile(r"[0-9a-f]{64}")
CODE_FILE = "plugin-code"
"""Under `.items/`: the code fingerprint of the plugin whose memos are there (see `_retire_other_code`)."""
OLD_IGNORE = "# item memos: valid only beside this cache's files\n*\n"
"""`.items/.gitignore` as versions before content-checked memos wrote it (removed: see `_retire_other_code`)."""


@functools.cache
def code_fingerprint() -> str:
    """The package's own files' fingerprint, once per process: an edit to a prompt template or a
    parser invalidates every memo."""
    return tree_fingerprint(Path(__file__).resolve().parent.parent)


def tree_fingerprint(root: Path) -> str:
    """sha256 over every file under `root` (relative paths and bytes; compiled caches aside)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def fingerprint(material: Any) -> str:
    """sha256 of the canonical JSON of `material` (with the package's code fingerprint)."""
    text = json.dumps({"code": code_fingerprint(), "run": material}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class ItemMemo:
    """Reads and writes item memo entries of one cache directory for one run (`fingerprint`)."""

    def __init__(self, engine: Engine, run_fingerprint: str) -> None:
        self.engine = engine
        self.cache = engine.cache
        self._run = run_fingerprint
        self._key_start = hashlib.sha256(b"evalbench item memo\0%b\0" % run_fingerprint.encode())
        """The hash of every key's common start (the run's fingerprint), copied per key."""
        self._root = os.path.join(engine.cache.directory, MEMO_DIR, "")
        """The memo directory as text with its separator: an entry's path is built by concatenation."""
        self._checked: set[str] = set()
        self._broken = False
        """A write failed (a full disk, a directory made read-only): no more attempts this process."""

    def key(self, *case: str | int) -> str:
        """The entry's key: the run's fingerprint and the case's own material (row JSON, target, sample),
        each part hashed with its type and length (unambiguous, and no JSON encoding of the row's text
        per item)."""
        digest = self._key_start.copy()
        for part in case:
            data = part.encode("utf-8", "surrogatepass") if isinstance(part, str) else str(part).encode()
            digest.update(b"%c%d:%b" % (115 if isinstance(part, str) else 105, len(data), data))
        return digest.hexdigest()

    def path(self, key: str) -> str:
        return f"{self._root}{key[:2]}{os.sep}{key}{SUFFIX}"

    async def produce(self, key: str, produce: Callable[[], Awaitable[R]], to_json: Callable[[R], dict[str, Any]]) -> R:
        """The record of an item whose memo missed (`hit` was tried first): from `produce()` (the chain),
        which leaves an entry (cache `on`) when every call was answered from a cache file or fetched and
        stored by this item."""
        log = CallLog()
        token = ITEM_CALLS.set(log)
        try:
            record = await produce()
        finally:
            ITEM_CALLS.reset(token)
        if self.cache.writes and log.memoable and log.calls and not self._broken:
            # queued after the cache writes of the answers it fetched (same thread): their digests are in by then
            self.engine.memo.submit(functools.partial(self._store, key, to_json(record), log))
        return record

    def hit(self, key: str, from_json: Callable[[dict[str, Any]], R]) -> R | None:
        """The item's record from its memo entry when sound, its calls counted; None on a miss
        (synchronous: a hit needs no task on the loop, `Pipeline.first`; on another thread its calls are
        counted on the loop's, with the engine's other counting)."""
        found = self.lookup(key)
        if found is None:
            return None
        record_json, calls = found
        try:
            record = from_json(record_json)
        except Exception:  # anything a file holds is a miss, never an error
            return None
        self.engine.pipelines.soon(functools.partial(count_calls, self.engine, calls))
        return record

    def lookup(self, key: str) -> tuple[dict[str, Any], list[Call]] | None:
        """The record's JSON and the calls to count, when the entry is sound
        and every cache file it lists is unchanged; None otherwise. The first line must be exactly the
        header `_store` writes for this key and the payload's digest (no JSON parse of it)."""
        text = read_bounded(self.path(key))
        if text is None:
            return None
        head, newline, payload = text.partition("\n")
        try:
            if not newline or head != memo_header(hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest(), key):
                return None
            if SECRETS and SECRETS.redact(payload) != payload:  # the chain would mask a secret of this run
                return None
            calls_text, newline, record_text = payload.partition("\n")
            if not newline:
                return None
            rows, record = _parse(calls_text), _parse(record_text)
            if type(record) is not dict or type(rows) is not list or not rows:
                return None
            calls: list[Call] = []
            entry_file = self.cache.entry_file
            for row in rows:
                cache_key, phase, role, model, local, tokens_in, tokens_out, digest = row
                call = (cache_key, phase, role, model, local, tokens_in, tokens_out)
                if not _sound(call):  # before its path is built from it
                    return None
                if type(digest) is not str or file_digest(entry_file(cache_key)) != digest:
                    return None
                calls.append(call)
        except (OSError, ValueError, TypeError, KeyError, IndexError, RecursionError):
            return None
        return record, calls

    def _store(self, key: str, record: dict[str, Any], log: CallLog) -> None:
        """Write one entry atomically (on the cache's writer thread) when every call's cache file is
        known; a failure only stops further writes."""
        if self._broken or not all(call[0] in log.digests for call in log.calls):
            return
        calls = [[*call, log.digests[call[0]]] for call in log.calls]
        payload = f"{_compact(calls)}\n{_compact(record)}"
        digest = hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()
        text = f"{memo_header(digest, key)}\n{payload}"
        if len(text) > MAX_ENTRY_BYTES:
            return
        try:
            directory = f"{self._root}{key[:2]}"
            if directory not in self._checked:
                self._prepare(directory)
            atomic_write_text(Path(self.path(key)), text, None)
        except Exception:  # a memo is an optimisation, never an error of the run
            self._broken = True

    def _prepare(self, directory: str) -> None:
        """Once per entry directory: made, and checked to stay inside the cache directory (no link out
        of it), so each write after needs no check of its own."""
        path = Path(directory)
        check_dir(path, self.cache.directory)  # before anything is made: links followed
        path.mkdir(parents=True, exist_ok=True)
        check_dir(path, self.cache.directory)
        if not self._checked:
            self._retire_other_code(path.parent)
        self._checked.add(directory)

    def _retire_other_code(self, memos: Path) -> None:
        """Before this process's first memo: when `CODE_FILE` names other plugin code than this one (or
        none: memos of a version before it), remove every memo there (their keys hash that code, so none
        can hit again, and committed ones would only grow the repository), then name this code. Also
        removes the `.gitignore` earlier versions wrote there (memos are now valid in any checkout). Two
        xdist workers retiring at once may remove each other's first memos: those items' next `on` run
        writes them again."""
        ignore = memos / ".gitignore"
        if read_bounded(str(ignore)) == OLD_IGNORE:
            ignore.unlink(missing_ok=True)
        marker, mine = memos / CODE_FILE, f"{code_fingerprint()}\n"
        if read_bounded(str(marker)) == mine:
            return
        with os.scandir(memos) as groups:  # links are not followed: nothing outside is removed
            for group in [g for g in groups if len(g.name) == 2 and g.is_dir(follow_symlinks=False)]:
                with os.scandir(group.path) as entries:
                    for stale in [e for e in entries if e.name.endswith(SUFFIX) and not e.is_dir(follow_symlinks=False)]:
                        os.unlink(stale.path)
        atomic_write_text(marker, mine, self.cache.directory)


def _compact(value: Any) -> str:
    """One line of compact ASCII JSON (a lone surrogate escaped, never written raw): a memo's lines
    split on newlines."""
    return json.dumps(value, separators=(",", ":"))


def memo_header(digest: str, key: str) -> str:
    """A memo's first line (item and load memos): `json.dumps({"digest", "key", "version"},
    sort_keys=True)` of these (hex texts), built by formatting; a reader compares it whole instead of
    parsing it."""
    return f'{{"digest": "{digest}", "key": "{key}", "{VERSION_KEY}": {FORMAT_VERSION}}}'


def _parse(text: str) -> Any:
    """JSON as `json.loads` reads it, by pydantic-core's parser (less than half the cost on a memo's
    lines) where that one reads it: it refuses a lone surrogate's escape, which `json.loads` accepts."""
    try:
        return from_json(text, cache_strings="keys")  # keys repeat from item to item, values rarely
    except ValueError:
        return json.loads(text)


def _sound(call: Call) -> bool:
    """A call row as written: a cache key of 64 lowercase hex digits (a committed memo is input like any
    other: its key names the file read, which must be an entry of this cache), text fields, a bool,
    non-negative token counts (exact types, what JSON gives: no generator per call)."""
    cache_key, phase, role, model, local, tokens_in, tokens_out = call
    return (type(cache_key) is str and _CACHE_KEY.fullmatch(cache_key) is not None and type(phase) is str
            and type(role) is str and type(model) is str and type(local) is bool and type(tokens_in) is int
            and tokens_in >= 0 and type(tokens_out) is int and tokens_out >= 0)


def count_calls(engine: Engine, calls: list[Call]) -> None:
    """Add to the engine's counters what replaying these cached calls counts (`Engine.complete`'s
    bookkeeping of a cache hit: the hit, the usage priced now, any model without a price)."""
    stats, prices = engine.stats, engine.prices
    for _key, phase, role, model, local, tokens_in, tokens_out in calls:
        stats.cache_hits += 1
        stats.usage[f"{phase}:{role}"].add(Usage(tokens_in, tokens_out,
                                                 prices.cost(model, tokens_in, tokens_out, local=local)))
    stats.unpriced.update(prices.unpriced)
