"""Find and validate benchmarks on disk: benchmark.yaml and scenarios.json.

Every problem becomes one `InputError` naming file, row and field; nothing here imports pytest.
"""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from .errors import ConfigError, EvalbenchWarning, InputError
from .spec import BenchmarkSpec, unknown_keys

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
SPEC_FILE = "benchmark.yaml"


def available_benchmarks(root: Path) -> list[str]:
    """Names of the directories under `root` that hold a benchmark.yaml, sorted."""
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / SPEC_FILE).is_file())


def resolve_benchmark_dir(root: Path, name: str, option: str = "--benchmark=") -> Path:
    """`benchmarks/<name>` for a safe, existing name; the error lists what exists.

    `option` prefixes the name in the error: how the user spelled it (a pytest option, or a
    command's argument when empty)."""
    if not NAME_RE.match(name) or name in {".", ".."}:
        raise ConfigError(f"{option}{name!r} is not a benchmark name (letters, digits, '.', '_', '-'; "
                          "no paths)")
    path = root / name
    if not (path / SPEC_FILE).is_file():
        names = available_benchmarks(root)
        have = ", ".join(names) if names else f"none (no {root}/<name>/{SPEC_FILE} found)"
        raise ConfigError(f"unknown benchmark {name!r}; available: {have}")
    return path


def first_error(exc: ValidationError) -> tuple[str, str]:
    """(field path, message) of a pydantic error, in one line."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()))
    msg = err.get("msg", "invalid").removeprefix("Value error, ")
    if err.get("type") == "extra_forbidden":
        msg = "unknown key (typo?)"
    extra = len(exc.errors()) - 1
    return loc, msg + (f" (+{extra} more error{'s' if extra > 1 else ''})" if extra else "")


def validate_as(model: type[BaseModel], data: Any, path: Path, row: str | int | None = None) -> Any:
    """`model.model_validate(data)` with errors turned into one-line InputErrors."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        loc, msg = first_error(exc)
        raise InputError(path, msg, row=row, field=loc or None) from None


MAX_INPUT_BYTES = 64 * 1024 * 1024
"""Largest input file read (benchmark.yaml, scenarios.json, dataset JSONL, baselines): 64 MiB."""
MAX_DEPTH = 64
"""Deepest nesting of lists and mappings accepted in an input file."""
MAX_YAML_NODES = 200_000
"""Most YAML nodes a document may expand to once aliases are followed (bounds alias bombs)."""
_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
         (b"\xfe\xff", "UTF-16"))


def read_text(path: Path) -> str:
    """A UTF-8 input file (with or without BOM) as text; size, encoding and read problems are InputErrors."""
    try:
        size = path.stat().st_size
        if size > MAX_INPUT_BYTES:
            raise InputError(path, f"file is {size / 2**20:.1f} MiB; input files are limited to "
                             f"{MAX_INPUT_BYTES // 2**20} MiB")
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(path, "file not found") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror}") from None
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


def check_depth(data: Any, path: Path, row: int | None = None) -> Any:
    """`data` unchanged if its lists and mappings nest at most MAX_DEPTH deep (checked without recursion)."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth >= MAX_DEPTH:
                raise InputError(path, f"nested deeper than {MAX_DEPTH} levels", row=row)
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)
    return data


def parse_json(text: str, path: Path, row: int | None = None) -> Any:
    """JSON text -> data; syntax and nesting problems are one-line InputErrors (`row` = the text's line)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"invalid JSON: {exc.msg} (column {exc.colno})",
                         row=row if row is not None else exc.lineno) from None
    except RecursionError:
        raise InputError(path, f"nested deeper than {MAX_DEPTH} levels", row=row) from None
    return check_depth(data, path, row)


class _Composer(yaml.SafeLoader):
    """PyYAML's safe loader; documents are checked as node graphs before any Python object is built."""


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_yaml_nodes(root: yaml.Node, path: Path) -> None:
    """Duplicate keys, depth and the size after alias expansion, walked without recursion."""
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
        open_nodes.add(id(node))
        stack.append((node, depth, where, True))
        if isinstance(node, yaml.MappingNode):
            seen: dict[str, int] = {}
            for key, value in node.value:
                name = str(key.value) if isinstance(key, yaml.ScalarNode) else None
                if name is not None and key.tag != "tag:yaml.org,2002:merge":
                    if name in seen:
                        raise InputError(path, f"duplicate key {name!r} (first on line {seen[name]})",
                                         row=key.start_mark.line + 1, field=f"{where}.{name}".lstrip("."))
                    seen[name] = key.start_mark.line + 1
                stack.append((key, depth + 1, where, False))
                stack.append((value, depth + 1, f"{where}.{name}".lstrip(".") if name else where, False))
        else:
            stack.extend((child, depth + 1, where, False) for child in _children(node))
    if sizes[id(root)] > MAX_YAML_NODES:
        raise InputError(path, f"YAML expands to more than {MAX_YAML_NODES} values once aliases are followed "
                         "(an alias bomb?)")


def parse_yaml(text: str, path: Path) -> Any:
    """YAML text -> data, refusing duplicate keys, deep nesting and alias bombs before building objects."""
    loader = _Composer(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_yaml_nodes(node, path)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(path, f"invalid YAML: {problem}", row=(mark.line + 1) if mark else None) from None
    except RecursionError:
        raise InputError(path, f"nested deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


def read_yaml(path: Path) -> Any:
    return parse_yaml(read_text(path), path)


def read_json(path: Path) -> Any:
    return parse_json(read_text(path), path)


def load_spec(bench_dir: Path) -> BenchmarkSpec:
    """Parse and validate benchmark.yaml."""
    path = bench_dir / SPEC_FILE
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise InputError(path, "expected a mapping at the top level")
    spec: BenchmarkSpec = validate_as(BenchmarkSpec, data, path)
    warn_unknown(path, unknown_keys(spec))
    return spec


def warn_unknown(path: Path, keys: Iterable[str], rows: dict[str, list[str]] | None = None) -> None:
    """One warning per file for the unknown keys it carries (kept, never used); `rows` maps a key
    to the rows that carry it, for row files."""
    keys = list(dict.fromkeys(keys))
    if not keys:
        return
    def where(key: str) -> str:
        found = (rows or {}).get(key) or []
        return f"{key} (in {len(found)} row{'s' if len(found) > 1 else ''}, first row {found[0]})" if found else key
    warnings.warn(EvalbenchWarning(f"{path}: unknown key{'s' if len(keys) > 1 else ''} kept and ignored: "
                                   + ", ".join(where(k) for k in keys)), stacklevel=2)
