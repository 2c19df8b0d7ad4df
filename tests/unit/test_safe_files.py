"""The checked write helper itself (the session's preflight aside): every write under a benchmark
directory refuses links out of it, links at the file, and non-regular files; nothing is written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_evalbench.base.errors import ConfigError
from pytest_evalbench.base.files import atomic_write_text, dump_json, open_append, results_lock
from pytest_evalbench.base.safe_files import (
    UnsafeWrite,
    check_input_file,
    check_output_file,
    check_writable_dir,
    check_write,
)

CANARY = "canary\n"


@pytest.fixture
def bench(tmp_path: Path) -> Path:
    path = tmp_path / "benchmarks" / "demo"
    path.mkdir(parents=True)
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "victim").write_text(CANARY)
    return path


def test_new_and_regular_files_inside_are_written(bench: Path) -> None:
    atomic_write_text(bench / "runs" / "t" / "scores.json", "[]\n", bench)
    atomic_write_text(bench / "runs" / "t" / "scores.json", "[1]\n", bench)
    assert (bench / "runs" / "t" / "scores.json").read_text() == "[1]\n"


def test_a_directory_linked_out_of_the_benchmark_is_refused(bench: Path, outside: Path) -> None:
    (bench / "runs").symlink_to(outside, target_is_directory=True)
    with pytest.raises(UnsafeWrite, match="outside the benchmark directory"):
        atomic_write_text(bench / "runs" / "victim", "x", bench)
    with pytest.raises(UnsafeWrite, match="outside the benchmark directory"):
        dump_json(bench / "runs" / "t" / "scores.json", [], bench)
    assert (outside / "victim").read_text() == CANARY and sorted(p.name for p in outside.iterdir()) == ["victim"]


def test_dotdot_out_of_the_benchmark_is_refused(bench: Path, outside: Path) -> None:
    with pytest.raises(UnsafeWrite, match="outside the benchmark directory"):
        check_write(bench / "runs" / ".." / ".." / ".." / "outside" / "victim", bench)


def test_a_link_at_the_file_is_refused_even_inside(bench: Path, outside: Path) -> None:
    (bench / "history.jsonl").symlink_to(outside / "victim")
    (bench / "other.json").write_text("{}")
    (bench / "inner-link.json").symlink_to(bench / "other.json")
    for name in ("history.jsonl", "inner-link.json"):
        with pytest.raises(UnsafeWrite, match="is a symbolic link"):
            atomic_write_text(bench / name, "x", bench)
    with pytest.raises(UnsafeWrite, match="is a symbolic link"), open_append(bench / "history.jsonl", bench):
        pass
    assert (outside / "victim").read_text() == CANARY and (bench / "other.json").read_text() == "{}"


def test_a_directory_where_a_file_goes_is_refused(bench: Path) -> None:
    (bench / "results.json").mkdir()
    with pytest.raises(UnsafeWrite, match="is a directory, not a regular file"):
        dump_json(bench / "results.json", [], bench)


def test_a_linked_lock_file_is_never_opened(bench: Path, outside: Path) -> None:
    """filelock opens its file with O_TRUNC: through a link, the victim would be emptied."""
    (bench / ".results.lock").symlink_to(outside / "victim")
    with pytest.raises(UnsafeWrite, match="is a symbolic link"), results_lock(bench):
        pass
    assert (outside / "victim").read_text() == CANARY


def test_a_shard_directory_checks_against_the_benchmark(bench: Path, outside: Path) -> None:
    (bench / "shards").symlink_to(outside, target_is_directory=True)
    with pytest.raises(UnsafeWrite, match="outside the benchmark directory"), \
            results_lock(bench / "shards" / "1-of-2", root=bench):
        pass
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]


def test_appending_creates_and_appends(bench: Path) -> None:
    for line in (b"one\n", b"two\n"):
        with open_append(bench / "history.jsonl", bench) as handle:
            handle.write(line)
    assert (bench / "history.jsonl").read_bytes() == b"one\ntwo\n"


def test_paths_given_by_the_user(tmp_path: Path) -> None:
    assert check_output_file(tmp_path / "new.html", "--evalbench-html") == tmp_path / "new.html"
    (tmp_path / "link.html").symlink_to(tmp_path / "real.html")
    (tmp_path / "real.html").write_text("old")
    check_output_file(tmp_path / "link.html", "--evalbench-html")  # the user's own link to a regular file
    with pytest.raises(ConfigError, match="is a character device"):
        check_output_file(Path("/dev/null"), "--evalbench-markdown")
    with pytest.raises(ConfigError, match="is a directory"):
        check_output_file(tmp_path, "--evalbench-html")
    with pytest.raises(ConfigError, match="no file can be written in /proc"):
        check_output_file(Path("/proc/version"), "--evalbench-save-baseline")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ConfigError, match="is a fifo, not a regular file"):
        check_input_file(tmp_path / "fifo", "the baseline")
    with pytest.raises(ConfigError, match="is a character device, not a regular file"):
        check_input_file(Path("/dev/zero"), "the baseline")
    assert check_input_file(tmp_path / "missing.json", "the baseline") == tmp_path / "missing.json"


def test_writable_directories(tmp_path: Path) -> None:
    assert check_writable_dir(tmp_path / "new" / "cache", "the cache") == tmp_path / "new" / "cache"
    assert not list(tmp_path.iterdir())  # nothing created, the probe file is gone
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="the cache is not writable"):
        check_writable_dir(tmp_path / "file" / "cache", "the cache")
