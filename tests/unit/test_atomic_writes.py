"""The package's one atomic write (store.atomic_open): files get the permissions any file of the
user gets (0o666 minus the umask in force when the file is written, not one read at import), a
failed write leaves the old file and no temp file, and every writer goes through it."""

from __future__ import annotations

import ast
import json
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from syntax_trees import parse

import pytest_evalbench
from pytest_evalbench.base.files import atomic_open, atomic_write_text, dump_json
from pytest_evalbench.llm.cache import ResponseCache
from pytest_evalbench.llm.limits import FileLedger
from pytest_evalbench.render.markdown import write_markdown

PACKAGE = Path(pytest_evalbench.__file__).parent


@pytest.fixture
def umask_027() -> Iterator[None]:
    """A umask set after the package was imported (as a CI step or a test runner may)."""
    old = os.umask(0o027)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.usefixtures("umask_027")
def test_written_files_follow_the_current_umask(tmp_path: Path) -> None:
    bench = tmp_path / "bench"
    atomic_write_text(bench / "runs" / "t" / "scores.json", "[]\n", bench)
    atomic_write_text(tmp_path / "report.html", "<html>", None)
    dump_json(bench / "results.json", {"a": 1})
    cache = ResponseCache(tmp_path / "cache")
    cache.put("ab" * 32, {"x": 1}, {"content": "hi"})
    ledger = FileLedger(tmp_path / "budget.json")
    ledger.settle(0.0, 0.5)
    write_markdown(tmp_path / "summary.md", "# x\n", append=False)
    written = [bench / "runs" / "t" / "scores.json", tmp_path / "report.html", bench / "results.json",
               cache.path_for("ab" * 32), tmp_path / "budget.json", tmp_path / "summary.md"]
    assert {str(p.relative_to(tmp_path)): oct(mode(p)) for p in written} == {
        str(p.relative_to(tmp_path)): oct(0o640) for p in written}


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "results.json"
    target.write_text("old\n")

    def interrupted() -> None:
        with atomic_open(target, tmp_path) as handle:
            handle.write("half")
            raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        interrupted()
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_the_temp_file_never_opens_an_existing_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """O_EXCL: a temp name already taken, here by a link to a file outside, is skipped, not opened."""
    victim = tmp_path / "victim"
    victim.write_text("canary\n")
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / ".out.json.taken.tmp").symlink_to(victim)
    names = iter(["taken", "free"])
    monkeypatch.setattr(secrets, "token_hex", lambda _: next(names))
    atomic_write_text(bench / "out.json", "new\n", bench)
    assert victim.read_text() == "canary\n"
    assert (bench / "out.json").read_text() == "new\n"
    assert sorted(p.name for p in bench.iterdir()) == [".out.json.taken.tmp", "out.json"]


def test_no_module_reads_the_umask_or_replaces_files_itself() -> None:
    """One implementation: `os.umask` (which changes process state to read it) nowhere, and
    `os.replace` only in base/files.py."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        writer = path.relative_to(PACKAGE).as_posix() == "base/files.py"
        for node in ast.walk(parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os"
                    and (node.attr == "umask" or (node.attr == "replace" and not writer))):
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno} os.{node.attr}")
    assert offenders == []


def test_the_benchmark_gitignore_is_written_once_and_keeps_the_users_lines(tmp_path: Path) -> None:
    from pytest_evalbench.base.files import GITIGNORE_MARK, keep_gitignore

    ignore = tmp_path / ".gitignore"
    ignore.write_text("my-notes.txt")  # no trailing newline
    keep_gitignore(tmp_path)
    text = ignore.read_text()
    assert text.startswith("my-notes.txt\n" + GITIGNORE_MARK + "\n") and "/last_run.json\n" in text
    assert "/.evalbench-cache/\n" not in text and "/baseline.json" not in text  # what a team commits
    keep_gitignore(tmp_path)
    assert ignore.read_text() == text  # once
    ignore.write_text(text.replace("/report.html\n", ""))  # the user's edit of our block stays
    keep_gitignore(tmp_path)
    assert "/report.html" not in ignore.read_text()


FULL = Path("/dev/full")
needs_dev_full = pytest.mark.skipif(not FULL.exists(), reason="needs Linux's /dev/full")


def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every new file of the writers is Linux's /dev/full: its writes fail with ENOSPC, as a full disk's."""
    import pytest_evalbench.base.files as files

    monkeypatch.setattr(files, "_temp_file", lambda path: (os.open(FULL, os.O_WRONLY), path.parent / ".gone.tmp"))
    monkeypatch.setattr(files, "_open_append_fd", lambda path: os.open(FULL, os.O_RDWR))


@needs_dev_full
def test_a_full_disk_is_one_write_failed_naming_the_file_and_keeping_the_old_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_evalbench.base.files import dump_json_rows
    from pytest_evalbench.base.safe_files import WriteFailed

    target = tmp_path / "results.json"
    target.write_text("[]\n")
    full_disk(monkeypatch)
    for write in (lambda: atomic_write_text(target, "x" * 100_000, tmp_path),
                  lambda: dump_json_rows(target, ({"row": i} for i in range(10_000)), tmp_path)):
        with pytest.raises(WriteFailed) as caught:
            write()
        assert str(caught.value) == (f"{target}: could not be written (No space left on device); its earlier "
                                     "content is unchanged")
        assert target.read_text() == "[]\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_an_append_the_disk_refuses_is_cut_back(tmp_path: Path) -> None:
    import errno

    from pytest_evalbench.base.files import open_append
    from pytest_evalbench.base.safe_files import WriteFailed

    history = tmp_path / "history.jsonl"
    history.write_bytes(b'{"run": 1}\n')
    def half_a_line() -> None:
        with open_append(history, tmp_path) as fh:
            fh.write(b'{"run": 2, "torn": ')
            fh.flush()  # on disk: half a line
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # the rest does not fit

    with pytest.raises(WriteFailed, match=r"history\.jsonl: could not be written"):
        half_a_line()
    assert history.read_bytes() == b'{"run": 1}\n'


@needs_dev_full
def test_an_append_to_a_full_disk_leaves_the_file_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_evalbench.base.files import open_append
    from pytest_evalbench.base.safe_files import WriteFailed

    history = tmp_path / "history.jsonl"
    history.write_bytes(b'{"run": 1}\n')
    full_disk(monkeypatch)
    with pytest.raises(WriteFailed), open_append(history, tmp_path) as fh:
        fh.write(b"x" * 10)
    assert history.read_bytes() == b'{"run": 1}\n'


def test_the_reserved_bytes_take_the_final_word_when_the_disk_is_full(tmp_path: Path) -> None:
    from pytest_evalbench.base.safe_files import RESERVED_BYTES, WriteFailed, overwrite_reserved, reserved

    status = tmp_path / "last_run.json"
    atomic_write_text(status, reserved('{"status": "running"}\n'), tmp_path)
    assert status.stat().st_size == RESERVED_BYTES
    overwrite_reserved(status, '{"status": "error"}\n', tmp_path)
    assert status.stat().st_size == RESERVED_BYTES  # no byte more asked of the disk
    assert json.loads(status.read_text()) == {"status": "error"}
    with pytest.raises(WriteFailed, match="reserved 4,096 bytes hold less"):
        overwrite_reserved(status, "x" * (RESERVED_BYTES + 1), tmp_path)
    assert json.loads(status.read_text()) == {"status": "error"}


@needs_dev_full
def test_the_record_spool_on_a_full_disk_is_one_write_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_evalbench.base.spool as spool_module
    from pytest_evalbench.base.safe_files import WriteFailed
    from pytest_evalbench.base.spool import Spool

    class Full:
        gettempdir = staticmethod(lambda: "/tmp")

        @staticmethod
        def TemporaryFile(**kwargs: object) -> object:
            return open(FULL, "w+b", buffering=64)

    monkeypatch.setattr(spool_module, "tempfile", Full)
    rows: Spool[str] = Spool()
    def fill() -> None:
        for n in range(100):
            rows.add(str(n), {"row": "x" * 50})

    with pytest.raises(WriteFailed, match=r"\.evalbench-spool-\* \(the run's record spool\): could not be written"):
        fill()
    rows.close()  # never raises: what it could not write goes with it


@needs_dev_full
def test_a_cache_entry_the_disk_refuses_is_counted_not_lost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_evalbench.llm.cache import CachedCalls
    from pytest_evalbench.llm.types import EngineStats

    stats = EngineStats()
    calls = CachedCalls(ResponseCache(tmp_path / "cache", "refresh"), stats)
    full_disk(monkeypatch)
    response = {"content": "hi", "finish_reason": "stop"}
    calls.submit(lambda: calls._put("ab" * 32, {"model": "m"}, response)).result()
    calls.close()
    assert stats.unwritten_lines() == [f"1 cache entry not written: {tmp_path / 'cache'} (No space left on device)"]
    merged = EngineStats()
    merged.merge(stats.to_json())  # from an xdist worker to the controller
    assert merged.unwritten == stats.unwritten


@needs_dev_full
def test_a_command_on_a_full_disk_is_one_line_and_exit_7(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_evalbench.__main__ import main

    full_disk(monkeypatch)
    assert main(["init", "demo", "--root", str(tmp_path)]) == 7
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"evalbench init: {tmp_path / 'benchmarks' / 'demo'}/")
    assert "could not be written (No space left on device)" in err


WRITES_ELSEWHERE = {
    "base/files.py": "the one writer",
    "base/safe_files.py": "the one writer's fallback (a state file's reserved bytes rewritten in place) and "
                          "its probe of a directory (a temporary file made and removed)",
    "base/spool.py": "an unnamed temporary file (tempfile), nowhere in the repository",
    "cli/schemas.py": "the package's own schemas/, a maintainer's command",
    "llm/local_model.py": "the embedded model's weights in the user's cache directory, outside any benchmark",
    "llm/limits.py": "the rate-limit slot file, opened O_NOFOLLOW in the cache directory the run checked",
    "render/markdown.py": "appends to $GITHUB_STEP_SUMMARY, the file the CI runner names (through files.writing)",
}
"""Modules that write a file other than through base/files.py, and why it may."""


def test_everything_the_package_writes_goes_through_the_one_writer() -> None:
    """`init`, `merge`, `mutate`, authoring and a run write through base/files.py (no link followed,
    nothing outside the benchmark, a full disk named): no module but those in WRITES_ELSEWHERE opens
    a file for writing, copies one or writes one by pathlib."""
    writing = {"write_text", "write_bytes", "copyfile", "copy", "copy2", "copytree", "move", "touch"}
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = path.relative_to(PACKAGE).as_posix()
        if name in WRITES_ELSEWHERE:
            continue
        for node in ast.walk(parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            mode = next((a.value for a in node.args[1:2] if isinstance(a, ast.Constant)), None) or next(
                (k.value.value for k in node.keywords if k.arg == "mode" and isinstance(k.value, ast.Constant)), "")
            opens_to_write = called == "open" and isinstance(mode, str) and set(mode) & set("wax+")
            os_open = called == "open" and isinstance(func, ast.Attribute) and getattr(func.value, "id", "") == "os"
            if called in writing or opens_to_write or os_open:
                offenders.append(f"{name}:{node.lineno} {called}")
    assert offenders == []
