"""The embedded default model behind llama.cpp's OpenAI-compatible server (`llama-cpp-python[server]`),
started on 127.0.0.1 only when a call actually misses the cache, and stopped when the engine closes.

Models (local_model.py): `qwen2.5-coder-1.5b` (the [local] extra; the default for any other model
name) and `smollm2` (SmolLM2-135M, the [local-tiny] extra: plumbing only, not a meaningful judge).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

from pytest_evalbench.errors import ConfigError, LLMError
from pytest_evalbench.llm.local_model import DEFAULT, MODELS, LocalModel, install_command, installed, missing_extra, model_path

__all__ = ["LocalServer", "install_command", "local_extra_installed", "resolve_model"]

THREADS_ENV = "EVALBENCH_LOCAL_THREADS"
"""Threads per server (default 2): 1 does more work per CPU second on a heavily shared machine,
where llama.cpp's threads spin waiting for each other."""
CONTEXT = {"qwen2.5-coder-1.5b": 8192, "smollm2": 4096}
"""Context window per model: a judge prompt holds the metric, its examples and a whole transcript."""


def _threads() -> str:
    value = os.environ.get(THREADS_ENV, "")
    return value if value.isdigit() and int(value) > 0 else str(min(2, os.cpu_count() or 1))


def resolve_model(name: str) -> LocalModel:
    """The embedded model a role's `model:` names; any other name means the default (the 1.5B)."""
    return MODELS.get(name, DEFAULT)


def local_extra_installed(name: str = DEFAULT.name) -> bool:
    return importlib.util.find_spec("llama_cpp") is not None and installed(resolve_model(name))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalServer:
    """Lazily started llama.cpp server subprocesses, one per embedded model (per process, thread-safe)."""

    def __init__(self, startup_timeout: float = 180.0) -> None:
        self.startup_timeout = startup_timeout
        self._lock = threading.Lock()
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._urls: dict[str, str] = {}

    def ensure_started(self, name: str = DEFAULT.name) -> str:
        """Base URL of the server for the model `name` names, started (and assembled) on first use."""
        model = resolve_model(name)
        with self._lock:
            if model.name in self._urls:
                return self._urls[model.name]
            if importlib.util.find_spec("llama_cpp") is None or not installed(model):
                raise ConfigError(missing_extra(model))
            port = _free_port()
            cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path(model)),
                   "--model_alias", model.name, "--host", "127.0.0.1", "--port", str(port),
                   "--n_ctx", str(CONTEXT.get(model.name, 4096)), "--n_threads", _threads()]
            log = tempfile.TemporaryFile()  # noqa: SIM115  (kept open for the server's life; a pipe could block)
            proc = self._procs[model.name] = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log,
                                                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
            import urllib.request  # only here (with http.client and email): every run imports this module

            url = f"http://127.0.0.1:{port}/v1"
            deadline = time.monotonic() + self.startup_timeout
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    del self._procs[model.name]
                    log.seek(0)
                    err = log.read().decode(errors="replace")
                    raise LLMError("local model failed to start", err.strip().splitlines()[-1] if err.strip()
                                   else f"exit code {proc.returncode}", model=model.name)
                try:
                    with urllib.request.urlopen(f"{url}/models", timeout=1):
                        self._urls[model.name] = url
                        return url
                except OSError:
                    time.sleep(0.2)
        self.stop()
        raise LLMError("local model failed to start", f"not ready after {self.startup_timeout:.0f}s", model=model.name)

    def stop(self) -> None:
        with self._lock:
            procs, self._procs, self._urls = list(self._procs.values()), {}, {}
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
