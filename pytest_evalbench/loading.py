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


def read_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(path, f"invalid YAML: {problem}", row=(mark.line + 1) if mark else None) from None


def read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError(path, "file not found") from None
    except OSError as exc:
        raise InputError(path, f"cannot read: {exc.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"invalid JSON: {exc.msg} (column {exc.colno})", row=exc.lineno) from None


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
