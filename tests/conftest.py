from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from pytest_evalbench.testing import FakeLLMServer  # noqa: E402

SECRET = "sk-test-SECRET-0123456789abcdefghij"


@pytest.fixture
def fake_llm() -> Iterator[FakeLLMServer]:
    """The project's scripted OpenAI-compatible server on 127.0.0.1 (port 0)."""
    with FakeLLMServer() as server:
        yield server


@pytest.fixture
def bench_env(monkeypatch: pytest.MonkeyPatch, fake_llm: FakeLLMServer) -> FakeLLMServer:
    """Point every role at the fake server through the documented environment variables."""
    monkeypatch.setenv("OPENAI_BASE_URL", fake_llm.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)
    return fake_llm


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("PYTEST_XDIST_AUTO_NUM_WORKERS", "2")
