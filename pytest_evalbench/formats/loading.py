"""Find benchmarks on disk and validate what they hold (benchmark.yaml; the kinds' loaders use
`validate_as` and `warn_unknown` for their files). Reading a file's bytes as JSON or YAML is
`input_json` and `input_yaml`.

Every problem becomes one `InputError` naming file, row and field; nothing here imports pytest.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from pytest_evalbench.base.errors import ConfigError, EvalbenchWarning, InputError, field_path
from pytest_evalbench.base.inputs import read_yaml
from pytest_evalbench.formats import unknown_keys
from pytest_evalbench.formats.spec import MAX_ID_LENGTH, BenchmarkSpec

NAME_RE = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{MAX_ID_LENGTH - 1}}}")
"""A benchmark or data file name: the id rule (always `fullmatch`ed: a trailing newline is no name)."""
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
    if not NAME_RE.fullmatch(name) or name in {".", ".."}:
        shown = repr(name[:MAX_ID_LENGTH]) + ("…" if len(name) > MAX_ID_LENGTH else "")
        raise ConfigError(f"{option}{shown} is not a benchmark name (1-{MAX_ID_LENGTH} letters, digits, '.', "
                          "'_', '-'; no paths)")
    path = root / name
    if not (path / SPEC_FILE).is_file():
        names = available_benchmarks(root)
        have = ", ".join(names) if names else f"none (no {root}/<name>/{SPEC_FILE} found)"
        raise ConfigError(f"unknown benchmark {name!r}; available: {have}")
    return path


def first_error(exc: ValidationError, data: Any = None) -> tuple[str, str]:
    """(field path, message) of a pydantic error, in one line; `data` is what was validated."""
    err = exc.errors()[0]
    loc = field_path(err.get("loc", ()), data)
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
        loc, msg = first_error(exc, data)
        raise InputError(path, msg, row=row, field=loc or None) from None


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
