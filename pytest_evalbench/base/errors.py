"""Error types of pytest-evalbench.

Every error a user can cause or meet carries one readable line: where (file, row, field) and
what to do. The pytest layer turns them into collection errors, usage errors or item ERRORs
without a traceback wall.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_evalbench.base.safe_text import redact, terminal


class EvalbenchError(Exception):
    """Base class of all errors raised by pytest-evalbench."""


MAX_SHOWN_ERRORS = 20
"""A file's problems shown at once; more are counted (`and N more`)."""


class InputError(EvalbenchError):
    """A benchmark file is missing, unparseable or violates its schema."""

    def __init__(self, path: Path | str, message: str, *, row: str | int | None = None,
                 field: str | None = None, also: Sequence[tuple[str | None, str]] = (),
                 others: Sequence[str] = (), total: int | None = None) -> None:
        self.path = str(path)
        self.row = row
        self.field = field
        self.message = message
        self.also = list(also)
        """More problems of the same file and row, as (field, message): each is shown on its own line."""
        self.others = list(others)
        """More problems of the same file in other rows, each a line as `lines()` writes it."""
        self.total = total if total is not None else 1 + len(self.also) + len(self.others)
        super().__init__(self.__str__())

    @classmethod
    def gather(cls, errors: Sequence[InputError], total: int) -> InputError:
        """One error that shows `errors` (the first ones found of a file's `total`), each on its line."""
        first = errors[0]
        others = [line for error in errors[1:] for line in error.lines()]
        return cls(first.path, first.message, row=first.row, field=first.field, also=first.also, others=others,
                   total=max(total, 1 + len(first.also) + len(others)))

    def _where(self, field: str | None) -> str:
        where = self.path
        if self.row is not None:
            where += f", row {self.row}" if not isinstance(self.row, int) else f":{self.row}"
        if field:
            where += f", field '{field}'"
        return where

    def lines(self) -> list[str]:
        """Each problem on one line, with its file, row and field."""
        return [f"{self._where(self.field)}: {self.message}",
                *(f"{self._where(field)}: {message}" for field, message in self.also), *self.others]

    def __str__(self) -> str:
        lines = self.lines()
        if self.total == 1:
            return lines[0]
        shown = lines[:MAX_SHOWN_ERRORS]
        if self.total > len(shown):
            shown.append(f"and {self.total - len(shown)} more")
        return f"{self.total} problems:\n" + "\n".join(shown)


_NAMED_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
"""An entry's `id` that can name it in a field path (`metrics[m01].type`): one a reader can find."""


def field_path(loc: Sequence[int | str], data: Any = None, *, by_id: bool = True) -> str:
    """The dotted field path of an error location (pydantic's `loc`, jsonschema's path). A list entry
    with an `id` is named by it (`metrics[m01].type`, as the file names it), others by their position
    counted from 1, as every position in a message is (`by_id=False`: positions only). `data`, the
    validated input, tells a list position from a mapping key that happens to be a number (YAML
    `{1: x}`); without it every number is taken for a list position."""
    parts: list[str] = []
    node = data
    for part in loc:
        if isinstance(part, int) and not isinstance(part, bool) and (data is None or isinstance(node, list)):
            entry = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
            ident = entry.get("id") if isinstance(entry, dict) else None
            if (by_id and parts and isinstance(ident, str) and _NAMED_ID.fullmatch(ident)
                    and sum(isinstance(e, dict) and e.get("id") == ident for e in node) == 1):  # unique: it names one
                parts[-1] += f"[{ident}]"
            else:
                parts.append(str(part + 1))
        else:
            parts.append(str(part))
        inside = ((isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node))
                  or (isinstance(node, dict) and part in node))
        if inside:
            node = node[part]
        elif data is not None:
            node = None  # a union member's tag (`str`, `function-after[...]`) or a missing key
    return ".".join(parts)


class EvalbenchWarning(UserWarning):
    """Something the run tolerated but people should know: unknown keys kept, unreadable result
    rows replaced. Issued with `warnings.warn`, so pytest shows it in its warnings summary."""

    def __init__(self, message: str) -> None:
        super().__init__(terminal(message))  # it quotes input and result files, and is shown in a terminal


class ConfigError(EvalbenchError):
    """Command-line or environment configuration that cannot work."""


class LLMError(EvalbenchError):
    """An LLM endpoint failed after bounded retries (infrastructure, not quality)."""

    def __init__(self, category: str, message: str, *, role: str = "", model: str = "") -> None:
        self.category = category
        self.role = role
        self.model = model
        self.message = redact(message)  # endpoint text: may echo a key or a header
        super().__init__(self.__str__())

    def __str__(self) -> str:
        who = f"{self.role} model '{self.model}'" if self.role else f"model '{self.model}'"
        return f"{who}: {self.category}: {self.message}"


class CacheMiss(LLMError):
    """`--evalbench-cache=replay` found no recorded response for a call."""

    def __init__(self, role: str, model: str, key: str) -> None:
        super().__init__(
            "cache miss",
            f"no recorded response (key {key[:12]}) and --evalbench-cache=replay forbids network "
            "calls; record it with --evalbench-cache=on",
            role=role, model=model,
        )


class ToolCacheMiss(CacheMiss):
    """`--evalbench-cache=replay` found no recorded tool list or tool result (an MCP server's)."""

    def __init__(self, what: str, key: str) -> None:
        super().__init__("tool", what, key)

    def __str__(self) -> str:
        return f"{self.model}: {self.category}: {self.message}"


class BudgetExhausted(LLMError):
    """`--evalbench-max-cost` is spent: no new calls are started."""

    def __init__(self, spent: float, limit: float, role: str = "", model: str = "", needed: float | None = None
                 ) -> None:
        fit = f"a call that may cost up to ${needed:.4f} does not fit: " if needed is not None else ""
        super().__init__(
            "budget exhausted",
            f"{fit}spent ${spent:.4f} of --evalbench-max-cost=${limit:.4f}; the run is incomplete",
            role=role, model=model,
        )


class UnusableAnswer(EvalbenchError):
    """An LLM answered HTTP 200 but the content cannot be used (after bounded re-asks)."""


class TargetError(EvalbenchError):
    """The team's own target callable raised; carries the user's formatted traceback."""

    def __init__(self, target_id: str, formatted: str) -> None:
        self.target_id = target_id
        self.formatted = redact(formatted)  # an app's exception may quote its own credentials
        super().__init__(f"target '{target_id}' raised:\n{self.formatted}")
