"""Writing and reading result files: the one atomic write of the package (every file the plugin writes:
result files, cache entries, the budget ledger, reports), JSON writers, the result-file lock, lenient reads of
earlier runs, and the `version` every result file carries.

A list file (scenarios.json, conversations.json, scores.json, results.json, case_results.json,
agent_summary.json, calibration.json) keeps its documented shape: each row ends with `"version": 1`.
An object file (cost.json, last_run.json, .sessions.json, .usage.json, a cache entry, a history.jsonl or
answers line) has its own `version` key. Readers accept files without it (written before it existed)
and refuse one written by a newer format with one line naming the file, rather than misreading it.
Where a write may go is checked by `safe_files`; this module does the writing.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import stat
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TextIO, TypeVar

import orjson
from filelock import FileLock, Timeout

from pytest_evalbench.base.errors import ConfigError, EvalbenchWarning, InputError, field_path
from pytest_evalbench.base.json_input import decode_row, parse_json
from pytest_evalbench.base.numbers import NonFiniteNumber, finite_json, refuse_non_finite
from pytest_evalbench.base.safe_files import DISK_ERRNOS, UnsafeWrite, check_dir, check_write, writing

if TYPE_CHECKING:  # pydantic is imported by the readers' callers; the writers (the LLM cache, which
    # the plugin imports for every pytest run) must not pay for it
    from pydantic import BaseModel

M = TypeVar("M", bound="BaseModel")
RESULTS_LOCK = ".results.lock"
LOCK_TIMEOUT = 600.0


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

def _temp_file(path: Path) -> tuple[int, Path]:
    """A new temp file next to `path`, created with mode 0o666 so the kernel applies the process's
    umask (result files get the same permissions as any file the user creates; mkstemp's 0o600
    would not). O_EXCL: an existing name, even a symbolic link, is never opened."""
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o666), tmp
        except FileExistsError:
            continue


@contextmanager
def atomic_open(path: Path, root: Path | None) -> Iterator[TextIO]:
    """A text handle whose content replaces `path` (temp file in the same directory + os.replace)
    when the block ends without an exception: readers see the old file or the new one, never half;
    on an exception the old file stays and the temp file goes. A disk that takes no more bytes is
    `WriteFailed` naming `path`.

    `root` is the directory the write must stay in (`safe_files.check_write`: no link out of it, no
    link or non-regular file at `path`). None only for files whose place was checked otherwise: a
    path the user named on the command line (`safe_files.check_output_file`), the LLM cache
    (`safe_files.check_tree`), the session's budget ledger (a file of its own temporary directory)."""
    if root is not None:
        check_write(path, root)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _temp_file(path)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                yield handle
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise


def atomic_write_text(path: Path, text: str, root: Path | None) -> None:
    """Replace `path` with `text` atomically (`root`: see `atomic_open`)."""
    with atomic_open(path, root) as handle:
        handle.write(text)


def copy_into(source: Path, path: Path, root: Path) -> None:
    """`source`'s bytes (a regular file, read within `MAX_INPUT_BYTES`) replacing `path` atomically,
    never through a link out of `root` (`shutil.copyfile` follows a link at the destination)."""
    data = read_bounded(source)
    with atomic_open(path, root) as handle:
        handle.flush()
        handle.buffer.write(data)


def publish(finished: Path, path: Path) -> None:
    """Move a file written elsewhere in full (e.g. a large binary streamed and checked first) to
    `path` in one rename: readers see nothing or all of it."""
    os.replace(finished, path)


def _open_append_fd(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | _NOFOLLOW, 0o666)


@contextmanager
def open_append(path: Path, root: Path) -> Iterator[BinaryIO]:
    """`path` (checked against `root`) opened for reading and appending in binary; created if new.
    The open itself refuses a symbolic link (O_NOFOLLOW), so a link made after the check is not
    followed either. When the block ends with an exception (a full disk: `WriteFailed`), the file is
    cut back to its size before the block, so a torn line is never left behind."""
    check_write(path, root)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = _open_append_fd(path)
        except OSError as exc:
            if exc.errno in DISK_ERRNOS:
                raise
            raise UnsafeWrite(f"{path}: cannot be opened for appending ({exc.strerror})") from None
        size = os.fstat(fd).st_size
        handle = os.fdopen(fd, "a+b")
        try:
            yield handle
            handle.flush()
        except BaseException:
            try:
                os.ftruncate(fd, size)
                os.close(fd)  # the handle's buffer is not flushed after the cut
            except OSError:
                pass
            try:
                handle.close()
            except OSError:
                pass
            raise
        handle.close()


@contextmanager
def results_lock(bench_dir: Path, timeout: float = LOCK_TIMEOUT, *, root: Path | None = None) -> Iterator[None]:
    """Hold the benchmark's exclusive result-file lock for a read-merge-write (portable: `filelock`
    uses fcntl/msvcrt, released by the OS if the holder dies), so concurrent sessions lose no rows.
    The lock file is checked first: opening it truncates it, so a symbolic link there (to a file
    outside `root`, the benchmark directory) is refused, never followed."""
    check_dir(bench_dir, root or bench_dir)
    bench_dir.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(check_write(bench_dir / RESULTS_LOCK, root or bench_dir)))
    try:
        lock.acquire(timeout=timeout)
    except Timeout:
        raise ConfigError(f"{bench_dir / RESULTS_LOCK}: another session has held the result files for "
                          f"{timeout:.0f}s; results of this session were not written") from None
    try:
        yield
    finally:
        lock.release()


class StreamedList:
    """A JSON array written from an iterable as the writer reaches it, never held as a list (iterable once)."""

    def __init__(self, items: Iterable[Any]) -> None:
        self.items = items


class StreamedDict:
    """A JSON object written from an iterable of (key, value) pairs as the writer reaches it (keys
    are expected unique; iterable once)."""

    def __init__(self, items: Iterable[tuple[str, Any]]) -> None:
        self.items = items


class _HasStreamed(Exception):
    """Raised inside orjson's `default` hook: the value holds a streamed container, write it in parts."""


def _streamed_default(value: Any) -> Any:
    if isinstance(value, (StreamedList, StreamedDict)):
        raise _HasStreamed
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _indented(text: bytes, level: int) -> bytes:
    """JSON text placed at nesting `level` (a newline inside JSON text is always layout)."""
    return text.replace(b"\n", b"\n" + b"  " * level) if level else text


def _write_value(write: Callable[[bytes], Any], value: Any, level: int) -> None:
    """Write `value` as indented JSON; streamed containers anywhere in it are written item by item.
    NaN or an infinity is refused (NonFiniteNumber): orjson writes them as null, so a text holding
    null is checked."""
    try:
        text = orjson.dumps(value, default=_streamed_default, option=orjson.OPT_INDENT_2)
        if b"null" in text:
            refuse_non_finite(value, "a result file")
        write(_indented(text, level))
        return
    except orjson.JSONEncodeError as exc:
        # a streamed container inside, or something orjson does not write (an integer beyond 64 bits,
        # a key that is not a string): containers are written part by part, so every other value is
        # written by orjson as it would be anyway, and such a leaf by `json`
        if not isinstance(exc.__cause__, _HasStreamed) and not isinstance(value, (dict, list)):
            write(finite_json(value, "a result file", ensure_ascii=False).encode("utf-8"))
            return
    pairs: Iterable[tuple[Any, Any]]
    if isinstance(value, (StreamedDict, dict)):
        pairs, brackets = (value.items if isinstance(value, StreamedDict) else value.items()), b"{}"
    else:
        pairs, brackets = ((None, v) for v in (value.items if isinstance(value, StreamedList) else value)), b"[]"
    pad = b"\n" + b"  " * (level + 1)
    first = True
    for key, item in pairs:
        write(brackets[:1] + pad if first else b"," + pad)
        first = False
        if brackets == b"{}":
            write(orjson.dumps(key if isinstance(key, str) else json.dumps(key)) + b": ")
        _write_value(write, item, level + 1)
    write(brackets if first else b"\n" + b"  " * level + brackets[1:])


def write_json(path: Path, data: Any, root: Path | None) -> None:
    """`data` as indented JSON (what `json.dumps(data, indent=2, ensure_ascii=False)` writes, plus a
    newline; orjson encodes), replacing `path` atomically (`root`: see `atomic_open`).
    `StreamedList`/`StreamedDict` anywhere in `data` are written as they are iterated: a file of
    100,000 rows is never one string or list."""
    with atomic_open(path, root) as handle:
        out = handle.buffer
        try:
            _write_value(out.write, data, 0)
        except NonFiniteNumber as exc:
            raise NonFiniteNumber(str(exc).replace("a result file", str(path), 1)) from None
        out.write(b"\n")


def dump_json(path: Path, data: Any, root: Path | None = None) -> None:
    """`data` as indented JSON, replacing `path` atomically, never through a link out of `root` (the
    benchmark directory; default the file's own directory, see safe_files)."""
    write_json(path, data, root or path.parent)


def dump_json_rows(path: Path, rows: Iterable[Any], root: Path | None = None) -> None:
    """A JSON list written one row at a time (atomically), byte for byte what `dump_json(path,
    list(rows))` writes, without holding the list."""
    write_json(path, StreamedList(rows), root or path.parent)


MAX_INPUT_BYTES = 64 * 1024 * 1024
"""Largest input or state file read (benchmark.yaml, scenarios.json, dataset JSONL, baselines,
result files): 64 MiB."""


class NotRegularFile(OSError):
    """A path that is not a regular file (a FIFO, a device such as /dev/zero, a directory): never read."""


class TooLarge(OSError):
    """A file that held more bytes than its reader's cap: read no further."""


_O_NONBLOCK: int = getattr(os, "O_NONBLOCK", 0)
_O_BINARY: int = getattr(os, "O_BINARY", 0)
READ_CHUNK = 1 << 20


def read_bounded(path: Path | str, limit: int | None = None) -> bytes:
    """The bytes of a regular file, at most `limit` of them: the one read of every input and state
    file. The size is counted from the bytes actually read (a link to /dev/zero or a growing file
    reports a size of 0 to `stat`); a FIFO, device or directory is refused (`NotRegularFile`) after
    a non-blocking open, before any byte is read; past `limit`, `TooLarge`. Other errors (a missing
    file) are the OSErrors `os.open` raises."""
    limit = MAX_INPUT_BYTES if limit is None else limit
    fd = os.open(path, os.O_RDONLY | _O_BINARY | _O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(f"not a regular file (a FIFO, device or directory): {path}")
        chunks: list[bytes] = []
        size = 0
        while True:
            asked = min(READ_CHUNK, limit + 1 - size)
            chunk = os.read(fd, asked)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise TooLarge(f"larger than {size_text(limit)}")
            if len(chunk) < asked and size == info.st_size:
                break  # a short read ending at the size `stat` gave: the end, without a read of nothing
    finally:
        os.close(fd)
    return b"".join(chunks)


def size_text(n: int) -> str:
    """A byte count as people read it (64 MiB, 4,096 bytes)."""
    return f"{n // 2**20} MiB" if n % 2**20 == 0 else f"{n:,} bytes"


def bounded_problem(exc: OSError) -> str:
    """The one line saying why `read_bounded` did not read a file."""
    if isinstance(exc, NotRegularFile):
        return "not a regular file (a FIFO, a device such as /dev/zero, or a directory): refused, not read"
    if isinstance(exc, TooLarge):
        return f"file is {exc}: not read further"
    if isinstance(exc, FileNotFoundError):
        return "file not found"
    return f"cannot read: {exc.strerror or type(exc).__name__}"


def dump_json_object(path: Path, items: Iterable[tuple[str, Any]], root: Path | None = None) -> None:
    """A JSON object written one member at a time (atomically), as `dump_json(path, dict(items))`
    writes it (keys are expected unique)."""
    write_json(path, StreamedDict(items), root or path.parent)


def read_json_or_default(path: Path, default: Any) -> Any:
    """A result file written by an earlier run, or `default` when it is missing or unreadable (one
    warning naming it when it is not a regular file, too large or nested too deep to parse)."""
    try:
        return parse_json(read_bounded(path).decode("utf-8"), path)
    except (NotRegularFile, TooLarge) as exc:
        warnings.warn(EvalbenchWarning(f"{path}: {bounded_problem(exc)}; ignored"), stacklevel=2)
    except InputError as exc:  # nested too deep, a number no file holds, a key given twice (a torn file: silent)
        if not exc.message.startswith("invalid JSON"):
            warnings.warn(EvalbenchWarning(f"{exc}; ignored"), stacklevel=2)
    except (OSError, ValueError):
        pass
    return default


_BLANK = re.compile(r"[ \t\r\n]*")


def iter_json_rows(path: Path) -> Iterator[dict[str, Any]]:
    """The object rows of a JSON list file, parsed one at a time (a result file of 100,000
    conversations is never one parsed list in memory). A missing file yields nothing; a file that
    is not a JSON list yields nothing, one that breaks off yields the rows before the break.
    Our own loop over the JSON reader's row decoder (`json_input.decode_row`, the stdlib's `raw_decode`)
    rather than ijson: each row is read by `json_input.parse_json`'s rule (as every other reader of
    these files reads: numbers that fit, no duplicate keys, bounded depth), with no new compiled
    dependency, at the same speed."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_NONBLOCK)
    except OSError:
        return
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device would block or never end
        os.close(fd)
        return
    handle = os.fdopen(fd, encoding="utf-8")
    with handle:
        buffer, position, eof = "", 0, False

        def fill() -> bool:
            nonlocal buffer, position, eof
            chunk = handle.read(READ_CHUNK)
            eof = not chunk
            buffer, position = buffer[position:] + chunk, 0
            return not eof

        def skip() -> None:  # JSON's whitespace, matched by a compiled pattern
            nonlocal position
            while True:
                found = _BLANK.match(buffer, position)
                position = found.end() if found else position
                if position < len(buffer) or not fill():
                    return

        try:
            skip()
            if buffer[position:position + 1] != "[":
                raise ValueError("not a list")
            position += 1
            while True:
                skip()
                if buffer[position:position + 1] == "]":
                    return
                while True:
                    try:
                        row, end = decode_row(buffer, position)
                        if end < len(buffer) or eof:  # a value ending with the buffer may go on
                            position = end
                            break
                    except json.JSONDecodeError:
                        if eof:
                            raise
                    fill()
                if isinstance(row, dict):
                    yield row
                skip()
                if buffer[position:position + 1] == ",":
                    position += 1
                elif buffer[position:position + 1] != "]":
                    raise ValueError("expected , or ]")
        except (ValueError, RecursionError):  # a torn or hostile file ends the rows
            pass
    return


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The object rows of a JSON list file written by an earlier run ([] when missing or unreadable),
    without their `version` (InputError for a row of a newer format)."""
    data = read_json_or_default(path, [])
    if not isinstance(data, list):
        return []
    return [unversioned(path, r, n) for n, r in enumerate(data, start=1) if isinstance(r, dict)]


def read_result(path: Path, default: Any, expected: type) -> Any:
    """A result file an earlier run wrote whose content this run merges with its own rows: `default`
    when it does not exist; an InputError naming it when it exists but is not JSON of the `expected`
    type (truncated, edited, unreadable). Merging a file read as empty would silently drop every row
    it held, and the run would still look complete."""
    try:
        text = read_bounded(path).decode("utf-8")
    except FileNotFoundError:
        return default
    except (NotRegularFile, TooLarge) as exc:
        raise InputError(path, f"{bounded_problem(exc)}; {_KEEP_HINT}") from None
    except (OSError, ValueError) as exc:
        problem = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise InputError(path, f"result file unreadable ({problem}); {_KEEP_HINT}") from None
    try:
        data = parse_json(text, path)
    except InputError as exc:
        if exc.message.startswith("invalid JSON"):
            raise InputError(path, f"result file is not valid JSON ({exc.message.removeprefix('invalid JSON: ')}, "
                             f"line {exc.row}: truncated or edited?); {_KEEP_HINT}") from None
        raise InputError(path, f"result file unusable: {exc.message}; {_KEEP_HINT}", field=exc.field) from None
    if not isinstance(data, expected):
        raise InputError(path, f"result file holds a JSON {type(data).__name__}, not a {expected.__name__}; "
                         f"{_KEEP_HINT}")
    return unversioned(path, data) if isinstance(data, dict) else data  # a list's rows: see `_valid`


_KEEP_HINT = ("its rows would be lost by merging this run's rows into it, so nothing was written: restore it "
              "from version control, or delete it to start over (a rerun replays this run's answers from the "
              "cache)")


def read_valid_rows(path: Path, model: type[BaseModel],
                    normalise: Callable[[dict[str, Any]], dict[str, Any]] = dict, *,
                    skip: Callable[[dict[str, Any]], bool] | None = None) -> list[dict[str, Any]]:
    """The usable rows of a result file on disk as JSON (see `read_valid`)."""
    return [row for row, _ in read_valid(path, model, normalise, stacklevel=3, skip=skip)]


def read_valid(path: Path, model: type[M], normalise: Callable[[dict[str, Any]], dict[str, Any]] = dict, *,
               stacklevel: int = 2, skip: Callable[[dict[str, Any]], bool] | None = None,
               ) -> list[tuple[dict[str, Any], M]]:
    """The usable rows of a result file on disk, whoever wrote it (an older version, another tool):
    each row normalised to this version's spelling, then kept if it validates as `model` (as JSON,
    to merge and write back unchanged, and as the model). Unusable rows are reported in one warning
    per file (file, 1-based row, first problem; pytest's warnings summary shows a repeated message
    once) and dropped, so this run's rows replace them; they never stop the run. A file that is not
    a JSON list at all is an InputError (`read_result`). Rows `skip` accepts (as read, after the
    version check; `version` still in them) are left out unread: rows the caller replaces anyway are
    never validated."""
    rows = [r for r in read_result(path, [], list) if isinstance(r, dict)]
    return list(_valid(path, rows, model, normalise, stacklevel + 1, skip))


def iter_valid(path: Path, model: type[M], normalise: Callable[[dict[str, Any]], dict[str, Any]] = dict,
               warn: bool = True) -> Iterator[tuple[dict[str, Any], M]]:
    """`read_valid`, one row at a time from the file (`iter_json_rows`: a large file is never one
    parsed list in memory); the warning, if any (and `warn`), comes once the file is read to its end."""
    yield from _valid(path, iter_json_rows(path), model, normalise, 3 if warn else None)


def _valid(path: Path, raw_rows: Iterable[dict[str, Any]], model: type[M],
           normalise: Callable[[dict[str, Any]], dict[str, Any]], stacklevel: int | None,
           skip: Callable[[dict[str, Any]], bool] | None = None,
           ) -> Iterator[tuple[dict[str, Any], M]]:
    from pydantic import ValidationError

    bad = []
    for number, raw in enumerate(raw_rows, start=1):
        if skip is not None:  # checked as read: a skipped row is not copied without its `version` first
            check_version(path, raw, number)
            if skip(raw):
                continue
        current = unversioned(path, raw, number)
        row = normalise(current)
        try:
            typed = model.model_validate(row)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = field_path(err.get("loc", ()), row)
            bad.append(f"row {number}: {loc + ': ' if loc else ''}{err.get('msg', 'invalid')}")
            continue
        yield row, typed
    if bad and stacklevel is not None:
        message = (f"{path}: {len(bad)} row{'s' if len(bad) > 1 else ''} unreadable by this version, "
                   f"dropped (this run's rows replace them): {'; '.join(bad[:3])}"
                   + (f"; +{len(bad) - 3} more" if len(bad) > 3 else ""))
        warnings.warn(EvalbenchWarning(message), stacklevel=stacklevel)


def count_rows(n: int, what: str) -> list[str]:
    """`["3 rows of <what>"]`, or [] for none: how dropped rows are reported."""
    return [f"{n} row{'s' if n > 1 else ''} of {what}"] if n else []


FORMAT_VERSION = 1
"""The format of every result file this version writes; raised when a file changes incompatibly."""
VERSION_KEY = "version"

_V = TypeVar("_V")


def versioned(row: dict[str, _V]) -> dict[str, Any]:
    """`row` with `"version": FORMAT_VERSION` as its last key (the documented keys keep their order)."""
    out: dict[str, Any] = {k: v for k, v in row.items() if k != VERSION_KEY}
    out[VERSION_KEY] = FORMAT_VERSION
    return out


def version_problem(data: object) -> str | None:
    """Why a row or object file cannot be read by this version (None: it can, with or without `version`)."""
    if not isinstance(data, dict) or VERSION_KEY not in data:
        return None
    version = data[VERSION_KEY]
    if isinstance(version, int) and not isinstance(version, bool) and 1 <= version <= FORMAT_VERSION:
        return None
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        return (f"written by a newer pytest-evalbench (file format version {version}; this version reads up to "
                f"{FORMAT_VERSION}): upgrade pytest-evalbench, or delete the file to start over")
    return f"unknown file format version {str(version)[:40]!r} (this version reads 1 to {FORMAT_VERSION})"


def check_version(path: Path | str, data: object, row: int | None = None) -> None:
    """InputError naming the file (and the 1-based row of a list file) when `data` is of an unknown version."""
    problem = version_problem(data)
    if problem is not None:
        raise InputError(path, problem, row=row, field=VERSION_KEY if row is not None else None)


def unversioned(path: Path | str, data: dict[str, _V], row: int | None = None) -> dict[str, _V]:
    """`data` without its `version` key, once `check_version` accepts it (what the models validate)."""
    check_version(path, data, row)
    return {k: v for k, v in data.items() if k != VERSION_KEY} if VERSION_KEY in data else data


GITIGNORE = ".gitignore"
GITIGNORE_MARK = "# pytest-evalbench: files every run writes, not meant for commit"
GITIGNORED = ("/runs/", "/results.json", "/case_results.json", "/agent_summary.json", "/last_run.json",
              "/report.html", "/history.jsonl", "/cost.json", "/.sessions.json", "/.usage.json", "/.results.lock", "/shards/",
              "/.evalbench-cache/.rate-limit*", "/.evalbench-cache/.endpoint-limits*", "/.evalbench-cache/.batches/")
"""Run outputs and run-time state. What a team commits stays out of it: benchmark.yaml and the data
files, the response cache (offline replay), answers/, calibration files and baseline.json."""


def keep_gitignore(bench_dir: Path) -> None:
    """Add the plugin's block to `<bench_dir>/.gitignore` once (a file with the block is left as it is),
    keeping every line already there."""
    path = bench_dir / GITIGNORE
    try:
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
    except (OSError, UnicodeDecodeError):
        return  # a file we cannot read is the user's own: never replaced
    if GITIGNORE_MARK in text:
        return
    block = "\n".join([GITIGNORE_MARK, *GITIGNORED]) + "\n"
    atomic_write_text(path, text + ("\n" if text and not text.endswith("\n") else "") + block, bench_dir)
