"""The load memo: scenarios.json's rows as a session keeps them (`runner.StoredScenario`), remembered
in the cache directory so a session that reads the very same file under the very same benchmark.yaml
and package code does not parse and validate every row again (issue 27: 10,000 rows took a third
of a cached replay's start).

`<cache>/.loads/<name>.load` (one per data file: `<name>` hashes its path, so benchmarks sharing a
cache directory keep one each; git-ignored): a first line `{"digest", "key", "version"}`, then the
payload, one line of compact ASCII JSON: `{"rows": [[id, metric_id, metric_type, demographic, row
JSON], ...], "warnings": [[message, filename, lineno], ...]}`. `key` is the SHA-256 of the
package's code fingerprint, benchmark.yaml as loaded and scenarios.json's path and bytes; `digest`
the SHA-256 of the payload. Written only with a cache that writes (`on`, `refresh`) by a session
that ran items after a load that succeeded, read with one that reads (`on`, `replay`); a memo whose
key, digest or version does not match, or that does not parse, is a miss (the file is loaded as
usual), never an error. A load's warnings (unknown keys) are given again on a hit.

The same payload carries an xdist controller's rows to its workers (`RowHandoff`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, cast

from ..errors import EvalbenchWarning
from ..input_json import MAX_INPUT_BYTES
from ..llm.cache import read_bounded
from ..llm.item_memo import code_fingerprint, memo_header
from ..safe_files import UnsafeWrite, check_dir
from ..spec import BenchmarkSpec, MetricType
from ..store import atomic_write_text
from .runner import StoredScenario

METRIC_TYPES = (None, "positive", "negative")
LOADS_DIR = ".loads"
MEMO_SUFFIX = ".load"


def memo_key(path: Path, spec: BenchmarkSpec, data: bytes) -> str:
    """What the stored rows (and the warnings, which name the file) are made from: the code, the spec,
    the file's path and bytes."""
    material = json.dumps([code_fingerprint(), spec.model_dump(mode="json"), str(path), hashlib.sha256(data).hexdigest()],
                          sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return hashlib.sha256(material.encode()).hexdigest()


def memo_path(cache_dir: Path, path: Path) -> Path:
    """The memo of data file `path` in `cache_dir`: named by its path (its content is in the key)."""
    name = hashlib.sha256(str(path).encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return cache_dir / LOADS_DIR / f"{name}{MEMO_SUFFIX}"


def _file_bytes(path: Path) -> bytes | None:
    """The file as `input_json.read_text` reads it (None where that read would fail: it reports why)."""
    try:
        if not path.is_file() or path.stat().st_size > MAX_INPUT_BYTES:
            return None
        return path.read_bytes()
    except OSError:
        return None


Warned = tuple[str, str, int]
"""A load's warning as kept: message, file name, line."""


def pack_rows(rows: Iterable[StoredScenario], caught: Iterable[Warned]) -> str:
    """Rows as kept and the load's warnings as one line of compact ASCII JSON: a memo's payload, and
    what an xdist controller hands its workers (`unpack_rows`)."""
    return json.dumps({
        "rows": [[r.id, r.metric_id, r.metric_type, list(r.demographic), r.row_json] for r in rows],
        "warnings": [list(w) for w in caught]}, separators=(",", ":"))  # ASCII: no raw newline or lone surrogate


def unpack_rows(payload: str) -> tuple[list[StoredScenario], list[Warned]] | None:
    """What `pack_rows` packed, or None when `payload` is not that."""
    try:
        return _restored(json.loads(payload))
    except (ValueError, TypeError, AttributeError, RecursionError):
        return None


def loader_warnings(caught: Iterable[warnings.WarningMessage]) -> list[Warned] | None:
    """A load's recorded warnings as kept, or None when one is not the loader's own: rows restored
    from elsewhere could not give it again."""
    caught = list(caught)
    if not all(w.category is EvalbenchWarning for w in caught):
        return None
    return [(str(w.message), w.filename, w.lineno) for w in caught]


class RowHandoff:
    """A scenario kind's rows between xdist's processes: the controller's preflight loads them once,
    and each worker takes them (`plugin/workers.py`) instead of parsing and validating the file again
    (at N = 10,000 a worker's collection took 0.49-0.56 s, with them 0.31-0.32 s)."""

    __slots__ = ("handed", "rows")

    def __init__(self) -> None:
        self.rows: list[StoredScenario] = []
        """What this process's load gave (set by the kind's `load_cases`)."""
        self.handed: str | None = None
        """On a worker: what its controller handed over (`pack`), until the load takes it."""

    def pack(self, caught: Iterable[warnings.WarningMessage]) -> str | None:
        """The rows and the load's warnings `caught` (given again where they are taken); None before a
        load, or when a warning is not the loader's own."""
        kept = loader_warnings(caught)
        return pack_rows(self.rows, kept) if self.rows and kept is not None else None

    def take(self) -> str | None:
        """What was handed over, once (rows that do not restore mean the file is loaded as usual)."""
        handed, self.handed = self.handed, None
        return handed


def _warn_again(caught: Iterable[Warned]) -> None:
    for message, filename, lineno in caught:  # as the load gave them
        warnings.warn_explicit(EvalbenchWarning(message), EvalbenchWarning, filename, lineno)


def _restored(payload: Any) -> tuple[list[StoredScenario], list[Warned]] | None:
    if not isinstance(payload, dict) or not isinstance(payload.get("rows"), list):
        return None
    rows = []
    for sid, metric_id, metric_type, keywords, row_json in payload["rows"]:
        if not (type(sid) is str and type(metric_id) is str and type(row_json) is str and type(keywords) is list
                and metric_type in METRIC_TYPES
                and all(type(k) is str for k in keywords)):
            return None
        rows.append(StoredScenario.restored(sid, metric_id, cast("MetricType | None", metric_type),
                                            tuple(sys.intern(k) for k in keywords),
                                            row_json.encode("utf-8")))
    caught = [(str(message), str(filename), int(lineno)) for message, filename, lineno in payload.get("warnings", [])]
    return rows, caught


def _read(memo: Path, key: str) -> tuple[list[StoredScenario], list[Warned]] | None:
    """The memo's rows when its first line is exactly the header `_write` writes for this key and its
    payload's digest. Read as the item memo is (`read_bounded`): a huge planted file is never loaded."""
    text = read_bounded(str(memo))
    if text is None or not text.isascii():
        return None
    header, newline, payload = text.partition("\n")
    if not newline or header != memo_header(hashlib.sha256(payload.encode("ascii")).hexdigest(), key):
        return None
    return unpack_rows(payload)


def _write(directory: Path, memo: Path, key: str, rows: list[StoredScenario], caught: list[Warned]) -> None:
    try:
        payload = pack_rows(rows, caught)
        header = memo_header(hashlib.sha256(payload.encode("ascii")).hexdigest(), key)
        loads = check_dir(directory / LOADS_DIR, directory)
        if not loads.is_dir():
            loads.mkdir(parents=True, exist_ok=True)
            atomic_write_text(loads / ".gitignore", "# load memos: an optimisation of this machine's runs\n*\n",
                              directory)
        atomic_write_text(memo, f"{header}\n{payload}", directory)
    except (OSError, ValueError, UnsafeWrite):  # a memo is an optimisation, never an error of the run (nor
        pass  # written through a link)


def load_rows(path: Path, spec: BenchmarkSpec, cache_dir: Path, reads: bool, writes: bool,
              load: Callable[[], Iterable[StoredScenario]], handed: str | None = None,
              ) -> tuple[list[StoredScenario], Callable[[], None] | None]:
    """scenarios.json's rows: those `handed` over (`pack_rows`: an xdist worker gets what its controller
    loaded), else from the memo when it matches, else `load()`ed (its errors raised as they are); and,
    with a cache that writes, what remembers them for the next session, called by a session that ran
    (an estimate or `--collect-only` writes nothing)."""
    found = unpack_rows(handed) if handed is not None else None
    if found is not None:
        _warn_again(found[1])
        return found[0], None
    data = _file_bytes(path) if reads or writes else None
    if data is None:
        return list(load()), None
    key = memo_key(path, spec, data)
    memo = memo_path(cache_dir, path)
    found = _read(memo, key) if reads else None
    if found is not None:
        _warn_again(found[1])
        return found[0], None
    if not writes:
        return list(load()), None
    with warnings.catch_warnings(record=True) as recorded:
        warnings.simplefilter("always")
        rows = list(load())
    for caught_warning in recorded:  # given on, as the load gave them
        warnings.warn_explicit(caught_warning.message, caught_warning.category, caught_warning.filename,
                               caught_warning.lineno)
    kept = loader_warnings(recorded)
    if kept is None or _file_bytes(path) != data:  # not what was loaded
        return rows, None
    return rows, functools.partial(_write, cache_dir, memo, key, rows, kept)
