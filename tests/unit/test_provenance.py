"""Which session measured each row (.sessions.json), rates marked measured or carried over, and
the commands a session prints."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from helpers import scenario_rates, score_row

from pytest_evalbench.formats.provenance import (
    EARLIER,
    SESSIONS_FILE,
    SessionStamp,
    carried_label,
    read_sessions,
    unit_key,
    update_sessions,
)
from pytest_evalbench.kinds.protocol import KindResults
from pytest_evalbench.kinds.run import RunSettings
from pytest_evalbench.render.terminal import relative_node_id, run_options, session_commands

OLD = SessionStamp("2026-11-24T10:00:00Z", "abc1234")
NEW = SessionStamp("2026-11-25T10:00:00Z", None)


def test_ledger_records_this_sessions_rows_and_forgets_rows_no_longer_on_disk(tmp_path: Path) -> None:
    update_sessions(tmp_path, ["t|a|0", "t|b|0"], {"t|a|0", "t|b|0"}, OLD)
    update_sessions(tmp_path, ["t|b|0", "t|gone|0"], {"t|a|0", "t|b|0", "t|c|0"}, NEW)
    assert read_sessions(tmp_path) == {"t|a|0": OLD, "t|b|0": NEW}
    data = json.loads((tmp_path / SESSIONS_FILE).read_text())
    assert len(data["sessions"]) == 2 and set(data["rows"].values()) == {0, 1}  # each session stored once
    update_sessions(tmp_path, [], {"t|b|0"}, None)
    assert read_sessions(tmp_path) == {"t|b|0": NEW}


def test_missing_or_malformed_ledger_reads_as_an_earlier_session(tmp_path: Path) -> None:
    assert read_sessions(tmp_path) == {}
    update_sessions(tmp_path, [], set(), NEW)
    assert not (tmp_path / SESSIONS_FILE).exists()  # nothing to record: no file
    (tmp_path / SESSIONS_FILE).write_text('{"sessions": [{"time": 5}, {"time": "T"}], "rows": '
                                            '{"a": 0, "b": 1, "c": 7, "d": true, "e": "x"}}')
    assert read_sessions(tmp_path) == {"b": SessionStamp("T", None)}
    (tmp_path / SESSIONS_FILE).write_text("[not json")
    assert read_sessions(tmp_path) == {}
    assert carried_label(["a"], {}) == EARLIER
    assert carried_label(["a"], {"a": OLD}) == "2026-11-24T10:00:00Z abc1234"
    assert carried_label(["a", "b"], {"a": OLD, "b": NEW}) == "2 earlier sessions, latest 2026-11-25T10:00:00Z no commit"


def test_rates_are_measured_or_carried_over_with_their_session() -> None:
    rows = [score_row({"id": "m01_s001", "target_model": "t1", "passed": True}),
            score_row({"id": "m01_s002", "target_model": "t1", "passed": False}),
            score_row({"id": "m02_s001", "target_model": "t1", "passed": False}),
            score_row({"id": "m01_s001", "target_model": "t2", "passed": True})]
    written = KindResults([], scores=rows, measured={unit_key("t1", "m01_s001")},
                          sessions={unit_key("t1", "m02_s001"): OLD})
    rates = {(r.target, r.metric): r for r in scenario_rates(written, None)}
    assert (rates["t1", "m01"].k, rates["t1", "m01"].n, rates["t1", "m01"].measured) == (1, 1, True)
    assert rates["t1", "m01"].provenance_label() == ""
    assert rates["t1", "m02"].provenance_label() == "carried over from 2026-11-24T10:00:00Z abc1234"
    assert rates["t2", "m01"].provenance_label() == f"carried over from {EARLIER}"  # no ledger entry: old files
    everything = scenario_rates(KindResults([], scores=rows), None)
    assert all(r.measured for r in everything) and len(everything) == 4  # t2 has one positive metric: no (positive) row


def test_printed_commands_carry_the_run_options_and_no_credentials(tmp_path: Path) -> None:
    settings = RunSettings(benchmark="demo", targets=["x=gpt 4o"], user_model="u", judge_model="j",
                           base_url="https://user:s3cret@llm.example.com:8443/v1?key=s3cret", provider="openai",
                           cache_mode="replay", cache_dir=tmp_path / "c", shard=(2, 4))
    options = run_options(settings)
    assert options == ["--benchmark=demo", "--evalbench-target=x=gpt 4o", "--evalbench-user-model=u",
                       "--evalbench-judge-model=j", "--evalbench-base-url=https://llm.example.com:8443/v1",
                       "--evalbench-provider=openai", "--evalbench-cache=replay",
                       f"--evalbench-cache-dir={tmp_path / 'c'}", "--evalbench-shard=2/4"]
    commands = session_commands(settings, flips=["benchmarks/demo/scenarios.json::a[x-s0]"], failed=True,
                                errors=["cache miss"], root=tmp_path, cwd=tmp_path / "benchmarks")
    assert "s3cret" not in "".join(commands.values())
    assert shlex.split(commands["flipped"])[-1] == "demo/scenarios.json::a[x-s0]"
    assert shlex.split(commands["failed"])[-1] == "--lf"
    assert "--evalbench-cache=replay" not in commands["record"] and commands["record"].endswith("--lf")
    assert session_commands(RunSettings(benchmark="demo"), flips=[], failed=False, errors=["endpoint error"],
                            root=tmp_path, cwd=tmp_path) == {}
    assert relative_node_id("a/b.json::c", tmp_path, tmp_path) == "a/b.json::c"
