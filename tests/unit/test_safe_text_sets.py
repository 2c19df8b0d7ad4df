"""The character sets of `base/safe_text.py` (control, invisible, blank) are written once and every
reader uses them: the masker, the terminal and CI-log guard, and benchmark.yaml's text checks."""

from __future__ import annotations

import ast
import re
import sys
import unicodedata
from pathlib import Path

import pytest
from syntax_trees import parse

from pytest_evalbench.base.safe_text import BLANK, CONTROL, INVISIBLE, MASK, Secrets, terminal
from pytest_evalbench.formats import plain_text

PACKAGE = Path(__file__).parents[2] / "pytest_evalbench"
# Every code point in order, searched by one compiled class each (rather than one `re.fullmatch` per
# code point and set): this module is imported by every xdist worker at collection.
EVERY_CHARACTER = "".join(map(chr, range(sys.maxunicode + 1)))
FORMAT_CHARACTERS = [c for c in EVERY_CHARACTER if unicodedata.category(c) == "Cf"]
INVISIBLES = re.findall(f"[{INVISIBLE}]", EVERY_CHARACTER)
CONTROLS = re.findall(f"[{CONTROL}]", EVERY_CHARACTER)
KEY = "QZXk-live-4f9a8b7c6d5e4f3a2b1c"


def test_every_format_character_is_invisible_and_blank() -> None:
    assert set(FORMAT_CHARACTERS) <= set(INVISIBLES)
    assert {"\u2800", "\u3164", "\ufe0f", "\U000e0100"} <= set(INVISIBLES)  # blank-looking, not format
    assert all(re.fullmatch(BLANK, c) for c in [*INVISIBLES, " ", "\t", "\u3000", "\u00a0"])
    assert not re.fullmatch(BLANK, "\n") and not re.fullmatch(f"[{INVISIBLE}]", "a")


def test_the_masker_sees_through_every_invisible_character() -> None:
    secrets = Secrets()
    secrets.add(KEY)
    for char in INVISIBLES:
        hidden = KEY[:6] + char + KEY[6:]
        assert secrets.redact(f"key {hidden} ok") == f"key {MASK} ok", repr(char)
        assert secrets.leaks(hidden), repr(char)


def test_no_invisible_character_hides_a_workflow_command() -> None:
    for char in INVISIBLES:
        shown = terminal(f"{char}::error::x")
        assert shown.endswith("::error::x") and not re.match(f"(?:{BLANK})*::", shown), repr(char)


def test_every_control_character_is_escaped_on_the_terminal_and_refused_in_benchmark_yaml() -> None:
    assert {"\x1b", "\x07", "\x9b", "\r", "\u2028", "\u202e", "\u2066", "\ufeff"} <= set(CONTROLS)
    assert "\n" not in CONTROLS and "\t" not in CONTROLS
    for char in CONTROLS:
        assert char not in terminal(f"a{char}b"), repr(char)
        with pytest.raises(ValueError, match="control character"):
            plain_text(f"a{char}b")


def test_the_sets_are_written_only_in_safe_text() -> None:
    """No other module holds a control or invisible character in a string (`"\\u200b"`, `"\\x1b"`):
    it imports the set. Line endings (CR), a NUL sentinel and an emoji's presentation selector are
    not sets."""
    unsafe = re.compile(f"[{CONTROL}{INVISIBLE}]")
    found = [f"{path.relative_to(PACKAGE)}:{node.lineno}"
             for path in sorted(PACKAGE.rglob("*.py")) if path != PACKAGE / "base" / "safe_text.py"
             for node in ast.walk(parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and set(unsafe.findall(node.value)) - {"\r", "\x00", "\ufe0f"}]
    assert found == []
