"""The commands a session prints for people to paste: rerun flipped or failed cases, record missing
cache entries.

A printed command must run as printed: it carries every option that decides which items exist and
how they run (`--benchmark`, targets and models given on the command line, the endpoint, the
provider, the cache mode and directory, the shard, calibration), its node ids are relative to the
directory pytest was started in, and it is quoted for a POSIX shell. Credentials in an endpoint URL
are never printed (the command then names the endpoint without them). Nothing here imports pytest.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from pytest_evalbench.settings import RunSettings

RECORDABLE = frozenset({"cache miss", "corrupt cache entry"})
"""Item error kinds a run with `--evalbench-cache=on` repairs."""


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def run_options(settings: RunSettings, cache_mode: str | None = None) -> list[str]:
    """The options that make a pasted command select and run items as this session did."""
    argv = [f"--benchmark={settings.benchmark}"]
    argv += [f"--evalbench-target={t}" for t in settings.targets]
    if settings.user_model:
        argv.append(f"--evalbench-user-model={settings.user_model}")
    if settings.judge_model:
        argv.append(f"--evalbench-judge-model={settings.judge_model}")
    if settings.base_url:
        argv.append(f"--evalbench-base-url={_without_credentials(settings.base_url)}")
    if settings.provider:
        argv.append(f"--evalbench-provider={settings.provider}")
    mode = cache_mode or settings.cache_mode
    if mode != "on":
        argv.append(f"--evalbench-cache={mode}")
    if settings.cache_dir is not None:
        argv.append(f"--evalbench-cache-dir={settings.cache_dir}")
    if settings.shard:
        argv.append(f"--evalbench-shard={settings.shard[0]}/{settings.shard[1]}")
    if settings.calibrate:
        argv.append("--evalbench-calibrate")
    return argv


def relative_node_id(node_id: str, root: Path, cwd: Path) -> str:
    """A node id (relative to pytest's rootdir) as an argument given in `cwd`."""
    path, sep, rest = node_id.partition("::")
    if not sep or os.path.isabs(path):
        return node_id
    rel = os.path.relpath(root / path, cwd)
    return (Path(rel).as_posix() if rel != "." else path) + sep + rest


def pytest_command(options: list[str], args: Iterable[str] = ()) -> str:
    """`pytest OPTIONS ARGS`, quoted for a POSIX shell."""
    return shlex.join(["pytest", *options, *args])


def session_commands(settings: RunSettings, *, flips: list[str], failed: bool, errors: Iterable[str],
                     root: Path, cwd: Path) -> dict[str, str]:
    """The commands a session's summary prints: `flipped` (the cases that passed in the baseline
    and fail now), `failed` (every failed or errored item, through pytest's --lf) and `record`
    (items whose response was missing from, or corrupt in, the cache)."""
    options = run_options(settings)
    out = {}
    if flips:
        out["flipped"] = pytest_command(options, (relative_node_id(f, root, cwd) for f in flips))
    if failed:
        out["failed"] = pytest_command(options, ["--lf"])
    if RECORDABLE & set(errors):
        out["record"] = pytest_command(run_options(settings, cache_mode="on"), ["--lf"])
    return out
