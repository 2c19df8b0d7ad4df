"""The `version` every result file carries, in one place (issue 26).

A list file (scenarios.json, conversations.json, scores.json, results.json, case_results.json,
agent_summary.json, calibration.json) keeps its documented shape: each row ends with
`"version": 1`. An object file (cost.json, last_run.json, .sessions.json, .usage.json, a cache
entry, a history.jsonl or answers line) has its own `version` key. Readers accept files without
it (written before it existed) and refuse one written by a newer format with one line naming the
file, rather than misreading it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from pytest_evalbench.errors import InputError

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
