"""Result files carry `version` (issue 26, C17): files written before it existed still read, a newer
version is refused with one line naming the file (and row), and what is written carries it last."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_evalbench.base.errors import InputError
from pytest_evalbench.base.files import FORMAT_VERSION, read_rows, read_valid_rows, versioned
from pytest_evalbench.formats.provenance import SessionStamp, read_sessions, update_sessions
from pytest_evalbench.kinds.scenarios.models import ScoreRow
from pytest_evalbench.llm.cache import CorruptEntry, ResponseCache, cache_key
from pytest_evalbench.llm.costs import read_usage, update_cost_file
from pytest_evalbench.llm.types import Usage
from pytest_evalbench.render.summary import read_history

SCORE = {"id": "m01_s001_v01", "metric_id": "m01", "metric_name": "Asks", "metric_type": "positive",
         "target_model": "t", "conv_id": "m01_s001_v01__t", "present": True, "passed": True, "score": 1,
         "justification": "yes", "sample": 0, "decided_by": "judge"}


def write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_versioned_puts_the_version_last_and_keeps_the_documented_order() -> None:
    row = versioned({"version": 7, **SCORE})
    assert list(row) == [*SCORE, "version"] and row["version"] == FORMAT_VERSION == 1


def test_rows_written_before_the_version_existed_still_read(tmp_path: Path) -> None:
    old = write(tmp_path / "scores.json", [SCORE])
    assert read_valid_rows(old, ScoreRow) == [SCORE]
    new = write(tmp_path / "new.json", [versioned(SCORE)])
    assert read_valid_rows(new, ScoreRow) == [SCORE]  # the version is the file's, not the row model's
    assert read_rows(new) == [SCORE]


def test_a_row_of_a_newer_version_is_refused_naming_file_and_row(tmp_path: Path) -> None:
    path = write(tmp_path / "scores.json", [versioned(SCORE), {**SCORE, "version": 2}])
    with pytest.raises(InputError) as caught:
        read_valid_rows(path, ScoreRow)
    message = str(caught.value)
    assert message.startswith(f"{path}:2, field 'version': written by a newer pytest-evalbench (file format version 2")
    assert "\n" not in message
    with pytest.raises(InputError, match="unknown file format version 'one'"):
        read_rows(write(tmp_path / "results.json", [{**SCORE, "version": "one"}]))


def test_object_files_old_read_new_refused(tmp_path: Path) -> None:
    ledger = write(tmp_path / ".usage.json", {"a|0": {"simulate": Usage(input_tokens=3).to_json()}})
    assert list(read_usage(ledger)) == ["a|0"]
    write(ledger, {"a|0": {}, "version": 2})
    with pytest.raises(InputError, match=r"\.usage\.json: written by a newer pytest-evalbench"):
        read_usage(ledger)
    cost = write(tmp_path / "cost.json", {"gen_scenarios": {"phase": "gen_scenarios", "cost": 0.0, "input_tokens": 1,
                                                             "output_tokens": 1}})
    update_cost_file(cost, {"gen_metrics": Usage()})
    data = json.loads(cost.read_text())
    assert list(data) == ["gen_scenarios", "gen_metrics", "version"] and data["version"] == 1
    write(cost, {**data, "version": 3})
    with pytest.raises(InputError, match=r"cost\.json: written by a newer"):
        update_cost_file(cost, {"gen_metrics": Usage()})


def test_sessions_ledger_and_history_lines(tmp_path: Path) -> None:
    stamp = SessionStamp("2026-11-25T00:00:00Z", "abc1234")
    update_sessions(tmp_path, ["t|a|0"], {"t|a|0"}, stamp)
    ledger = json.loads((tmp_path / ".sessions.json").read_text())
    assert ledger["version"] == 1 and read_sessions(tmp_path) == {"t|a|0": stamp}
    write(tmp_path / ".sessions.json", {k: v for k, v in ledger.items() if k != "version"})
    assert read_sessions(tmp_path) == {"t|a|0": stamp}  # written before the version existed
    write(tmp_path / ".sessions.json", {**ledger, "version": 2})
    with pytest.raises(InputError, match=r"\.sessions\.json: written by a newer"):
        read_sessions(tmp_path)
    old, new = {"rates": {"t": {"m": 1.0}}, "time": "old"}, {"rates": {}, "time": "new", "version": 2}
    (tmp_path / "history.jsonl").write_text(json.dumps(old) + "\n" + json.dumps(new) + "\n")
    assert read_history(tmp_path / "history.jsonl") == [old]  # a newer line is skipped, like a torn one


def test_cache_entries_carry_it_and_a_newer_one_is_not_replayed(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path, "on")
    request = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    key = cache_key(request)
    response = {"content": "hello", "finish_reason": "stop"}
    cache.put(key, request, response)
    entry = json.loads(cache.path_for(key).read_text())
    assert entry["version"] == 1 and cache.get(key) == response
    del entry["version"]  # recorded before it existed: still replayed
    write(cache.path_for(key), entry)
    assert cache.get(key) == response
    write(cache.path_for(key), {**entry, "version": 2})
    with pytest.raises(CorruptEntry, match="written by a newer pytest-evalbench"):
        cache.get(key)
