"""The example benchmarks' result files (issue 26): every JSON file a run writes carries `version`, and
`-n 0` and `-n 4` write the same bytes.

benchmarks/demo, agents and support-app replay offline from their committed caches
(`--evalbench-cache=replay`: zero network calls; support-app's app comes from the top-level
conftest.py). The only bytes allowed to differ are the session's own time (`last_run.json`
`finished_at`, `.sessions.json` and `history.jsonl` `time`, report.html's date), which is a fact
about the session, not about the results, and the absolute path of the directory each run is in
(report.html's file list). Both are replaced by placeholders before comparing; nothing else is.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import LEAN_ADDOPTS

ROOT = Path(__file__).parents[2]
EXAMPLES = ("demo", "agents", "support-app", "agent-tools")
SESSION_TIME = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
NOT_JSON = {"report.html", ".results.lock", ".gitignore"}
"""What a run writes that is not a JSON file: the HTML report and the (empty) result lock."""

pytestmark = pytest.mark.slow  # every example run twice (-n 0 and -n 4)


RUN_OUTPUTS = ("runs", "results.json", "cost.json", "last_run.json", ".usage.json", "case_results.json", "agent_summary.json",
               ".results.lock", "report.html", "history.jsonl", ".sessions.json", ".endpoint-limits*", "shards")
"""What an earlier run left in the checkout (CI runs the demo before the suite; .gitignore lists the
same): not copied, so the run under test writes every one of them itself."""


def run_example(root: Path, name: str, workers: str) -> dict[str, bytes]:
    """Run one example in a copy of it under `root`; every file the run wrote (path -> bytes)."""
    root.mkdir()
    bench = root / "benchmarks" / name
    shutil.copytree(ROOT / "benchmarks" / name, bench, ignore=shutil.ignore_patterns(*RUN_OUTPUTS))
    shutil.copy(ROOT / "conftest.py", root / "conftest.py")
    inputs = {p for p in bench.rglob("*") if p.is_file()}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "OPENAI_", "EVALBENCH_"))}
    env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"  # replay never calls; nothing reaches a real host
    env["PYTEST_ADDOPTS"] = LEAN_ADDOPTS
    done = subprocess.run([sys.executable, "-m", "pytest", f"--benchmark={name}", "--evalbench-cache=replay",
                           "-n", workers, "-p", "no:randomly", "-p", "no:cacheprovider", "-q"],
                          check=False, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    assert "0 requests" in done.stdout, done.stdout[-2000:]  # replayed, offline
    return {str(p.relative_to(bench)): p.read_bytes() for p in sorted(bench.rglob("*"))
            if p.is_file() and p not in inputs}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], tuple[Path, dict[str, bytes]]]:
    """Each example at -n 0 and -n 4, three at a time (each is mostly waiting on its subprocess)."""
    base = tmp_path_factory.mktemp("examples")
    jobs = [(name, workers) for name in EXAMPLES for workers in ("0", "4")]
    with ThreadPoolExecutor(max_workers=3) as pool:
        done = pool.map(lambda job: run_example(base / f"{job[0]}-n{job[1]}", *job), jobs)
        return {job: (base / f"{job[0]}-n{job[1]}", files) for job, files in zip(jobs, done)}


def check_versioned(path: str, data: bytes) -> None:
    if path.endswith(".jsonl"):
        for number, line in enumerate(data.decode().splitlines(), start=1):
            assert json.loads(line).get("version") == 1, f"{path}:{number} has no version"
        return
    value = json.loads(data)
    rows = value if isinstance(value, list) else [value]
    assert rows, f"{path} is an empty list"
    for number, row in enumerate(rows, start=1):
        assert row.get("version") == 1, f"{path}: row {number} has no version"
        if isinstance(value, list):
            assert list(row)[-1] == "version", f"{path}: row {number}: version is not last"


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_file_a_run_writes_carries_the_version(runs: dict[tuple[str, str], tuple[Path, dict[str, bytes]]],
                                                      name: str) -> None:
    _, files = runs[(name, "0")]
    assert "last_run.json" in files and "history.jsonl" in files and ".sessions.json" in files
    assert any(p.endswith("cost.json") for p in files) and any(p.endswith(".usage.json") for p in files)
    for path, data in files.items():
        if Path(path).name not in NOT_JSON:
            check_versioned(path, data)


@pytest.mark.parametrize("name", EXAMPLES)
def test_n0_and_n4_write_the_same_bytes(runs: dict[tuple[str, str], tuple[Path, dict[str, bytes]]],
                                        name: str) -> None:
    (root0, serial), (root4, parallel) = runs[(name, "0")], runs[(name, "4")]
    assert sorted(serial) == sorted(parallel)

    def comparable(root: Path, data: bytes) -> bytes:
        return SESSION_TIME.sub(b"<session time>", data.replace(str(root).encode(), b"<dir>"))

    differ = [path for path in serial if comparable(root0, serial[path]) != comparable(root4, parallel[path])]
    assert differ == []
    timed = sorted(path for path in serial if SESSION_TIME.search(serial[path]))
    assert timed == [".sessions.json", "history.jsonl", "last_run.json", "report.html"]  # nothing else has a time
