"""Input files read as hostile: bounded in size and depth, UTF-8 only, every value checked before
anything uses it.

JSON is read by `json_input` (numbers that fit, no lone surrogates, no duplicate keys). YAML (benchmark.yaml): checked as a node
graph (duplicate keys, depth, alias bombs, values JSON cannot hold) before PyYAML builds any Python
object. Every problem becomes one `InputError` naming file, row (or line) and field.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from pytest_evalbench.base.errors import InputError
from pytest_evalbench.base.files import MAX_INPUT_BYTES, TooLarge, bounded_problem, read_bounded, size_text
from pytest_evalbench.base.json_input import MAX_DEPTH, SURROGATE, BadValue, parse_json, surrogate_problem
from pytest_evalbench.base.numbers import MAX_INT

_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
         (b"\xfe\xff", "UTF-16"))


def read_text(path: Path) -> str:
    """A UTF-8 input file (with or without BOM) as text; size, kind, encoding and read problems are
    InputErrors naming the file."""
    try:
        data = read_bounded(path, MAX_INPUT_BYTES)
    except TooLarge:
        raise InputError(path, f"file is larger than {size_text(MAX_INPUT_BYTES)}, the limit of input files: "
                         "not read further") from None
    except OSError as exc:
        raise InputError(path, bounded_problem(exc)) from None
    for bom, name in _BOMS:
        if data.startswith(bom):
            raise InputError(path, f"file is {name} encoded; save it as UTF-8")
    if len(data) >= 2 and (data[0] == 0) != (data[1] == 0):
        raise InputError(path, "file looks UTF-16 encoded (NUL bytes); save it as UTF-8")
    data = data.removeprefix(b"\xef\xbb\xbf")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(path, f"not UTF-8 (byte 0x{data[exc.start]:02x}); save the file as UTF-8",
                         row=line) from None


def read_input_json(path: Path) -> Any:
    """An input file's JSON, checked as every input is (size, depth, numbers, duplicate keys): one
    InputError naming the file and where, never a default (compare `files.read_json_or_default`)."""
    return parse_json(read_text(path), path)


MAX_YAML_NODES = 200_000
"""Most YAML nodes a document may expand to once aliases are followed (bounds alias bombs)."""


class _TooDeep(Exception):
    """Raised by `_Composer`'s scanner at a bracket that opens a collection deeper than MAX_DEPTH."""

    def __init__(self, line: int) -> None:
        super().__init__(line)
        self.line = line


class _Composer(yaml.SafeLoader):
    """PyYAML's safe loader; documents are checked as node graphs before any Python object is built.

    Its scanner stops at the first `[` or `{` nested deeper than MAX_DEPTH: PyYAML's scanner does work
    in proportion to the open brackets at every token, so a line of ten thousand `[` would cost seconds
    before the node check could refuse it; refused here, the work stays linear in the text."""

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        if self.flow_level >= MAX_DEPTH:  # this collection would sit deeper than MAX_DEPTH: never accepted
            raise _TooDeep(self.get_mark().line + 1)
        super().fetch_flow_collection_start(TokenClass)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


_YAML_INT = "tag:yaml.org,2002:int"
_YAML_FLOAT = "tag:yaml.org,2002:float"
_YAML_STR = "tag:yaml.org,2002:str"
_YAML_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_YAML_TAGS = {f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "seq", "map", "merge")}
"""What a document may hold: JSON's values. A date is kept as its text (as YAML 1.2 and JSON read it);
`!!binary`, `!!set`, `!!omap` and `!!pairs` values are refused (no request or result file can carry them)."""


def _scalar_problem(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> str | None:
    """Why a YAML scalar cannot be held (an out-of-range or non-finite number, a lone surrogate), or None.
    Checked on the node, before PyYAML builds it (its int() raises past 4,300 digits)."""
    value = node.value
    if node.tag == _YAML_TIMESTAMP:
        node.tag = _YAML_STR
    if SURROGATE.search(value):
        try:  # PyYAML leaves an escaped pair ("\ud83d\ude00") as two halves: join it into its character
            node.value = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
        except UnicodeDecodeError:
            return surrogate_problem(value)
        return None
    if node.tag == _YAML_INT:
        if len(value.replace("_", "").lstrip("+-")) > 20:
            return BadValue(value).problem()
        number = loader.construct_yaml_int(node)
        return None if -MAX_INT <= number <= MAX_INT else BadValue(value).problem()
    if node.tag == _YAML_FLOAT and not math.isfinite(loader.construct_yaml_float(node)):
        return BadValue(value).problem()
    return None


def _check_yaml_nodes(root: yaml.Node, path: Path, loader: yaml.SafeLoader, lines: dict[str, int] | None = None) -> None:
    """Duplicate keys, depth, the size after alias expansion and every scalar's value, walked
    without recursion. Every duplicate key is reported, each with its line (PyYAML would keep the
    last value silently: a second `threshold:` would change scores unseen); the walk stops at any
    other problem. `lines`, when given, gets the line of every key and list entry by its field
    path (`metrics.1.type`), so a schema error found later can name its line."""
    duplicates: list[InputError] = []
    try:
        _walk_yaml_nodes(root, path, loader, lines, duplicates)
    except InputError as exc:
        duplicates.append(exc)
    if duplicates:  # in the order of the file
        duplicates.sort(key=lambda error: error.row if isinstance(error.row, int) else 0)
        raise InputError.gather(duplicates, len(duplicates))


def _walk_yaml_nodes(root: yaml.Node, path: Path, loader: yaml.SafeLoader, lines: dict[str, int] | None,
                     duplicates: list[InputError]) -> None:
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, int, str, bool]] = [(root, 0, "", False)]
    while stack:
        node, depth, where, done = stack.pop()
        if done:
            open_nodes.discard(id(node))
            sizes[id(node)] = min(MAX_YAML_NODES + 1, 1 + sum(sizes[id(k)] for k in _children(node)))
            continue
        if id(node) in sizes:
            continue
        if id(node) in open_nodes:
            raise InputError(path, "recursive YAML alias", row=node.start_mark.line + 1, field=where or None)
        if depth >= MAX_DEPTH:
            raise InputError(path, f"nested deeper than {MAX_DEPTH} levels", row=node.start_mark.line + 1,
                             field=where or None)
        if isinstance(node, yaml.ScalarNode):
            problem = _scalar_problem(loader, node)
            if problem is not None:
                raise InputError(path, problem, row=node.start_mark.line + 1, field=where or None)
        if node.tag not in _YAML_TAGS:
            raise InputError(path, f"YAML tag {node.tag.replace('tag:yaml.org,2002:', '!!')[:100]} is not accepted: "
                             "values are text, numbers, true/false, null, lists and mappings",
                             row=node.start_mark.line + 1, field=where or None)
        open_nodes.add(id(node))
        stack.append((node, depth, where, True))
        if lines is not None and where:
            lines.setdefault(where, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key, value in node.value:
                name = (str(key.value).encode("utf-8", "backslashreplace").decode("utf-8")
                        if isinstance(key, yaml.ScalarNode) else None)
                if name is not None and key.tag != "tag:yaml.org,2002:merge":
                    if name in seen:
                        duplicates.append(InputError(path, f"duplicate key {name!r} (first on line {seen[name]}; "
                                                     "YAML would keep only the last value silently)",
                                                     row=key.start_mark.line + 1, field=f"{where}.{name}".lstrip(".")))
                    else:
                        seen[name] = key.start_mark.line + 1
                    if lines is not None:  # a key's line, not its value's (a block value starts below it)
                        lines.setdefault(f"{where}.{name}".lstrip("."), key.start_mark.line + 1)
                stack.append((key, depth + 1, where, False))
                stack.append((value, depth + 1, f"{where}.{name}".lstrip(".") if name else where, False))
        else:  # list positions count from 1 in the field path, as in every message
            stack.extend((child, depth + 1, f"{where}.{number}".lstrip("."), False)
                         for number, child in enumerate(_children(node), start=1))
    if sizes[id(root)] > MAX_YAML_NODES:
        raise InputError(path, f"YAML expands to more than {MAX_YAML_NODES} values once aliases are followed "
                         "(an alias bomb?)")


def parse_yaml(text: str, path: Path, lines: dict[str, int] | None = None) -> Any:
    """YAML text -> data, refusing duplicate keys, deep nesting and alias bombs before building objects;
    `lines` gets the line of each field path (`_check_yaml_nodes`)."""
    try:  # the reader refuses control characters as it is made
        loader = _Composer(text)
    except yaml.reader.ReaderError as exc:
        line = text[: exc.position].count("\n") + 1
        raise InputError(path, f"invalid YAML: control character U+{exc.character:04X} is not allowed "
                         "(write it as an escape in a double-quoted string)", row=line) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_yaml_nodes(node, path, loader, lines)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        opened = getattr(exc, "context_mark", None)  # where the list, mapping or text that is not closed began
        unclosed = any(word in str(getattr(exc, "context", "")) for word in ("flow", "quoted"))
        began = (f" (what is not closed begins at line {opened.line + 1})"
                 if unclosed and mark and opened and opened.line != mark.line else "")
        raise InputError(path, f"invalid YAML{at}: {yaml_words(problem, getattr(exc, 'context', None))}{began}",
                         row=(mark.line + 1) if mark else None) from None
    except _TooDeep as exc:
        raise InputError(path, f"nested deeper than {MAX_DEPTH} levels", row=exc.line) from None
    except RecursionError:
        raise InputError(path, f"nested deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


_YAML_WORDS = (
    ("mapping values are not allowed", "a ':' where a value goes; a value that contains ': ' needs quotes"),
    ("cannot start any token", "a character that cannot start a value here (a tab: YAML indents with spaces; "
                               "'@' or '`': quote the value)"),
    ("could not find expected ':'", "a line that is not `key: value` where a key was expected (a missing ':', "
                                    "or a line indented differently from the ones above it)"),
    ("did not find expected key", "a line indented differently from the keys above it"),
    ("expected <block end>", "a line indented differently from the lines above it"),
    ("did not find expected '-' indicator", "a list item indented differently from the items above it"),
    ("found unexpected end of stream", "the file ends inside a quoted text or a [list] / {mapping}: close it"),
    ("found undefined alias", "an alias (*name) that no anchor (&name) defines"),
    ("expected ',' or ']'", "a [list] that is not closed with ']' (or a missing ',')"),
    ("expected ',' or '}'", "a {mapping} that is not closed with '}' (or a missing ',')"),
    ("found duplicate anchor", "the same anchor (&name) defined twice"),
)


def yaml_words(problem: str, context: str | None = None) -> str:
    """PyYAML's problem in plain words (what to fix); an unlisted one is quoted as the parser said it."""
    for raw, words in _YAML_WORDS:
        if raw in problem or (context and raw in context):
            return words
    return f"a YAML syntax error (the parser says: {problem})"


def read_yaml(path: Path, lines: dict[str, int] | None = None) -> Any:
    return parse_yaml(read_text(path), path, lines)
