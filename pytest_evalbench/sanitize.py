"""Hostile text made harmless for the surface that shows it.

Text from models, apps and endpoints reaches a terminal, a CI log that GitHub Actions (or Azure
Pipelines) scans for commands, and a Markdown job summary. Each surface gets one call where that
text enters it:

- `terminal(text)`: secrets masked; control characters (ESC, OSC, BEL, CR, backspace, C1, DEL),
  Unicode line/paragraph separators and bidirectional overrides shown as `\\x1b`-style escapes;
  a line that would start a workflow command (`::error::`, `::stop-commands::`, `##[group]`,
  `##vso[...]`, after optional whitespace) gets the visible prefix `> `. Newlines and tabs stay.
- `markdown(text)`: secrets masked; one line; HTML (`<`, `>`, `&`) and Markdown syntax escaped so
  `<img onerror=...>` or `[x](javascript:...)` render as the literal text.

HTML reports escape with `html.escape` (attributes quoted too) and carry no data inside <script>.
"""

from __future__ import annotations

import re

from pytest_evalbench.redaction import redact

_VISIBLE = {c: f"\\x{c:02x}" for c in [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)] if c not in (0x09, 0x0A)}
_VISIBLE.update({c: f"\\u{c:04x}" for c in (0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A),
                                            0x200E, 0x200F, 0x061C, 0xFEFF)})
_TERMINAL = str.maketrans(_VISIBLE)
_COMMAND = re.compile(r"^([ \t]*)(::|##\[|##vso\[)", re.MULTILINE | re.IGNORECASE)
COMMAND_PREFIX = "> "
"""What a line that would start a workflow command gets in front of it."""

_MARKDOWN = str.maketrans({c: "\\" + c for c in "\\`*[]"} | {"<": "&lt;", ">": "&gt;", "&": "&amp;"})
"""HTML, links and images, code spans, emphasis and table cells: what could make model text act."""


def control_visible(text: str) -> str:
    """Control and direction-changing characters written as escapes (newlines and tabs kept)."""
    return text.translate(_TERMINAL)


def no_commands(text: str) -> str:
    """No line can start a CI workflow command."""
    return _COMMAND.sub(lambda m: m.group(1) + COMMAND_PREFIX + m.group(2), text)


def terminal(text: str) -> str:
    """Text safe to write to a terminal or a CI log (see the module docstring)."""
    return no_commands(control_visible(redact(str(text))))


def markdown(text: str) -> str:
    """Text safe inside a Markdown table cell or list item (one line, nothing rendered)."""
    return control_visible(redact(str(text))).replace("\n", " ").translate(_MARKDOWN)
