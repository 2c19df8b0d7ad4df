"""The item memo's code fingerprint (llm/item_memo.py): any edit to the package's files, a prompt
template included, changes it; compiled caches do not."""

from __future__ import annotations

from pathlib import Path

from pytest_evalbench.llm.item_memo import code_fingerprint, fingerprint, tree_fingerprint


def test_an_edit_to_any_file_changes_the_fingerprint(tmp_path: Path) -> None:
    (tmp_path / "scenarios").mkdir()
    template = tmp_path / "scenarios" / "judge.py"
    template.write_text('PROMPT = "Decide strictly from the transcript"\n')
    (tmp_path / "schema.json").write_text("{}")
    before = tree_fingerprint(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "judge.cpython-311.pyc").write_bytes(b"\0compiled")
    assert tree_fingerprint(tmp_path) == before
    template.write_text('PROMPT = "Decide strictly from the transcript!"\n')
    assert tree_fingerprint(tmp_path) != before
    template.write_text('PROMPT = "Decide strictly from the transcript"\n')
    assert tree_fingerprint(tmp_path) == before
    template.rename(tmp_path / "scenarios" / "judge2.py")  # the same bytes under another name
    assert tree_fingerprint(tmp_path) != before


def test_the_run_fingerprint_covers_the_package_and_the_run() -> None:
    assert len(code_fingerprint()) == 64
    assert fingerprint({"spec": {"turns": 3}}) != fingerprint({"spec": {"turns": 2}})
    assert fingerprint({"spec": {"turns": 3}}) == fingerprint({"spec": {"turns": 3}})


def test_a_memo_key_tells_its_parts_apart(tmp_path: Path) -> None:
    """Each part is hashed with its type and length: no two different cases share a key."""
    from types import SimpleNamespace
    from typing import Any, cast

    from pytest_evalbench.llm.item_memo import ItemMemo

    def memo(run: str) -> ItemMemo:
        return ItemMemo(cast(Any, SimpleNamespace(cache=SimpleNamespace(directory=tmp_path))), run)

    first, other = memo("run-a"), memo("run-b")
    cases: list[tuple[str | int, ...]] = [('{"id":"x"}', "t", 0), ('{"id":"x"}', "t", 1), ('{"id":"x"}t', "", 0),
                                          ('{"id":"x"}', "t0", 0), ('{"id":"x"}', "t", "0"), ('{"id":"é"}', "t", 0)]
    keys = [first.key(*case) for case in cases]
    assert len(set(keys)) == len(cases) and all(len(k) == 64 for k in keys)
    assert [first.key(*case) for case in cases] == keys  # stable
    assert {other.key(*case) for case in cases}.isdisjoint(keys)  # another run's fingerprint
