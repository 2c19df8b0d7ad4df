"""Run settings: everything the command line decides, resolved once and free of pytest so the CLI
and the plugin share it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pytest_evalbench.llm.types import EngineSettings


@dataclass
class RunSettings:
    """Everything the command line decides (resolved once, on the controller)."""

    benchmark: str
    targets: list[str] = field(default_factory=list)
    user_model: str | None = None
    judge_model: str | None = None
    base_url: str | None = field(default=None, repr=False)  # may carry user:password@
    provider: str | None = None
    cache_mode: str = "on"
    cache_dir: Path | None = None
    engine: EngineSettings = field(default_factory=EngineSettings)
    calibrate: bool = False
    """Run the judge over calibration.jsonl instead of the benchmark (see calibration/)."""
    shard: tuple[int, int] | None = None
    """(K, N) of `--evalbench-shard=K/N`: run the K-th of N balanced parts, write under shards/K-of-N/."""
