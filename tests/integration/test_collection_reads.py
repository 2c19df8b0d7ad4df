"""Collection and a run read each input file of the benchmark once."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers import script, write_benchmark

from pytest_evalbench.testing import FakeLLMServer


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each file is opened through `os.open` (the one read of every input file) in the
    in-process run, by name."""
    counts: Counter[str] = Counter()
    original = os.open

    def counted(path: Any, *args: Any, **kwargs: Any) -> int:
        counts[Path(os.fsdecode(path)).name] += 1
        return original(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", counted)
    return counts


@pytest.mark.parametrize("args", [("--collect-only",), ()], ids=["collect-only", "run"])
def test_each_input_file_is_read_once(pytester: pytest.Pytester, bench_env: FakeLLMServer, opened: Counter[str],
                                      args: tuple[str, ...]) -> None:
    write_benchmark(pytester.path)
    bench_env.set_responder(script(lambda request: "m01" in json.dumps(request)))  # every case passes
    result = pytester.runpytest("--benchmark=demo", *args)
    assert result.ret == 0
    assert opened["benchmark.yaml"] == 1
    assert opened["scenarios.json"] == 1
