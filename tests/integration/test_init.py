"""`evalbench init NAME` writes a benchmark that runs at once, as its printed next command says."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import LEAN_ADDOPTS
from pytest_evalbench.__main__ import main
from pytest_evalbench.testing import FakeLLMServer, schema_answer


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A printed command as a user pastes it (the venv's `pytest` first on PATH)."""
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
           "PYTEST_ADDOPTS": LEAN_ADDOPTS}  # only the dev tools' pytest plugins out, which the command does not use
    return subprocess.run(["bash", "-c", command], check=False, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=240)


def test_init_writes_a_benchmark_whose_printed_command_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init", "x"]) == 0
    out = capsys.readouterr().out
    spec = yaml.safe_load((tmp_path / "benchmarks/x/benchmark.yaml").read_text())
    assert spec["targets"] and spec["user_model"] and spec["evaluator_model"]
    assert [m["type"] for m in spec["metrics"]] == ["positive", "negative"]
    assert all(m["definition"] and m["examples"] and m["checks"] for m in spec["metrics"])
    assert "# " in (tmp_path / "benchmarks/x/benchmark.yaml").read_text()  # says what to edit
    printed = [line.strip() for line in out.splitlines() if line.startswith("  pytest ")]
    assert printed == ["pytest --benchmark=x --evalbench-provider=local",
                       "pytest --benchmark=x --evalbench-base-url=http://localhost:8000/v1"]
    with FakeLLMServer(schema_answer) as server:
        command = printed[1].replace("http://localhost:8000/v1", server.base_url) + " -p no:cacheprovider"
        result = shell(command, tmp_path)
    assert result.returncode in (0, 1, 6), result.stdout[-2000:] + result.stderr[-2000:]
    assert "3 items recorded" in result.stdout and "Traceback" not in result.stdout + result.stderr


def test_init_refuses_to_overwrite_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "x", "--root", str(tmp_path)]) == 0
    spec = tmp_path / "benchmarks/x/benchmark.yaml"
    spec.write_text(spec.read_text() + "# mine\n")
    capsys.readouterr()
    assert main(["init", "x", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "already exists; pass --force" in err and "# mine" in spec.read_text()
    assert main(["init", "x", "--root", str(tmp_path), "--force"]) == 0
    assert "# mine" not in spec.read_text()
    out = capsys.readouterr().out
    assert f"  cd {tmp_path} && pytest --benchmark=x --evalbench-provider=local" in out


def test_init_refuses_a_name_that_is_not_a_directory_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "../x", "--root", str(tmp_path)]) == 2
    assert "use lower-case letters, digits" in capsys.readouterr().err
    assert not (tmp_path / "benchmarks").exists()
    assert main(["init", "x" * 300, "--root", str(tmp_path)]) == 2  # longer than a file name may be
    assert "at most 100 of them" in capsys.readouterr().err
    assert not (tmp_path / "benchmarks").exists()


def test_a_benchmark_run_does_not_import_the_test_suites_conftest(tmp_path: Path) -> None:
    """`testpaths = ["tests"]` names the project's own test suite: `pytest --benchmark=NAME` imports
    the conftests of benchmarks/NAME/ and its parents (a root conftest.py with app hooks), not those."""
    assert main(["init", "x", "--root", str(tmp_path)]) == 0
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/conftest.py").write_text("raise RuntimeError('the test suite conftest was imported')\n")
    (tmp_path / "conftest.py").write_text("import pathlib\npathlib.Path('root-conftest-loaded').touch()\n")
    with FakeLLMServer(schema_answer) as server:
        result = shell(f"pytest --benchmark=x --evalbench-base-url={server.base_url} -p no:cacheprovider", tmp_path)
    assert result.returncode in (0, 1), result.stdout[-2000:] + result.stderr[-2000:]
    assert "the test suite conftest was imported" not in result.stdout + result.stderr
    assert (tmp_path / "root-conftest-loaded").exists()
    assert "3 items recorded" in result.stdout
