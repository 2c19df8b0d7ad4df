"""Assembly of a model shipped as ordered part packages (the [local] extra's 1.5B GGUF), on small
fake part packages placed on sys.path: hash and size check, atomic replace, clear mismatch error,
resume after a crash mid-part, and two concurrent assemblers."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import sys
import time
from pathlib import Path

import pytest

from pytest_evalbench.base.errors import ConfigError
from pytest_evalbench.llm import local_model
from pytest_evalbench.llm.local_model import LocalModel, assemble

PARTS = [bytes([i]) * (3000 + 17 * i) for i in range(1, 6)]
WHOLE = b"".join(PARTS)


def fake_model(root: Path, tag: str, parts: list[bytes] = PARTS, *, sha: str | None = None) -> LocalModel:
    """Part packages `<tag>_part<i>` holding `data/part<ii>.bin`, importable from `root`."""
    for i, data in enumerate(parts, 1):
        package = root / f"{tag}_part{i}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("raise RuntimeError('part packages are never imported')\n")
        (package / "data" / f"part{i:02d}.bin").write_bytes(data)
    return LocalModel(name="fake", extra="local", file_name="fake.gguf",
                      packages=tuple(f"{tag}_part{i}" for i in range(1, len(parts) + 1)),
                      size=len(WHOLE), sha256=sha or hashlib.sha256(WHOLE).hexdigest(),
                      part_path=lambda i: f"data/part{i:02d}.bin")


@pytest.fixture
def parts_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    return root


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith((".partial", ".progress", ".tmp")))


def test_assembles_in_order_and_checks_the_hash(parts_root: Path, tmp_path: Path) -> None:
    model = fake_model(parts_root, "ok")
    target = tmp_path / "cache" / "fake.gguf"
    assert assemble(model, target) == target
    assert target.read_bytes() == WHOLE
    assert leftovers(target.parent) == []
    assert not any(name.startswith("ok_part") for name in sys.modules)  # located, never imported


def test_a_verified_file_is_not_rebuilt_and_a_corrupt_one_is_replaced_atomically(
        parts_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = fake_model(parts_root, "again")
    target = tmp_path / "fake.gguf"
    assemble(model, target)
    joins: list[int] = []
    real_join = local_model._join
    monkeypatch.setattr(local_model, "_join", lambda *a: (joins.append(1), real_join(*a)))
    assemble(model, target)
    assert joins == []  # the verification stamp matches: no re-hash, no rebuild
    target.write_bytes(b"x" * len(WHOLE))  # same size, wrong bytes, stamp no longer matches
    with open(target, "rb") as held:  # a reader of the old file keeps its (old) content: replaced, not rewritten
        assemble(model, target)
        assert joins == [1] and target.read_bytes() == WHOLE
        assert held.read() == b"x" * len(WHOLE)


def test_a_mismatch_is_one_clear_line_and_leaves_nothing(parts_root: Path, tmp_path: Path) -> None:
    model = fake_model(parts_root, "bad", sha="0" * 64)
    target = tmp_path / "fake.gguf"
    with pytest.raises(ConfigError) as info:
        assemble(model, target)
    message = str(info.value)
    assert "\n" not in message and "does not match" in message and "sha256" in message and "[local]" in message
    assert not target.exists() and leftovers(tmp_path) == []


def test_wrong_total_size_is_refused_before_writing(parts_root: Path, tmp_path: Path) -> None:
    model = fake_model(parts_root, "short", PARTS[:-1])
    with pytest.raises(ConfigError, match="hold 12,170 bytes, expected 15,255"):
        assemble(model, tmp_path / "fake.gguf")
    assert not list(tmp_path.glob("fake.gguf.p*"))


def test_missing_parts_name_the_install_command(tmp_path: Path) -> None:
    model = LocalModel(name="fake", extra="local", file_name="f.gguf", packages=("no_such_part_pkg1",),
                       size=1, sha256="0" * 64, part_path=lambda i: "x")
    with pytest.raises(ConfigError, match=r"needs the \[local\] extra: .* -m pip install .*\[local\]"):
        assemble(model, tmp_path / "f.gguf")


def test_resumes_after_a_crash_mid_part(parts_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = fake_model(parts_root, "crash")
    target = tmp_path / "fake.gguf"
    real_open = open
    reads: list[str] = []

    class Crash(Exception):
        pass

    def crashing_open(path: object, mode: str = "r", *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        handle = real_open(path, mode, *args, **kwargs)  # type: ignore[call-overload]
        name = str(path)
        if name.endswith("part04.bin"):
            handle.close()
            raise Crash  # after parts 1-3 are recorded
        return handle

    monkeypatch.setattr("builtins.open", crashing_open)
    with pytest.raises(Crash):
        assemble(model, target)
    monkeypatch.setattr("builtins.open", real_open)
    partial = tmp_path / "fake.gguf.partial"
    record = json.loads((tmp_path / "fake.gguf.progress").read_text())
    assert record["parts"] == 3 and record["bytes"] == sum(map(len, PARTS[:3]))
    with real_open(partial, "ab") as handle:
        handle.write(b"half of part 4")  # bytes of the part being written when the crash came
    assert not target.exists()

    def counting_open(path: object, mode: str = "r", *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        reads.append(Path(str(path)).name)
        return real_open(path, mode, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr("builtins.open", counting_open)
    assemble(model, target)
    monkeypatch.setattr("builtins.open", real_open)
    assert target.read_bytes() == WHOLE
    part_reads = [name for name in reads if name.startswith("part")]
    assert part_reads == ["part04.bin", "part05.bin"]  # parts 1-3 came from the partial file (re-hashed)
    assert leftovers(tmp_path) == []


def test_a_tampered_prefix_is_caught_by_the_rehash(parts_root: Path, tmp_path: Path) -> None:
    model = fake_model(parts_root, "tamper")
    target = tmp_path / "fake.gguf"
    sizes = [len(p) for p in PARTS[:2]]
    (tmp_path / "fake.gguf.partial").write_bytes(b"\0" * sum(sizes))
    (tmp_path / "fake.gguf.progress").write_text(json.dumps({"parts": 2, "bytes": sum(sizes), "sizes": sizes}))
    with pytest.raises(ConfigError, match="does not match"):
        assemble(model, target)
    assert leftovers(tmp_path) == [] and not target.exists()
    assert assemble(model, target).read_bytes() == WHOLE  # the next attempt starts clean


def _assemble_in_child(root: str, target: str, out: str) -> None:
    sys.path.insert(0, root)
    joined: list[int] = []
    real_join = local_model._join

    def slow_join(*args: object) -> None:
        joined.append(1)
        time.sleep(1.0)  # long enough that both children would be joining at once without the lock
        real_join(*args)  # type: ignore[arg-type]

    local_model._join = slow_join  # type: ignore[assignment]
    spec = LocalModel(name="fake", extra="local", file_name="fake.gguf",
                      packages=tuple(f"conc_part{i}" for i in range(1, len(PARTS) + 1)), size=len(WHOLE),
                      sha256=hashlib.sha256(WHOLE).hexdigest(), part_path=_part_path)
    assemble(spec, Path(target))
    Path(out).write_text(str(len(joined)))


def _part_path(i: int) -> str:
    return f"data/part{i:02d}.bin"


def test_two_concurrent_assemblers_join_once(parts_root: Path, tmp_path: Path) -> None:
    fake_model(parts_root, "conc")
    target = tmp_path / "fake.gguf"
    context = multiprocessing.get_context("spawn")
    children = [context.Process(target=_assemble_in_child, args=(str(parts_root), str(target), str(tmp_path / f"n{i}")))
                for i in range(2)]
    for child in children:
        child.start()
    for child in children:
        child.join(60)
        assert child.exitcode == 0
    assert sorted((tmp_path / f"n{i}").read_text() for i in range(2)) == ["0", "1"]
    assert target.read_bytes() == WHOLE and leftovers(tmp_path) == []
