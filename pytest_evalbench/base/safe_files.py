"""Where writes may go: no result file follows a symlink out of the benchmark directory.

A pull request can commit symbolic links (git stores them): `runs/` pointing at a home directory,
`history.jsonl` at a dotfile, `.results.lock` at a file the lock would truncate. Every write of the
plugin under a benchmark directory is checked by this module (`store` does the writing): the parent
directory is resolved and must be the benchmark directory or below it, the file itself must not be
a symbolic link nor anything but a regular file (`store.atomic_open` then replaces the file
atomically). The session checks the same places once before the first LLM call (a usage error,
exit 4), so a refused write never costs a run.

Paths the user names on the command line (`--evalbench-html=PATH`, `--evalbench-markdown`,
`--evalbench-save-baseline`, `--junitxml`) are the user's choice and may be anywhere, but must be a
regular file or new, in a directory a file can be created in. Files read (the baseline to compare
with) must be regular files: a device or a fifo would never end. Nothing here imports pytest.

Full disks. A disk that takes no more bytes (full, over quota, failing, read-only): the one error every
writer of the package raises for it (`WriteFailed`, naming the file), and the bytes a state file reserves
so that its final word still fits (`reserved`, `overwrite_reserved`). `files` does the writing; the
session's finish turns a `WriteFailed` into exit 7 and one line.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pytest_evalbench.base.errors import ConfigError


class UnsafeWrite(ConfigError):
    """A write that would leave the benchmark directory, go through a symbolic link or land on
    something other than a regular file; nothing was written."""


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _kind(mode: int) -> str:
    return ("a directory" if stat.S_ISDIR(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a fifo" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


def check_dir(directory: Path, root: Path) -> Path:
    """`directory`, if it is `root` or resolves below it (existing symbolic links followed), and is
    a directory when it exists; else UnsafeWrite."""
    real_root = root.resolve()
    real = directory.resolve()
    if not _inside(real, real_root):
        raise UnsafeWrite(f"{directory}: resolves to {real}, outside the benchmark directory {real_root}; "
                          "the plugin never writes through a link out of it (remove the link)")
    if directory.exists() and not directory.is_dir():
        raise UnsafeWrite(f"{directory}: is not a directory; the plugin writes its files there")
    return directory


def check_write(path: Path, root: Path) -> Path:
    """`path`, if writing it stays inside `root`: its parent resolves to `root` or below, and the
    file is new or a regular file, never a symbolic link. Else UnsafeWrite (nothing is written)."""
    check_dir(path.parent, root)
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise UnsafeWrite(f"{path}: cannot be checked before writing ({exc.strerror})") from None
    if stat.S_ISLNK(mode):
        raise UnsafeWrite(f"{path}: is a symbolic link; the plugin never writes through a link (remove it)")
    if not stat.S_ISREG(mode):
        raise UnsafeWrite(f"{path}: is {_kind(mode)}, not a regular file; the plugin writes a file there")
    return path


def write_problem(directory: Path) -> str | None:
    """Why no file can be created in `directory` (read-only, not a directory, /proc...), or None
    when it can. Nothing is left behind: a temporary file is created and removed in the directory,
    or, when it does not exist yet, in its nearest existing ancestor (which must be a directory:
    the plugin creates the missing ones when it writes)."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    try:
        fd, name = tempfile.mkstemp(dir=existing, prefix=".evalbench-probe-")
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        return str(exc.strerror or exc)
    return None


def check_writable_dir(directory: Path, what: str) -> Path:
    """`directory` if files can be created in it (or, when missing, it can be created); else a
    ConfigError naming `what`."""
    problem = write_problem(directory)
    if problem is not None:
        raise ConfigError(f"{directory}: {what} is not writable ({problem}); choose a directory this process "
                          "can create files in")
    return directory


def check_output_file(path: Path, option: str, *, new_dirs: bool = True) -> Path:
    """A file the user named on the command line: new or a regular file (a symbolic link to one is
    the user's choice), in a directory where files can be created (one that does not exist yet
    only with `new_dirs`: the writer creates it); else ConfigError."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise ConfigError(f"{option}={path}: cannot be checked ({exc.strerror})") from None
    if mode is not None and not stat.S_ISREG(mode):
        raise ConfigError(f"{option}={path}: is {_kind(mode)}; give the path of a regular file (or a new one)")
    if not new_dirs and not path.parent.is_dir():
        raise ConfigError(f"{option}={path}: directory {path.parent} does not exist")
    problem = write_problem(path.parent)
    if problem is not None:
        raise ConfigError(f"{option}={path}: no file can be written in {path.parent} ({problem}); give a "
                          "writable location")
    return path


def check_input_file(path: Path, what: str) -> Path:
    """A file to read that must be a regular file (a device or fifo would never end, a directory
    has no content); missing files are left to the reader's own message. ConfigError otherwise."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return path
    if not stat.S_ISREG(mode):
        raise ConfigError(f"{path}: {what} is {_kind(mode)}, not a regular file")
    return path


def check_tree(root: Path, directories: Iterable[Path] = (), files: Iterable[Path] = (),
               entries_of: Iterable[Path] = ()) -> None:
    """Before a run writes anything: each of `directories` must resolve inside `root`; each of
    `files` must be new or a regular file whose directory resolves inside `root`; every subdirectory
    or link in each of `entries_of` (e.g. the cache's `ab/` directories) must resolve inside `root`.
    UnsafeWrite names the first offender."""
    for directory in directories:
        check_dir(directory, root)
    for path in files:
        check_write(path, root)
    for parent in entries_of:
        if parent.is_dir():
            for entry in sorted(parent.iterdir()):
                if entry.is_symlink() or entry.is_dir():
                    check_dir(entry, root)


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

DISK_ERRNOS = frozenset(getattr(errno, name) for name in ("ENOSPC", "EDQUOT", "EFBIG", "EIO", "EROFS")
                        if hasattr(errno, name))
"""The errors of a disk that takes no more bytes: full, over quota, a file too large, failing, read-only."""


class WriteFailed(OSError):
    """A file the run writes that the disk did not take (full, over quota, failing, read-only). Raised
    by every writer of `files` (and by the record spool) in place of the OSError, so whoever
    ends the run states it in one line naming the file; the file's earlier content is unchanged (a
    replaced file is replaced whole or not at all, an appended one is cut back to where it was)."""

    def __init__(self, path: Path | str, cause: OSError, consequence: str = "its earlier content is unchanged") -> None:
        super().__init__(cause.errno, cause.strerror or type(cause).__name__, str(path))
        self.path = str(path)
        self.consequence = consequence
        """What the failure left as it was, in words (the same line says it)."""

    def __str__(self) -> str:
        return f"{self.path}: could not be written ({self.strerror}); {self.consequence}"


@contextmanager
def writing(path: Path | str, consequence: str | None = None) -> Iterator[None]:
    """The one place a write's disk error becomes `WriteFailed` naming `path` (and, when it is not
    "its earlier content is unchanged", what the failure leaves: `consequence`)."""
    try:
        yield
    except WriteFailed:
        raise
    except OSError as exc:
        if exc.errno not in DISK_ERRNOS:
            raise
        raise (WriteFailed(path, exc) if consequence is None else WriteFailed(path, exc, consequence)) from None


RESERVED_BYTES = 4096
"""What a state file that must always get its last word (last_run.json) holds from the start: its
final text overwrites these bytes when the disk refuses a new file (`overwrite_reserved`)."""


def reserved(text: str) -> str:
    """`text` followed by spaces up to `RESERVED_BYTES` (JSON allows whitespace after the value)."""
    return text + " " * max(0, RESERVED_BYTES - len(text.encode("utf-8")))


def overwrite_reserved(path: Path, text: str, root: Path) -> None:
    """`text` written over the bytes `path` already holds (padded with spaces to its size), for when
    the disk refuses a new file: blocks a file has are rewritten without asking the disk for more.
    Not atomic (a crash in the write leaves a torn file), so only the fallback of `atomic_write_text`;
    `WriteFailed` when `text` does not fit in the file or the write fails."""
    check_write(path, root)
    data = text.encode("utf-8")
    with writing(path):
        fd = os.open(path, os.O_WRONLY | _NOFOLLOW)
        try:
            size = os.fstat(fd).st_size
            if len(data) > size:
                raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)}; its reserved {size:,} bytes hold "
                                            f"less than the {len(data):,} to write")
            data += b" " * (size - len(data))
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
