"""This session's rows of one target, spooled to disk until the finish pass writes its run files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytest_evalbench.file_version import versioned
from pytest_evalbench.scenarios.models import ScenarioRecord
from pytest_evalbench.spool import Spool

_LINE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""A spooled row's compact JSON line (no raw newline: the three lines of a row split on newlines)."""
_READ = json.JSONDecoder().raw_decode
"""A spooled line back (as `json.loads` reads it: a line this class wrote, no whitespace around it to skip)."""


class TargetRows:
    """One target's rows from this session's records, spooled to disk as they come (only their
    keys stay in memory): the files are written from the spool, and what is aggregated and
    reported is read back from the files."""

    def __init__(self, directory: Path | None = None) -> None:
        self.spooled: Spool[tuple[str, int]] = Spool(directory)
        """(id, sample) -> its usage by phase, its scores.json row and its conversations.json row
        (version included), a compact JSON line each (the ledger's pass parses the first only)."""

    def add(self, record: ScenarioRecord | dict[str, Any]) -> None:
        """A record, or its JSON (`record_to_json`'s: this session's spooled records are not validated again)."""
        source = record if isinstance(record, dict) else record.source or record.to_json()  # no dump again
        conversation = source["conversation"]
        usage, score = _LINE.encode(source["usage"]), _LINE.encode(source["score"])
        text = _LINE.encode(versioned(conversation))
        self.spooled.add_raw((conversation["id"], conversation["sample"]), f"{usage}\n{score}\n{text}".encode())

    def conversation(self, key: tuple[str, int]) -> dict[str, Any]:
        conversation: dict[str, Any] = _READ(self.spooled.raw(key).split(b"\n", 2)[2].decode())[0]
        return conversation

    def score(self, key: tuple[str, int]) -> dict[str, Any]:
        score: dict[str, Any] = _READ(self.spooled.raw(key).split(b"\n", 2)[1].decode())[0]
        return score

    def usage(self, key: tuple[str, int]) -> dict[str, Any]:
        usage: dict[str, Any] = _READ(self.spooled.raw(key).partition(b"\n")[0].decode())[0]
        return usage

    def close(self) -> None:
        self.spooled.close()
