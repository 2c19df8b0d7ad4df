"""Rows spooled to an anonymous file as they arrive, so memory does not grow with a run's results.

A session of 100,000 items must not hold 100,000 records (or conversations) until it writes its
files: each row is appended to a temporary file as one JSON line and only its key and byte range
stay in memory. Reading back is by key, in key order, one row at a time. The file has no name
on POSIX (unlinked at creation) and is removed when closed or when the process dies, so an
interrupted run leaves nothing behind; everything spooled so far can still be read back by the
process that wrote it (the session's interrupted-run accounting relies on that). A disk that takes
no more bytes is `files.WriteFailed` naming the spool, from the write that met it or any later use.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Hashable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Generic, NoReturn, TypeVar, cast

import orjson

from pytest_evalbench.base.safe_files import writing

K = TypeVar("K", bound=Hashable)
BUFFER = 1 << 16
"""Write buffer of the spool file: rows reach the disk in batches, not one write call each (every
system call lets the engine thread take the GIL, and the test loop waits to get it back)."""


SPAN_BITS = 40
"""A row's byte range is kept as one int, `offset << SPAN_BITS | size` (rows under 1 TB): one int
object per row instead of a tuple of two (~80 bytes less per row, 8 MB at 100,000 items)."""
SPAN_MASK = (1 << SPAN_BITS) - 1


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""Built once (`json.dumps` with options builds an encoder per call)."""
_ORJSON = orjson.OPT_APPEND_NEWLINE | orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS | \
    orjson.OPT_PASSTHROUGH_DATETIME


def encode_line(value: Any) -> bytes | None:
    """`value` as one compact JSON line by orjson, when its text reads back as `value` the way
    `json.loads` reads `_ENCODER`'s: None for a value orjson writes otherwise or not at all (NaN or an
    infinity, which it writes as null, so any text holding null is refused; an integer past 64 bits; a
    key that is not a string; a subclass, dataclass or date, which `json` refuses or writes its own way)."""
    try:
        line = orjson.dumps(value, option=_ORJSON)
    except orjson.JSONEncodeError:
        return None
    return None if b"null" in line else line


SPOOL_LOST = "the rows spooled are incomplete, so no result file is replaced"


class Spool(Mapping[K, Any], Generic[K]):
    """Key -> JSON value, stored on disk; a key added again replaces its earlier value.

    Iteration yields keys in sorted order (`sort_key` decides it), and `values()`/`items()` read
    one value at a time, so a pass over the whole spool holds one row in memory. Values go through
    JSON: they come back as a fresh `json.loads` of `json.dumps` of what was stored (orjson's line
    where `encode_line` vouches for it, else the standard library's).
    """

    def __init__(self, directory: Path | None = None, sort_key: Any = None) -> None:
        self._directory = directory
        self._sort_key = sort_key
        self._file: IO[bytes] | None = None
        self._end = 0
        self._index: dict[K, int] = {}
        """Key -> its byte range (`SPAN_BITS`)."""
        self._order: list[K] | None = None
        self._at_end = False
        """The file's position is the end of the data: appends need no seek (a seek flushes the
        write buffer, so seeking before every append made one write syscall per row)."""
        self._by_json: set[K] = set()
        """Keys whose value `add` wrote with the standard library (`encode_line` declined it): read
        back the same way; every other value is orjson's line, read back by orjson."""

    @property
    def where(self) -> str:
        """The spool as a failed write names it (its file has no name)."""
        return f"{self._directory or tempfile.gettempdir()}/.evalbench-spool-* (the run's record spool)"

    def _open(self) -> IO[bytes]:
        if self._file is None:
            try:
                self._file = tempfile.TemporaryFile(dir=self._directory, prefix=".evalbench-spool-",  # noqa: SIM115 (closed by close())
                                                    buffering=BUFFER)
            except OSError:  # e.g. a read-only benchmark directory: the system's temporary directory
                with writing(self.where, SPOOL_LOST):
                    self._file = tempfile.TemporaryFile(prefix=".evalbench-spool-", buffering=BUFFER)  # noqa: SIM115 (closed by close())
            self._at_end = True
        return self._file

    def add(self, key: K, value: Any) -> None:
        """Append `value` (anything `json.dumps` takes) under `key`."""
        self.add_parts(key, (value,))

    def add_parts(self, key: K, parts: Sequence[Any]) -> None:
        """Append `parts` under `key`, one JSON line each (`part` reads one back): all orjson's lines
        where `encode_line` vouches for every part, else all the standard library's."""
        lines = [encode_line(part) for part in parts]
        if None in lines:
            self.add_raw(key, b"".join(_ENCODER.encode(part).encode("utf-8") + b"\n" for part in parts))
            self._by_json.add(key)
        else:
            self.add_raw(key, b"".join(cast(list[bytes], lines)))
            self._by_json.discard(key)

    def add_raw(self, key: K, line: bytes) -> None:
        """Append `line` (any bytes) under `key`, for a caller that encodes its own values (`raw`
        reads them back; `part` only what `add` or `add_parts` wrote)."""
        handle = self._open()
        try:  # (no context manager per row: `_failed` names the spool in the rare error)
            if not self._at_end:
                handle.seek(self._end)
                self._at_end = True
            handle.write(line)
        except OSError as exc:
            self._failed(exc)
        if key not in self._index:
            self._order = None
        self._index[key] = self._end << SPAN_BITS | len(line)
        self._end += len(line)

    def __getitem__(self, key: K) -> Any:
        return self.part(key, 0)

    def part(self, key: K, index: int) -> Any:
        """The `index`th of the parts stored under `key` (by `add_parts`; `add` stores one), read back
        by the encoder that wrote it."""
        line = self.raw(key).split(b"\n", index + 1)[index]
        return json.loads(line) if key in self._by_json else orjson.loads(line)

    def raw(self, key: K) -> bytes:
        """The bytes stored under `key`, as `add_raw` (or `add`: a JSON line) stored them."""
        span = self._index[key]
        offset, size = span >> SPAN_BITS, span & SPAN_MASK
        assert self._file is not None
        self._at_end = False
        try:  # the seek writes out what is buffered
            self._file.seek(offset)
            return self._file.read(size)
        except OSError as exc:
            self._failed(exc)

    def _failed(self, exc: OSError) -> NoReturn:
        """`exc` raised as `safe_files.writing` makes it: `WriteFailed` naming the spool when the disk
        refused bytes, else as it is."""
        with writing(self.where, SPOOL_LOST):
            raise exc

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, key: object) -> bool:
        return key in self._index

    def __iter__(self) -> Iterator[K]:
        if self._order is None:
            self._order = sorted(self._index, key=self._sort_key)
        return iter(self._order)

    def close(self) -> None:
        """Remove the file (the spool is empty afterwards; what it could not write is dropped with it)."""
        if self._file is not None:
            try:
                self._file.close()
            except OSError:  # buffered rows the disk refused: the file is gone either way
                pass
        self._file, self._end, self._index, self._order, self._at_end = None, 0, {}, None, False
        self._by_json = set()

    def __repr__(self) -> str:
        return f"<Spool of {len(self)} rows>"
