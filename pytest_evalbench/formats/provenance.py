"""Which session measured each result row: the `.sessions.json` stamps beside the result files.

The result files describe the configured benchmark and keep rows of earlier sessions; their bytes
do not depend on when a row was measured (`-n 4` and `-n 0`, a merged shard run and an unsharded
one write identical files). So the session that produced each row (its UTC time and git commit)
is kept apart, in one stamps per output directory, keyed like the gate's units:
`<target>|<row id>|<sample>` (a dataset case: `<agent>|<case_id>|0`). Reports read it to mark every
rate they show as measured in this session or carried over from an earlier one. Rows the stamps
does not know (files written before it existed, or by another tool) are carried over from
"an earlier session". Nothing here imports pytest.
"""

from __future__ import annotations

import subprocess
import time
import warnings
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_evalbench.base.errors import EvalbenchWarning, InputError
from pytest_evalbench.base.files import (
    FORMAT_VERSION,
    VERSION_KEY,
    NotRegularFile,
    TooLarge,
    atomic_write_text,
    bounded_problem,
    check_version,
    finite_json,
    read_bounded,
)
from pytest_evalbench.base.json_input import parse_json

SESSIONS_FILE = ".sessions.json"
EARLIER = "an earlier session"
"""What a row without a recorded session is carried over from."""


def unit_key(target: str, row_id: str, sample: int = 0) -> str:
    """The stamps's key of one result row (scenario row × target × sample, or a dataset case)."""
    return f"{target}|{row_id}|{sample}"


def git_commit(root: Path) -> str | None:
    """The checked-out commit (short), with `+dirty` when the work tree has changes; None outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, check=False,
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "") if head else None


@dataclass(frozen=True)
class SessionStamp:
    """One session as rows record it: when it wrote (UTC) and at which commit (None outside git)."""

    time: str
    commit: str | None

    @classmethod
    def now(cls, root: Path) -> SessionStamp:
        return cls(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), git_commit(root))

    def label(self) -> str:
        """`2026-11-24T10:00:00Z abc1234` (`no commit` outside git)."""
        return f"{self.time} {self.commit or 'no commit'}"

    def to_json(self) -> dict[str, Any]:
        return {"time": self.time, "commit": self.commit}

    @classmethod
    def from_json(cls, data: Any) -> SessionStamp | None:
        if not isinstance(data, dict) or not isinstance(data.get("time"), str):
            return None
        commit = data.get("commit")
        return cls(data["time"][:40], commit[:60] if isinstance(commit, str) else None)


def read_sessions(directory: Path) -> dict[str, SessionStamp]:
    """Row key -> the session that measured it ({} when the stamps is missing or unreadable; a
    malformed entry is left out, so its row reads as carried over from an earlier session)."""
    path = directory / SESSIONS_FILE
    try:
        data = parse_json(read_bounded(path).decode("utf-8"), path)
    except (NotRegularFile, TooLarge, InputError) as exc:
        if isinstance(exc, InputError) and exc.message.startswith("invalid JSON"):
            return {}  # torn: as before, silently
        problem = bounded_problem(exc) if isinstance(exc, OSError) else exc.message
        warnings.warn(EvalbenchWarning(f"{path}: {problem}; ignored (its rows read as carried over from an "
                                       "earlier session)"), stacklevel=2)
        return {}
    except (OSError, ValueError):
        return {}
    check_version(directory / SESSIONS_FILE, data)
    if not isinstance(data, dict) or not isinstance(data.get("sessions"), list) or not isinstance(data.get("rows"), dict):
        return {}
    stamps = [SessionStamp.from_json(s) for s in data["sessions"]]
    out = {}
    for key, index in data["rows"].items():
        if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(stamps):
            stamp = stamps[index]
            if stamp is not None:
                out[key] = stamp
    return out


class StampedRows(Mapping[str, SessionStamp]):
    """`read_sessions(directory)`, read when first looked up. Reports look up only rows carried over
    from earlier sessions: a run that measured every row never reads the stamps back (100,000 keys
    at 100,000 items, otherwise held through the whole finish pass)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._rows: dict[str, SessionStamp] | None = None

    def _read(self) -> dict[str, SessionStamp]:
        if self._rows is None:
            self._rows = read_sessions(self.directory)
        return self._rows

    def __getitem__(self, key: str) -> SessionStamp:
        return self._read()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())


def update_sessions(directory: Path, measured: Iterable[str], live: Collection[str],
                    stamp: SessionStamp | None, root: Path | None = None) -> None:
    """Record `stamp` for the rows this session wrote and forget rows no longer in the result files
    (`live`); called by the stores under the result lock, after the files are written. No write
    leaves `root` (default `directory`)."""
    rows = {k: v for k, v in read_sessions(directory).items() if k in live}
    if stamp is not None:
        rows.update(dict.fromkeys((k for k in measured if k in live), stamp))
    if not rows and not (directory / SESSIONS_FILE).exists():
        return
    sessions: dict[SessionStamp, int] = {}
    # the keys sorted, not the rows' (key, stamp) pairs: one tuple less per row (100,000 at 100,000 items)
    indexed = {key: sessions.setdefault(rows[key], len(sessions)) for key in sorted(rows)}
    del rows  # the index replaces it before the file's text is built
    stamps = {"sessions": [s.to_json() for s in sessions], "rows": indexed, VERSION_KEY: FORMAT_VERSION}
    path = directory / SESSIONS_FILE
    atomic_write_text(path, finite_json(stamps, path, ensure_ascii=False) + "\n", root or directory)


def carried_label(keys: Iterable[str], sessions: Mapping[str, SessionStamp]) -> str:
    """Where rows carried over come from: one session's `time commit`, or the newest of several."""
    stamps = {sessions.get(k) for k in keys}
    known = sorted((s for s in stamps if s is not None), key=lambda s: s.time)
    if not known:
        return EARLIER
    if len(stamps) == 1:
        return known[0].label()
    return f"{len(stamps)} earlier sessions, latest {known[-1].label()}"
