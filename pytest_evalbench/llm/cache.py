"""Content-addressed record/replay cache of LLM responses: one JSON file per call.

The key is the sha256 of the canonical JSON of everything that changes the output (endpoint
identity, model, messages, parameters, response format, sample index, re-ask attempt) and never
the API key. Files are written atomically (temp file + os.replace), so concurrent xdist workers
never see half an entry; an unreadable entry is a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

CacheMode = Literal["on", "off", "refresh", "replay"]
CACHE_MODES: tuple[str, ...] = ("on", "off", "refresh", "replay")
CACHE_VERSION = 1
_UMASK = os.umask(0)
os.umask(_UMASK)


def canonical_json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def cache_key(material: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json({"v": CACHE_VERSION, **material}).encode("utf-8")).hexdigest()


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temp file in the same directory and os.replace: readers see old or new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; result files should be like any other
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class ResponseCache:
    """File-per-entry cache honouring `--evalbench-cache` modes."""

    def __init__(self, directory: Path, mode: CacheMode = "on") -> None:
        self.directory = directory
        self.mode = mode

    @property
    def reads(self) -> bool:
        return self.mode in ("on", "replay")

    @property
    def writes(self) -> bool:
        return self.mode in ("on", "refresh")

    def path_for(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        if not self.reads:
            return None
        try:
            entry = json.loads(self.path_for(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        response = entry.get("response") if isinstance(entry, dict) else None
        return response if isinstance(response, dict) else None

    def forget(self, keys: list[str]) -> None:
        """Drop entries (an answer chain that ended unusable), unless this mode must not write."""
        if not self.writes:
            return
        for key in keys:
            try:
                self.path_for(key).unlink()
            except OSError:
                pass

    def put(self, key: str, request: dict[str, Any], response: dict[str, Any]) -> None:
        if not self.writes:
            return
        entry = {"key": key, "request": request, "response": response}
        atomic_write_text(self.path_for(key), json.dumps(entry, ensure_ascii=False, indent=1, sort_keys=True))
