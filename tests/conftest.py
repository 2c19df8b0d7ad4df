from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import importlib.metadata
import os
import pkgutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from pytest_evalbench.llm.transport import TRANSPORTS, make_transport
from pytest_evalbench.llm.types import Endpoint
from pytest_evalbench.testing import FakeLLMServer

# No test asserts a duration (speed targets are scripts in tests/perf): hypothesis' default 200 ms
# deadline per example fails property tests on a loaded CI machine, so it is off. The suite draws the
# same examples on every run (derandomize), so a build's result does not depend on luck; the profile
# `explore` (`pytest --hypothesis-profile=explore`) draws new ones, to hunt for what the fixed ones miss.
hypothesis.settings.register_profile("evalbench", deadline=None, derandomize=True, database=None)
hypothesis.settings.register_profile("explore", deadline=None)
hypothesis.settings.load_profile("evalbench")

SECRET = "sk-test-SECRET-0123456789abcdefghij"


def _import_lazy_http_modules() -> None:
    """Call through the SDK (sync and async) and through both transports, so httpx2/httpcore2/anyio
    and aiohttp import their lazy modules here.

    In-process pytester runs snapshot sys.modules and drop modules first imported inside them;
    a later re-import yields new exception classes that the openai SDK (imported out here) no
    longer recognises. Importing everything up front keeps one copy of each module.
    """
    import asyncio

    import openai

    with FakeLLMServer() as server:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0).chat.completions.create(**body)

        async def call() -> None:
            client = openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0)
            await client.post("/chat/completions", body=body, cast_to=object)
            await client.close()

        asyncio.run(call())

        async def through(name: str) -> None:  # the SDK's aiohttp backend and raw aiohttp
            transport = make_transport(name, 5.0)
            try:
                await transport.complete(Endpoint("m", server.base_url, api_key="x"), body)
            finally:
                await transport.aclose()

        for name in TRANSPORTS:
            asyncio.run(through(name))



LAZY_DEPENDENCIES = ("genai_prices", "re2", "alembic", "alembic.command", "psycopg",
                     "sqlalchemy.dialects.postgresql.psycopg", "sqlalchemy.dialects.sqlite.pysqlite")
"""What the package imports inside a run rather than at import time (genai-prices' data module
alone is a 1.6 MB source file). The store's driver modules are among them for one more reason: a
driver first imported inside an in-process run is dropped after it and imported anew, while
SQLAlchemy keeps the dialect that holds the first copy, so the new copy's errors would escape the
store's `except`."""


def _import_the_package() -> None:
    """Import every module of the package once, here, before any pytester run.

    An in-process pytester run drops the modules first imported inside it (see above), so without
    this every in-process run imports the plugin's session, kinds and renderers anew: each module is
    read, assertion-rewritten and compiled again (an entry-point plugin's package is rewritten, and
    nothing is cached when bytecode is not written), and its pydantic models are built again. That
    was most of the CPU an in-process run costs; the same holds for `LAZY_DEPENDENCIES`. Subprocess
    runs and xdist workers still import the package fresh, and tests/unit/test_import_cost.py checks
    what a fresh process imports.
    """
    import pytest_evalbench

    for module in pkgutil.walk_packages(pytest_evalbench.__path__, "pytest_evalbench."):
        if module.name != "pytest_evalbench.__main__":
            importlib.import_module(module.name)
    for name in LAZY_DEPENDENCIES:
        with contextlib.suppress(ImportError):  # genai-prices needs Python 3.11
            importlib.import_module(name)



class _ReadOnceDistribution(importlib.metadata.Distribution):
    """An installed distribution whose metadata files are read and parsed once."""

    def __init__(self, found: importlib.metadata.Distribution) -> None:
        self._found = found
        self._texts: dict[str, str | None] = {}

    def read_text(self, filename: str) -> str | None:
        if filename not in self._texts:
            self._texts[filename] = self._found.read_text(filename)
        return self._texts[filename]

    def locate_file(self, path: str | os.PathLike[str]) -> Any:
        return self._found.locate_file(path)

    @functools.cached_property
    def metadata(self) -> Any:  # type: ignore[override]
        return super().metadata

    @functools.cached_property
    def entry_points(self) -> importlib.metadata.EntryPoints:  # type: ignore[override]
        return super().entry_points

    @functools.cached_property
    def files(self) -> list[importlib.metadata.PackagePath] | None:  # type: ignore[override]
        return super().files


def _read_installed_metadata_once() -> None:
    """Every pytest start (each in-process pytester run among them) walks every installed
    distribution's metadata twice: pluggy for the `pytest11` entry points, pytest for the plugin
    modules to assertion-rewrite. Nothing is installed while the suite runs, so this process reads
    them once; subprocesses and xdist workers still read them themselves."""
    found = [_ReadOnceDistribution(dist) for dist in importlib.metadata.distributions()]
    every = importlib.metadata.distributions

    def distributions(**kwargs: Any) -> Iterator[importlib.metadata.Distribution]:
        return iter(found) if not kwargs else every(**kwargs)

    importlib.metadata.distributions = distributions  # type: ignore[assignment]


_read_installed_metadata_once()


def _remember_statement_ranges() -> None:
    """pytest finds the statement around each line of a traceback it formats by parsing the frame's
    whole source file and walking its syntax tree, anew for every frame of every traceback. An inner
    run that ends in `pytest.exit` (a usage or collection error) has its whole stack formatted that
    way by the terminal reporter, which prints only the last line of it: about 0.2 s per run, most of
    the CPU such a test costs. The answer depends on the line and the file's text alone, so this
    process computes it once per line and text (xdist workers and subprocess runs still compute it)."""
    import _pytest._code.code

    find = _pytest._code.code.getstatementrange_ast
    texts: dict[str, str] = {}
    found: dict[tuple[int, str, bool], Any] = {}

    def getstatementrange_ast(lineno: int, source: Any, assertion: bool = False, astnode: Any = None) -> Any:
        text = "\n".join(source.lines)
        key = (lineno, texts.setdefault(text, text), assertion)
        if key not in found:
            found[key] = find(lineno, source, assertion, astnode)
        return found[key]

    _pytest._code.code.getstatementrange_ast = getstatementrange_ast  # type: ignore[assignment]


_remember_statement_ranges()


@pytest.fixture(params=TRANSPORTS)
def transport_name(request: pytest.FixtureRequest) -> str:
    """Each transport in turn (`--evalbench-transport`): what one guarantees, both must."""
    return str(request.param)


LEAN_ADDOPTS = " ".join(f"-p no:{name}" for name in
                        ("hypothesispytest", "benchmark", "anyio", "platformdirs", "xdist.looponfail"))
"""The dev venv's pytest plugins no inner run needs (this plugin and xdist stay): every pytest
process start pays for loading them, hypothesis' most, and an inner run with `-n 2` starts three."""


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytest's `pytester`, whose runs (in-process or subprocess, their xdist workers, the CLI's
    pytest) read PYTEST_ADDOPTS: pytester removes the outer one, this sets LEAN_ADDOPTS."""
    monkeypatch.setenv("PYTEST_ADDOPTS", LEAN_ADDOPTS)
    return pytester


@pytest.fixture
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process runs retry a failed call after a backoff from 0.05 s instead of the product's 0.5 s
    (doubling, jittered, as before): the tests that use this assert that retries happen, are counted
    and end; how long the backoff is, is tests/unit/test_retry.py's. Subprocess runs keep 0.5 s."""
    from pytest_evalbench.llm import engine

    @dataclasses.dataclass
    class QuickBackoff(engine.EngineSettings):
        backoff_base: float = 0.05

    monkeypatch.setattr(engine, "EngineSettings", QuickBackoff)


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
    return fake_llm


@pytest.fixture(autouse=True)
def _secrets_end_with_their_test() -> Iterator[None]:
    """The secrets a test registers in this process (a store URL's user, a key) are forgotten after it:
    otherwise one test's secret would mask text in every later test of the same worker (a PostgreSQL
    user named like the package masked the package's name in every output after it). The registry has
    no public way back to an earlier state, so its private set is restored here."""
    from pytest_evalbench.base.safe_text import SECRETS

    before = set(SECRETS._values)
    yield
    if SECRETS._values != before:
        with SECRETS._lock:
            SECRETS._values = before
            SECRETS._compile()


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """`pytest -n N` schedules the suite with `--dist worksteal` unless a mode is given: a worker that
    runs out of tests takes half of the other's queue, where xdist's default `load` left one worker
    working through a queue of slow integration tests while the other sat idle at the end. (Set here,
    before xdist turns `-n` into `load`, not in `addopts`: `pytest -p no:xdist` would not know `--dist`.)"""
    if getattr(config.option, "dist", "no") == "no" and getattr(config.option, "numprocesses", None):
        config.option.dist = "worksteal"


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("PYTEST_XDIST_AUTO_NUM_WORKERS", "2")
    # Inner runs (pytester's, subprocesses, xdist workers) print at 80 columns whatever the outer
    # terminal or a CI runner's COLUMNS is, so what a test reads from their output (lines cut at the
    # terminal width) does not depend on where the suite runs.
    os.environ["COLUMNS"] = "80"
    # pytest prints a failure's message uncut in the short summary where CI or BUILD_NUMBER is set;
    # inner runs print as on a developer's terminal wherever the suite runs.
    os.environ.pop("CI", None)
    os.environ.pop("BUILD_NUMBER", None)
    os.environ.pop("GITHUB_STEP_SUMMARY", None)  # the tests of the step summary set their own
    # Inner runs record into no run store: each would import SQLAlchemy and create a store in its own
    # rootdir; the store's tests (tests/*/test_run_store*.py, test_store*.py) remove this and record.
    os.environ["EVALBENCH_STORE"] = "none"
    # The suite starts a few hundred Python processes (subprocess runs, xdist workers). Where the
    # environment sets PYTHONDONTWRITEBYTECODE, each would compile the package and pytest's rewritten
    # test modules from source again; the suite writes the bytecode caches (git-ignored __pycache__/)
    # so the processes after the first read them.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False
    # Every process that runs tests imports up front what in-process runs would otherwise import anew;
    # an xdist controller runs none, so it starts its workers without that wait.
    if not getattr(config.option, "numprocesses", None) or hasattr(config, "workerinput"):
        _import_lazy_http_modules()
        _import_the_package()
    else:
        threading.Thread(target=_rewrite_test_modules, args=(config,), daemon=True).start()


def _rewrite_test_modules(config: pytest.Config) -> None:
    """Write the assertion-rewritten bytecode of the test modules to collect, as each xdist worker would.

    Every worker collects every test module, and a module without its rewritten bytecode cache
    (a fresh checkout, or an edited module) is parsed, rewritten and compiled by each worker at
    the same time, most of what a cold collection costs. The controller, which runs no
    test, does it once while its workers start, in collection order, and the workers read the
    caches it wrote (a worker that gets to a module first rewrites it itself, as before; pytest
    writes each cache atomically). Uses pytest's own rewriting, so the code is the same."""
    from _pytest.assertion import rewrite
    from _pytest.pathlib import fnmatch_ex

    state = config.stash.get(rewrite.assertstate_key, None)
    if state is None or sys.dont_write_bytecode:  # --assert=plain, or nothing may be written
        return
    patterns = [*config.getini("python_files"), "conftest.py"]
    found: list[Path] = []
    for arg in config.args:
        path = Path(config.invocation_params.dir, arg.split("::")[0])
        found.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    for source in dict.fromkeys(found):
        if not any(fnmatch_ex(pattern, source) for pattern in patterns):
            continue
        pyc = rewrite.get_cache_dir(source) / (source.name[:-3] + rewrite.PYC_TAIL)
        if rewrite._read_pyc(source, pyc) is None and rewrite.try_makedirs(pyc.parent):
            with contextlib.suppress(OSError, SyntaxError, ValueError):
                source_hash, code = rewrite._rewrite_test(source, config)
                rewrite._write_pyc(state, code, source_hash, pyc)
