"""A disk that takes no more bytes (full, over quota, failing, read-only): the one error every writer
of the package raises for it (`WriteFailed`, naming the file), and the bytes a state file reserves so
that its final word still fits (`reserved`, `overwrite_reserved`). `files` does the writing; the
session's finish turns a `WriteFailed` into exit 7 and one line."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pytest_evalbench.base.safe_files import check_write

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

DISK_ERRNOS = frozenset(getattr(errno, name) for name in ("ENOSPC", "EDQUOT", "EFBIG", "EIO", "EROFS")
                        if hasattr(errno, name))
"""The errors of a disk that takes no more bytes: full, over quota, a file too large, failing, read-only."""


class WriteFailed(OSError):
    """A file the run writes that the disk did not take (full, over quota, failing, read-only). Raised
    by every writer of `files` (and by the record spool) in place of the OSError, so whoever
    ends the run states it in one line naming the file; the file's earlier content is unchanged (a
    replaced file is replaced whole or not at all, an appended one is cut back to where it was)."""

    def __init__(self, path: Path | str, cause: OSError, outcome: str = "its earlier content is unchanged") -> None:
        super().__init__(cause.errno, cause.strerror or type(cause).__name__, str(path))
        self.path = str(path)
        self.outcome = outcome
        """What the failure left as it was, in words (the same line says it)."""

    def __str__(self) -> str:
        return f"{self.path}: could not be written ({self.strerror}); {self.outcome}"


@contextmanager
def writing(path: Path | str, outcome: str | None = None) -> Iterator[None]:
    """The one place a write's disk error becomes `WriteFailed` naming `path` (and, when it is not
    "its earlier content is unchanged", what the failure leaves: `outcome`)."""
    try:
        yield
    except WriteFailed:
        raise
    except OSError as exc:
        if exc.errno not in DISK_ERRNOS:
            raise
        raise (WriteFailed(path, exc) if outcome is None else WriteFailed(path, exc, outcome)) from None


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
