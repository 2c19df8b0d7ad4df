"""Run files a finish would write again byte for byte are left as they are.

The output directory's `.written.json` notes, per target, what the last finish wrote to
`runs/<target>/` when the files held that session's rows only (nothing carried over from earlier
sessions): the digest of everything those bytes are made from (this package's code, the scenario
order, `num_samples`, the configured targets and the stored bytes of every record of the session)
and the SHA-256 of each file. A later session with the same inputs whose files on disk still have
those digests would write the very same bytes (a fully cached replay): it leaves them as they are
instead of encoding and writing them again. Any other change (a record, the code, an edit of a
file, a subset run that keeps other rows) writes the files as usual; a finish that writes them
forgets the target's note first (after reading what it merges) and notes it again only when they
hold its own rows only."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

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


class WrittenNote:
    """The output directory's `.written.json`: per target, the digest of the inputs its run files were
    last written from and each file's SHA-256 (`{"targets": {target: {"inputs", "files"}}, "version"}`),
    read once per finish, written under the result lock."""

    def __init__(self, directory: Path, root: Path) -> None:
        self.path, self.root = directory / WRITTEN, root
        self._targets: dict[str, Any] | None = None

    def _notes(self) -> dict[str, Any]:
        if self._targets is None:
            note = read_json(self.path, None)
            targets = note.get("targets") if isinstance(note, dict) and note.get("version") == FORMAT_VERSION else None
            self._targets = dict(targets) if isinstance(targets, dict) else {}
        return self._targets

    def unchanged(self, run_dir: Path, inputs: str) -> bool:
        """The target's run files hold what a finish with these inputs writes, byte for byte: the note
        says the last finish wrote them from the same inputs, and they are still the bytes it wrote."""
        entry = self._notes().get(run_dir.name)
        if not isinstance(entry, dict) or entry.get("inputs") != inputs:
            return False
        files = entry.get("files")
        return isinstance(files, dict) and files == file_digests(run_dir)

    def forget(self, target: str) -> None:
        """Before a target's run files are written: the note no longer says what they hold."""
        if self._notes().pop(target, None) is not None:
            self._save()

    def note(self, run_dir: Path, inputs: str) -> None:
        """After a finish wrote a target's run files from these inputs alone (no row carried over)."""
        files = file_digests(run_dir)
        if files is not None:
            self._notes()[run_dir.name] = {"inputs": inputs, "files": files}
            self._save()

    def _save(self) -> None:
        targets = self._notes()
        if not targets:
            self.path.unlink(missing_ok=True)
        else:
            dump_json(self.path, {"targets": dict(sorted(targets.items())), "version": FORMAT_VERSION}, self.root)
