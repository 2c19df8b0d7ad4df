"""A run store is outside input: a real SQLite file tampered with by raw SQL (as a shared database or a
hand-edited file may be) is read through the boundary by `evalbench runs`, `compare`, `comment`, the
view's pages and its labels API. Each bad value is one line naming the store, the run and the case,
never a traceback and never a value silently read as another."""

from __future__ import annotations

import sqlite3
from html import unescape
from pathlib import Path

import pytest
from helpers import write_benchmark
from test_store import TOKEN, _actions_env, make_run
from view_helpers import case, run_of, serve

from pytest_evalbench.__main__ import main
from pytest_evalbench.store.db import open_store, sqlite_url
from pytest_evalbench.testing.fake_github import FakeGitHub

DEEP = "[" * 100 + "]" * 100

RUN_TAMPERS = [  # (column, SQL value, what the error says)
    ("identities", "'{\"tgt\": {\"judge\": \"a\", \"judge\": \"b\"}}'", "duplicate key 'judge'"),
    ("identities", "'{\"tgt\": NaN}'", "NaN"),
    ("targets", f"'{{\"tgt\": {DEEP}}}'", "nested deeper than 64 levels"),
    ("targets", "'[1, 2]'", "list where a JSON dict belongs"),
    ("targets", "'{\"tgt\": 123456789012345678901234567890}'", "out of range"),
    ("cost", "9e999", "inf"),
    ("cost", "'cheap'", "str where a number belongs"),
    ("exit_status", "'zero'", "str where a whole number belongs"),
    ("benchmark", "'demo' || printf('%.200000c', 'x')", "more than 10,000"),
    ("reason", "printf('%.2000000c', 'x')", "more than 1,048,576"),
]
CASE_TAMPERS = [
    ("transcript", "'[{\"role\": \"user\", \"role\": \"assistant\", \"content\": \"hi\"}]'", "duplicate key 'role'"),
    ("transcript", f"'{DEEP}'", "nested deeper than 64 levels"),
    ("transcript", "'{\"role\": \"user\"}'", "dict where a JSON list belongs"),
    ("transcript", "'[1e999]'", "too large"),
    ("passed", "7", "7 where true, false or null belongs"),
    ("passed", "'yes'", "'yes' where true, false or null belongs"),
    ("probability", "9e999", "inf"),
    ("probability", "1.5", "1.5 is not within"),
    ("probability", "'high'", "str where a number belongs"),
    ("sample", "-1", "-1 is not within"),
    ("status", "X'ff00'", "bytes where text belongs"),
    ("justification", "printf('%.2000000c', 'x')", "more than 1,048,576"),
]


def two_runs(path: Path) -> str:
    """Two runs of one benchmark (run 1 on main, run 2 on feature) in a real SQLite file; its URL."""
    url = sqlite_url(path)
    with open_store(url) as store:
        store.record(make_run([True, True, False], branch="main", created="2026-12-07T06:00:00Z"))
        store.record(make_run([True, False, False], branch="feature", created="2026-12-07T07:00:00Z"))
    return url


def tamper(path: Path, sql: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(sql)


def one_line(err: str, *names: str) -> str:
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err[:2000]
    assert "\x1b" not in err
    line = err.strip()
    assert len(line) < 1500
    for name in names:
        assert name in line, line
    return line


@pytest.mark.parametrize(("column", "value", "problem"), RUN_TAMPERS)
def test_a_tampered_run_is_one_line_naming_store_run_and_field(tmp_path: Path, column: str, value: str, problem: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "runs.sqlite"
    url = two_runs(path)
    tamper(path, f"UPDATE runs SET {column} = {value} WHERE id = 2")
    for command in (["runs"], ["compare"], ["compare", "1", "2"]):
        assert main([*command, "--store", url]) == 2, command
        captured = capsys.readouterr()
        assert captured.out == ""
        one_line(captured.err, str(path), "run 2", f"field '{column}'", problem)


@pytest.mark.parametrize(("column", "value", "problem"), CASE_TAMPERS)
def test_a_tampered_case_is_one_line_naming_store_run_and_case(tmp_path: Path, column: str, value: str, problem: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "runs.sqlite"
    url = two_runs(path)
    tamper(path, f"UPDATE cases SET {column} = {value} WHERE id = 5")  # run 2's second case
    assert main(["compare", "1", "2", "--store", url]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    one_line(captured.err, str(path), "run 2", "scenarios.json::s1[tgt-s0]", "(row 5)", f"field '{column}'", problem)
    assert main(["runs", "--store", url]) == 0  # the listing reads no case
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_a_stored_value_past_the_json_bound_is_refused_before_it_is_parsed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_evalbench.store import db

    path = tmp_path / "runs.sqlite"
    url = two_runs(path)
    monkeypatch.setattr(db, "MAX_STORED_JSON", 1000)
    tamper(path, "UPDATE cases SET transcript = '[\"' || printf('%.5000c', 'x') || '\"]' WHERE id = 4")
    assert main(["compare", "1", "2", "--store", url]) == 2
    one_line(capsys.readouterr().err, "run 2", "field 'transcript'", "5,004 characters of JSON, more than the 1,000")


def test_comment_on_a_tampered_store_posts_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "runs.sqlite"
    url = two_runs(path)
    tamper(path, "UPDATE cases SET passed = 7 WHERE id = 3")  # the base branch's run, case 3
    with FakeGitHub(token=TOKEN) as github:
        _actions_env(monkeypatch, tmp_path, github)
        assert main(["comment", "demo", "--store", url]) == 2
        assert github.comments == {}
    captured = capsys.readouterr()
    assert captured.out == "" and TOKEN not in captured.err
    one_line(captured.err, "run 1", "(row 3)", "field 'passed'")


@pytest.mark.parametrize(("table", "column", "value", "problem"), [
    ("runs", "identities", "'{\"a\": 1, \"a\": 2}'", "duplicate key 'a'"),
    ("cases", "transcript", "'[{\"role\": \"user\", \"role\": \"assistant\"}]'", "duplicate key 'role'"),
    ("cases", "passed", "7", "where true, false or null belongs"),
    ("cases", "probability", "9e999", "is not within"),
])
def test_the_view_shows_a_tampered_row_as_one_line_naming_it(tmp_path: Path, table: str, column: str, value: str,
                                                             problem: str, capfd: pytest.CaptureFixture[str]) -> None:
    """Every page that reads the row, and the labels API, answer with one line naming the run (and case);
    the terminal running the view says the same, never a traceback."""
    write_benchmark(tmp_path)
    path = tmp_path / "runs.sqlite"
    store = open_store(sqlite_url(path))
    store.record(run_of([case(i) for i in range(3)]))
    store.record(run_of([case(i, passed=i != 1) for i in range(3)], created="2026-12-07T07:00:00Z"))
    tamper(path, f"UPDATE {table} SET {column} = {value} WHERE id = 2")
    with serve(store, tmp_path) as served:
        pages = {p: served.get(p) for p in ("/", "/runs/1", "/compare/1/2")}
        api, body = served.post_label({"run": 1, "case": case(1).node_id, "metric": "m01", "present": True},
                                      token=served.token)
    store.close()
    where = "run 2" if table == "runs" else "run 1"
    for page, (status, html) in pages.items():
        if (table == "runs" and page == "/runs/1") or (column == "transcript" and page == "/"):
            assert status == 200  # a page that does not read the row
            continue
        assert status == 422, page
        assert where in html and f"field '{column}'" in unescape(html) and "Traceback" not in html, page
    if table == "cases":
        assert list(tmp_path.rglob("calibration.jsonl")) == []
        assert api == 422 and "run 1" in body["error"] and f"field '{column}'" in body["error"]
    err = capfd.readouterr().err
    assert "Traceback" not in err and f"field '{column}'" in err and problem in err


def test_a_hostile_node_id_in_the_error_is_printed_inert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "runs.sqlite"
    url = two_runs(path)
    tamper(path, "UPDATE cases SET passed = 7, node_id = char(27) || '[2J' || char(10) || '::error::pwned' || "
                 "char(8238) || '<b>x</b>' WHERE id = 5")
    assert main(["compare", "1", "2", "--store", url]) == 2
    err = capsys.readouterr().err
    line = one_line(err, "run 2", "(row 5)", "field 'passed'")
    assert "\u202e" not in line and not line.lstrip().startswith("::") and "::error::pwned" in line
