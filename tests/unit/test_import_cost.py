"""Having the plugin installed must cost an unrelated test run next to nothing: no heavy imports."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import script, write_benchmark

from conftest import LEAN_ADDOPTS
from pytest_evalbench.testing import FakeLLMServer


def lean() -> dict[str, str]:
    """This environment, with the probes' pytest runs keeping the dev tools' pytest plugins out
    (conftest.LEAN_ADDOPTS): fewer plugins that could import a heavy module themselves, and a cheaper start."""
    return {**os.environ, "PYTEST_ADDOPTS": LEAN_ADDOPTS}


HEAVY = ("openai", "aiohttp", "pydantic", "httpx", "yaml", "jsonschema", "pytest_evalbench.plugin.session",
         "pytest_evalbench.llm.engine", "pytest_evalbench.llm.transport",
         # what only a benchmark run needs: files (filelock, orjson), the cache, the text-safety tables
         "filelock", "orjson", "pytest_evalbench.base.files", "pytest_evalbench.llm.cache",
         "pytest_evalbench.base.safe_text", "pytest_evalbench.base.errors", "pytest_evalbench.render.progress",
         # the run store: imported where a run ends and is recorded, by the commands that read it
         "sqlalchemy", "sqlalchemy.orm", "alembic", "pytest_evalbench.store.db")


def _loaded_after(code: str, cwd: Path) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=lean(), cwd=cwd, check=True)
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_importing_the_plugin_imports_nothing_heavy(tmp_path: Path) -> None:
    assert _loaded_after("import pytest_evalbench.plugin", tmp_path) == []


def test_unrelated_run_with_the_plugin_imports_nothing_heavy(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text("def test_ok():\n    assert True\n")

    def run(*extra: str) -> str:
        args = ["-q", "-p", "no:cacheprovider", *extra, "test_plain.py"]
        return f"import pytest\nassert pytest.main({args!r}) == 0"

    # other installed plugins may import some of these themselves: compare with the plugin disabled
    assert _loaded_after(run(), tmp_path) == _loaded_after(run("-p", "no:evalbench"), tmp_path)


def test_benchmark_option_still_loads_the_engine(tmp_path: Path) -> None:
    # the counter-check: the probe does see the heavy modules once --benchmark is given
    bench = tmp_path / "benchmarks" / "b"
    bench.mkdir(parents=True)
    (bench / "benchmark.yaml").write_text("name: b\n")
    run = "import pytest\npytest.main(['-q', '-p', 'no:cacheprovider', '--benchmark=b', '--collect-only'])"
    loaded = _loaded_after(run, tmp_path)
    assert "pytest_evalbench.plugin.session" in loaded and "pydantic" in loaded
    assert "sqlalchemy" not in loaded  # collecting records nothing


def test_a_run_with_recording_off_imports_no_store(tmp_path: Path, bench_env: FakeLLMServer) -> None:
    write_benchmark(tmp_path)
    bench_env.set_responder(script(True))
    run = "import pytest\nassert pytest.main(['-q', '-p', 'no:cacheprovider', '--benchmark=demo']) in (0, 1)"
    env = {**lean(), "EVALBENCH_STORE": "none"}
    probe = f"{run}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert "pytest_evalbench.llm.engine" in loaded  # the run did run
    assert "sqlalchemy" not in loaded and "pytest_evalbench.store.db" not in loaded


@pytest.mark.slow
def test_a_run_imports_the_store_at_its_end_and_an_up_to_date_store_without_alembic_or_the_orm(
        tmp_path: Path, bench_env: FakeLLMServer) -> None:
    write_benchmark(tmp_path)
    bench_env.set_responder(script(True))
    env = {**lean(), "EVALBENCH_STORE": f"sqlite:///{tmp_path / 'runs.sqlite'}"}
    run = ("import pytest\nassert pytest.main(['-q', '-p', 'no:cacheprovider', '--benchmark=demo']) in (0, 1)\n"
           f"import json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))")
    loaded = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", run], capture_output=True, text=True, env=env, cwd=tmp_path,
                             check=True)
        loaded.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert "sqlalchemy" in loaded[0] and "alembic" in loaded[0]  # a new store: its tables are made by Alembic
    assert "sqlalchemy" in loaded[1] and "alembic" not in loaded[1]
    assert "sqlalchemy.orm" not in loaded[1]  # the store is SQLAlchemy Core alone


def test_a_benchmark_session_is_set_up_with_the_collector_paused(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The session's imports and settings are built with Python's cyclic collector paused and go into
    its permanent generation (a worker's collection phase does not walk them again); the collector is
    as it was afterwards, and the config's cleanup gives the frozen objects back."""
    from pytest_evalbench import plugin

    collecting: list[bool] = []
    real = plugin.build_settings

    def recorded(config: pytest.Config) -> Any:
        collecting.append(gc.isenabled())
        return real(config)

    monkeypatch.setattr(plugin, "build_settings", recorded)
    write_benchmark(pytester.path)
    pytester.makeconftest("import gc, pathlib\n\ndef pytest_sessionstart(session):\n"
                          "    pathlib.Path('frozen.txt').write_text(str(gc.get_freeze_count()))\n")
    frozen_before = gc.get_freeze_count()
    for enabled in (True, False):  # a process that turned the collector off keeps it off
        (gc.enable if enabled else gc.disable)()
        try:
            assert pytester.runpytest("--benchmark=demo", "--collect-only").ret == 0
            assert gc.isenabled() is enabled
        finally:
            gc.enable()
        assert int((pytester.path / "frozen.txt").read_text()) > frozen_before  # frozen before the session starts
        assert gc.get_freeze_count() == frozen_before  # and given back
    assert collecting == [False, False]


def _kind_imports(kind: str, cwd: Path) -> list[str]:
    """Our modules in sys.modules after resolving benchmark.yaml's `kind:` to its class, as a run does."""
    probe = ("import json, sys\nfrom pytest_evalbench.kinds.protocol import spec_kind\nfrom pytest_evalbench.formats.spec import "
             f"BenchmarkSpec\nspec_kind(BenchmarkSpec.model_validate({{'name': 'b', 'kind': {kind!r}}}))\n"
             "print(json.dumps(sorted(m for m in sys.modules if m.startswith('pytest_evalbench.'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=lean(), cwd=cwd, check=True)
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_scenario_kind_does_not_import_the_dataset_kind(tmp_path: Path) -> None:
    loaded = _kind_imports("scenarios", tmp_path)
    assert "pytest_evalbench.kinds.scenarios.kind" in loaded  # the counter-check: the probe sees the kind it loaded
    assert [m for m in loaded if m.startswith(("pytest_evalbench.kinds.dataset", "pytest_evalbench.kinds.calibration"))] == []


def test_the_dataset_kind_does_not_import_the_scenario_kind(tmp_path: Path) -> None:
    loaded = _kind_imports("dataset", tmp_path)
    assert "pytest_evalbench.kinds.dataset.kind" in loaded
    assert [m for m in loaded if m.startswith(("pytest_evalbench.kinds.scenarios", "pytest_evalbench.kinds.calibration"))] == []


def test_collecting_a_scenario_benchmark_imports_no_other_kind(tmp_path: Path) -> None:
    # what an xdist worker imports before its first item: its kind, not the dataset or calibration kind
    write_benchmark(tmp_path)
    run = "import pytest\nassert pytest.main(['-q', '-p', 'no:cacheprovider', '--benchmark=demo', '--collect-only']) == 0"
    probe = f"{run}\nimport json, sys\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith('pytest_evalbench.'))))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=lean(), cwd=tmp_path, check=True)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert "pytest_evalbench.kinds.scenarios.kind" in loaded
    unwanted = ("pytest_evalbench.kinds.dataset", "pytest_evalbench.kinds.calibration")
    assert [m for m in loaded if m.startswith(unwanted)] == []


NOT_FOR_A_PLAIN_RUN = ("openai", "httpx", "aiohttp", "jinja2", "pytest_evalbench.render.markdown")


def _run_imports(cwd: Path, *args: str, modules: tuple[str, ...] = NOT_FOR_A_PLAIN_RUN) -> list[str]:
    """Which of `modules` a whole benchmark run in this process imported."""
    argv = ['-q', '-p', 'no:cacheprovider', '--benchmark=demo', *args]
    run = f"import pytest\nassert pytest.main({argv!r}) in (0, 1)"  # exit 1: m02 fails, a scored run
    probe = f"{run}\nimport json, sys\nprint(json.dumps([m for m in {modules!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=lean(), cwd=cwd, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
def test_a_run_imports_an_sdk_only_for_its_transport_and_markdown_only_when_written(
        tmp_path: Path, bench_env: FakeLLMServer) -> None:
    write_benchmark(tmp_path)
    bench_env.set_responder(script(True))
    assert _run_imports(tmp_path) == ["aiohttp"]  # the default transport, HTML report only
    assert _run_imports(tmp_path, "--evalbench-cache=replay") == []  # every answer replayed: no HTTP client
    # the counter-check: the probe sees them once the run asks for them
    loaded = _run_imports(tmp_path, "--evalbench-cache=off", "--evalbench-transport=openai",
                          f"--evalbench-markdown={tmp_path / 'summary.md'}")
    assert "openai" in loaded and "pytest_evalbench.render.markdown" in loaded
