"""Run files a finish would write again byte for byte are left as they are.

`runs/<target>/.written.json` notes what the last finish wrote there when the files hold that
session's rows only (nothing carried over from earlier sessions): the digest of everything those
bytes are made from (this package's code, the scenario order, `num_samples`, the configured targets
and the stored bytes of every record of the session) and the SHA-256 of each file. A later session
with the same inputs whose files on disk still have those digests would write the very same bytes
(a fully cached replay): it leaves them as they are instead of encoding and writing them again. Any
other change (a record, the code, an edit of a file, a subset run that keeps other rows) writes the
files as usual; a finish that writes them forgets the note first and notes them again only when
they hold its own rows only.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..costs import USAGE_LEDGER
from ..file_version import FORMAT_VERSION
from ..llm.item_memo import code_fingerprint
from ..store import dump_json, read_json

WRITTEN = ".written.json"
FILES = ("conversations.json", "scores.json", USAGE_LEDGER, "cost.json")
"""The files of `runs/<target>/` a finish writes from its records (and the note's digests cover)."""
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CHUNK = 1 << 20


def inputs_digest(lines: Iterable[bytes], order: Mapping[str, int], samples: int | None,
                  targets: set[str] | None) -> str:
    """SHA-256 over what a finish writes the run files from: the code, the order, the settings and
    every record's stored bytes (`lines`, in the order the finish reads them)."""
    digest = hashlib.sha256()
    context = [code_fingerprint(), FORMAT_VERSION, list(order), samples, sorted(targets) if targets is not None else None]
    digest.update(json.dumps(context, ensure_ascii=False).encode())
    for line in lines:
        digest.update(b"\n%d\n" % len(line))
        digest.update(line)
    return digest.hexdigest()


def file_digests(run_dir: Path) -> dict[str, str] | None:
    """SHA-256 of each run file as it is on disk; None when one is missing, unreadable or a link."""
    found: dict[str, str] = {}
    for name in FILES:
        try:
            fd = os.open(run_dir / name, os.O_RDONLY | _NOFOLLOW)
        except OSError:
            return None
        digest = hashlib.sha256()
        with os.fdopen(fd, "rb") as handle:
            while chunk := handle.read(CHUNK):  # hashed without the GIL
                digest.update(chunk)
        found[name] = digest.hexdigest()
    return found


def unchanged(run_dir: Path, inputs: str) -> bool:
    """The run files hold what a finish with these inputs writes, byte for byte: the note says the
    last finish wrote them from the same inputs, and they are still the bytes it wrote."""
    note = read_json(run_dir / WRITTEN, None)
    if not isinstance(note, dict) or note.get("version") != FORMAT_VERSION or note.get("inputs") != inputs:
        return False
    files = note.get("files")
    return isinstance(files, dict) and files == file_digests(run_dir)


def forget(run_dir: Path) -> None:
    """Before the run files are written: the note no longer says what they hold."""
    (run_dir / WRITTEN).unlink(missing_ok=True)


def note_written(run_dir: Path, inputs: str, root: Path) -> None:
    """After a finish wrote the run files from these inputs alone (no row carried over)."""
    files = file_digests(run_dir)
    if files is not None:
        dump_json(run_dir / WRITTEN, {"inputs": inputs, "files": files, "version": FORMAT_VERSION}, root)
