"""This session's rows of one target, spooled to disk until the finish pass writes its run files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..file_version import versioned
from ..json_text import IndentedText, indented
from ..spool import Spool
from .models import ScenarioRecord

_LINE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""A spooled row's compact JSON line (no raw newline: the conversation's text follows the first one)."""


class TargetRows:
    """One target's rows from this session's records, spooled to disk as they come (only their
    keys stay in memory): the files are written from the spool, and what is aggregated and
    reported is read back from the files."""

    def __init__(self, directory: Path | None = None) -> None:
        self.spooled: Spool[tuple[str, int]] = Spool(directory)
        """(id, sample) -> one JSON line `[its usage by phase, scores.json row]`, then the
        conversations.json row as its indented JSON text (`json_text.indented`, version included):
        written as it is, never parsed again, and not parsed by the passes that read the rest."""

    def add(self, record: ScenarioRecord | dict[str, Any]) -> None:
        """A record, or its JSON (`record_to_json`'s: this session's spooled records are not validated again)."""
        source = record if isinstance(record, dict) else record.source or record.to_json()  # no dump again
        conversation = source["conversation"]
        head = _LINE.encode([source["usage"], source["score"]])
        text = indented(versioned(conversation))
        self.spooled.add_raw((conversation["id"], conversation["sample"]), f"{head}\n{text}".encode())

    def conversation(self, key: tuple[str, int]) -> IndentedText:
        return IndentedText(self.spooled.raw(key).partition(b"\n")[2].decode())

    def usage_and_score(self, key: tuple[str, int]) -> tuple[dict[str, Any], dict[str, Any]]:
        usage, score = json.loads(self.spooled.raw(key).partition(b"\n")[0])
        return usage, score

    def close(self) -> None:
        self.spooled.close()
