"""A finish whose run files would come out byte for byte as they are on disk leaves them as they are
(issue 27: a fully cached 10,000-item replay spent half its finish encoding and writing 16 MB it had
written before). Anything else that could change a byte writes them as usual."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import read_json, scenario, script, write_benchmark

from pytest_evalbench.testing import FakeLLMServer

FILES = ("conversations.json", "scores.json", ".usage.json", "cost.json")


def state(run_dir: Path) -> dict[str, tuple[int, bytes]]:
    """Each run file's inode (a write replaces the file: a new inode) and bytes."""
    return {name: ((run_dir / name).stat().st_ino, (run_dir / name).read_bytes()) for name in FILES}


def contents(run_dir: Path) -> dict[str, bytes]:
    return {name: (run_dir / name).read_bytes() for name in FILES}


@pytest.fixture
def bench(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> Path:
    bench_env.set_responder(script(True))
    return write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01"), scenario("m01_s002_v01", "m01")],
                           generation={"turns": 1})


def run(pytester: pytest.Pytester, *args: str, passed: int = 2) -> None:
    pytester.runpytest("--benchmark=demo", "--evalbench-cache=on", *args).assert_outcomes(passed=passed)


@pytest.mark.parametrize("workers", [[], ["-n", "2"]])
def test_a_replay_of_the_same_records_leaves_the_run_files_as_they_are(pytester: pytest.Pytester, bench: Path,
                                                                       workers: list[str]) -> None:
    run_dir = bench / "runs" / "tgt"
    run(pytester, *workers)
    run(pytester, *workers)  # replayed from the item memos: records as the memos hold them
    before = state(run_dir)
    run(pytester, *workers)
    assert state(run_dir) == before  # not even rewritten: the same inodes
    assert [r["by_metric"]["m01"]["n_passed"] for r in read_json(bench / "results.json")] == [2]
    assert json.loads((bench / "last_run.json").read_text())["status"] == "complete"
    (bench / ".written.json").unlink()  # what a finish writes from these records, when it does write them
    run(pytester, *workers)
    assert contents(run_dir) == {name: data for name, (_, data) in before.items()}


def test_a_run_file_edited_since_is_written_again(pytester: pytest.Pytester, bench: Path) -> None:
    run_dir = bench / "runs" / "tgt"
    run(pytester)
    run(pytester)
    written = contents(run_dir)
    scores = run_dir / "scores.json"
    scores.write_text(scores.read_text().replace('"passed": true', '"passed": false', 1))
    run(pytester)
    assert contents(run_dir) == written


def test_a_subset_run_keeps_the_rows_of_other_cases(pytester: pytest.Pytester, bench: Path) -> None:
    """A -k run writes its row and keeps the other case's (its files are not its rows alone: no note),
    and a full run after it writes the full run's bytes."""
    run_dir = bench / "runs" / "tgt"
    run(pytester)
    run(pytester)
    full = contents(run_dir)
    for _ in range(2):
        run(pytester, "-k", "s002", passed=1)
        assert contents(run_dir) == full
        assert [r["id"] for r in read_json(run_dir / "scores.json")] == ["m01_s001_v01", "m01_s002_v01"]
        assert not (bench / ".written.json").exists()
    run(pytester)
    assert contents(run_dir) == full
    assert (bench / ".written.json").exists()


def test_other_records_write_the_run_files(pytester: pytest.Pytester, bench: Path, bench_env: FakeLLMServer) -> None:
    run_dir = bench / "runs" / "tgt"
    run(pytester)
    run(pytester)
    bench_env.set_responder(script(False))
    pytester.runpytest("--benchmark=demo", "--evalbench-cache=off").assert_outcomes(failed=2)
    assert [r["passed"] for r in read_json(run_dir / "scores.json")] == [False, False]
