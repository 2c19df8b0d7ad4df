"""One word per idea: the glossary in docs/architecture.md defines each word once, and a public class
whose name uses one of the watched words uses it in its glossary meaning: the class is named in a
glossary row whose word or meaning is that word. An exception is listed with why; the list may only
shrink (a name that no longer breaks the rule, or no longer exists, fails the test until it is taken off)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from syntax_trees import parse

import pytest_evalbench

PACKAGE = Path(pytest_evalbench.__file__).parent
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"

WATCHED = ("outcome", "verdict", "case", "kind", "session")
"""Words that have named more than one idea: each public class using one must mean the glossary's idea."""

KNOWN_EXCEPTIONS: dict[str, str] = {}
"""A public class whose name uses a watched word outside the word's glossary meaning -> what it names
instead. Empty: a new entry needs a reason, and a rename takes it off again."""


def glossary_rows(text: str) -> list[tuple[str, str, str]]:
    """(word, meaning, in code) of every row of the glossary table."""
    section = text.split("## Glossary", 1)[1].split("\n## ", 1)[0]
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in section.splitlines()
            if line.startswith("| ") and "---" not in line]
    return [(word, meaning, code) for word, meaning, code in rows[1:]]


def words_of(row_word: str) -> list[str]:
    """The words a row defines (`agent, eval, evaluator` defines three)."""
    return [w.strip().lower() for w in row_word.split(",")]


def defined_twice(rows: list[tuple[str, str, str]]) -> list[str]:
    seen: dict[str, int] = {}
    for word, _, _ in rows:
        for w in words_of(word):
            seen[w] = seen.get(w, 0) + 1
    return sorted(w for w, n in seen.items() if n > 1)


def name_words(name: str) -> set[str]:
    """The words of a CamelCase name, lower case, plurals as their singular (`KindResults` -> kind, result)."""
    return {w.lower().removesuffix("s") if w.lower() not in WATCHED else w.lower()
            for w in re.findall(r"[A-Z][a-z0-9]*", name)}


def mentions(text: str, word: str) -> bool:
    return re.search(rf"\b{word}s?\b", text, re.IGNORECASE) is not None


def misused(classes: dict[str, str], rows: list[tuple[str, str, str]]) -> dict[str, str]:
    """Class name -> the watched word it uses outside the glossary's meaning: no glossary row names the
    class in its code column while having the word as its word or in its meaning."""
    out = {}
    for name in sorted(classes):
        for word in WATCHED:
            if word not in name_words(name):
                continue
            homes = [(w, meaning) for w, meaning, code in rows if re.search(rf"`{name}`", code)]
            if not any(mentions(w, word) or mentions(meaning, word) for w, meaning in homes):
                out[name] = word
    return out


def public_classes() -> dict[str, str]:
    """Every public class of the package -> its module's path."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found[node.name] = str(path.relative_to(PACKAGE))
    return found


def test_no_glossary_word_is_defined_twice() -> None:
    rows = glossary_rows(ARCHITECTURE.read_text(encoding="utf-8"))
    assert len(rows) > 30
    assert defined_twice(rows) == []


def test_public_classes_use_the_watched_words_in_their_glossary_meaning() -> None:
    rows = glossary_rows(ARCHITECTURE.read_text(encoding="utf-8"))
    found = misused(public_classes(), rows)
    assert {name: word for name, word in found.items() if name not in KNOWN_EXCEPTIONS} == {}
    assert sorted(set(KNOWN_EXCEPTIONS) - set(found)) == [], "renamed or gone: take these off KNOWN_EXCEPTIONS"


def test_the_checks_see_a_second_definition_and_a_misused_word() -> None:
    """The counter-check, on a made-up glossary."""
    rows = [("case", "one unit of work", "`ScenarioCase`"), ("item", "the pytest item of one case", "`CaseItem`"),
            ("Case", "again", "`Other`"), ("outcome", "a decision", "`Outcome`"), ("agent, eval", "dataset words", "")]
    assert defined_twice(rows) == ["case"]
    classes = {"ScenarioCase": "", "CaseItem": "", "CaseVerdict": "", "Outcome": "", "Outcomes": "", "Showcase": ""}
    assert misused(classes, rows) == {"CaseVerdict": "case", "Outcomes": "outcome"}
