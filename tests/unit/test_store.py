"""The run store on a real SQLite file: its migrations, `evalbench runs`, `compare` and `comment`."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_evalbench.__main__ import main
from pytest_evalbench.store.db import HEAD, ItemData, RunData, StoreError, known_revisions, masked_url, open_store, sqlite_url
from pytest_evalbench.testing.fake_github import FakeGitHub

TOKEN = "ghs_secret-token-0123456789"


def make_run(passes: list[bool], *, benchmark: str = "demo", branch: str = "main", created: str = "2026-12-07T06:00:00Z",
             verdict: str = "passed", metric: str = "m01") -> RunData:
    return RunData(benchmark=benchmark, kind="scenarios", created=created, commit="abc1234", branch=branch,
                   base_branch=None, plugin_version="0.1.0", targets={"tgt": "sim-target"}, judge="sim-judge",
                   verdict=verdict, exit_status=0 if verdict == "passed" else 1, reason="all rules hold", cost=0.01,
                   scope="full",
                   cases=[ItemData(node_id=f"benchmarks/{benchmark}/scenarios.json::s{i}[tgt-s0]", target="tgt",
                                   metric=metric, unit=f"s{i}", sample=0, status="passed" if ok else "failed",
                                   passed=ok, present=ok, probability=0.9 if ok else 0.1, decided_by="judge",
                                   justification="because", transcript=[{"role": "user", "content": "hi"}])
                          for i, ok in enumerate(passes)])


@pytest.fixture
def url(tmp_path: Path) -> str:
    return sqlite_url(tmp_path / "runs.sqlite")


def test_the_tables_are_what_the_migrations_create(url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from pytest_evalbench.store.schema import metadata

    with open_store(url) as store, store.engine.connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    assert known_revisions()[-1] == HEAD


def test_a_newer_plugin_upgrades_an_older_store_keeping_its_runs(tmp_path: Path, url: str) -> None:
    with open_store(url, migrate_to=known_revisions()[0]) as old:
        run_id = old.record(make_run([True, False]))
    indexes = {row[0] for row in sqlite3.connect(tmp_path / "runs.sqlite").execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'ix_%'")}
    assert indexes == set()  # the first revision has none
    with open_store(url) as store:
        run = store.run(run_id)
        assert run is not None and [c.passed for c in run.cases] == [True, False]
    version = sqlite3.connect(tmp_path / "runs.sqlite").execute("SELECT version_num FROM alembic_version").fetchall()
    assert version == [(HEAD,)]


def test_an_older_plugin_refuses_a_newer_store_in_one_line(tmp_path: Path, url: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    open_store(url).close()
    with sqlite3.connect(tmp_path / "runs.sqlite") as db:
        db.execute("UPDATE alembic_version SET version_num = 'f00d9999'")
    with pytest.raises(StoreError, match="revision f00d9999, written by a newer pytest-evalbench"):
        open_store(url)
    assert main(["runs", "--store", url]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "upgrade pytest-evalbench" in err


def test_a_store_url_is_shown_without_its_credentials() -> None:
    shown = masked_url("postgresql+psycopg://team:pa55word@db.example/evals?password=other&sslmode=require")
    assert "pa55word" not in shown and "other" not in shown and "db.example/evals" in shown


def test_runs_prints_one_line_per_run_id_first_newest_first(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with open_store(url) as store:
        first = store.record(make_run([True], created="2026-12-07T06:00:00Z"))
        second = store.record(make_run([False], created="2026-12-07T07:00:00Z", verdict="failed"))
        store.record(make_run([True], benchmark="other"))
    assert main(["runs", "demo", "--store", url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out] == [str(second), str(first)]
    assert "failed (exit 1)" in out[0] and "demo" in out[0] and "main@abc1234" in out[0]
    assert main(["runs", "--store", url]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3


def test_reading_commands_make_no_store_where_none_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("EVALBENCH_STORE", raising=False)
    assert main(["runs", "--root", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "does not exist" in captured.err and len(captured.err.splitlines()) == 1
    assert not (tmp_path / ".evalbench").exists()


def test_compare_shows_both_rates_the_paired_change_and_the_flips(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with open_store(url) as store:
        old = store.record(make_run([True] * 30, created="2026-12-07T06:00:00Z"))
        new = store.record(make_run([True] * 10 + [False] * 20, created="2026-12-07T07:00:00Z"))
    assert main(["compare", "--store", url]) == 0  # the newest two, exit 0 without --fail-on-regression
    out = capsys.readouterr().out
    assert f"run {old} (" in out and f"run {new} (" in out
    row = next(line for line in out.splitlines() if line.startswith("tgt"))
    assert "1.00 (30/30)" in row and "0.33 (10/30)" in row and "-0.67" in row and "significant drop" in row
    assert "flipped cases: 20" in out and "passed -> failed  benchmarks/demo/scenarios.json::s10[tgt-s0]" in out
    assert main(["compare", str(old), str(new), "--store", url, "--fail-on-regression"]) == 6
    capsys.readouterr()
    assert main(["compare", str(old), str(old), "--store", url, "--fail-on-regression"]) == 0
    assert "flipped cases: 0" in capsys.readouterr().out
    assert main(["compare", "12345", "--store", url]) == 2
    assert "no run 12345" in capsys.readouterr().err
    with open_store(url) as store:
        other = store.record(make_run([True], benchmark="other"))
    assert main(["compare", str(old), str(other), "--store", url]) == 2
    assert "two runs of one benchmark" in capsys.readouterr().err


def _actions_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, github: FakeGitHub) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 7}}))
    for key, value in {"GITHUB_ACTIONS": "true", "GITHUB_API_URL": github.url, "GITHUB_REPOSITORY": "team/app",
                       "GITHUB_EVENT_PATH": str(event), "GITHUB_TOKEN": TOKEN, "GITHUB_HEAD_REF": "feature",
                       "GITHUB_BASE_REF": "main"}.items():
        monkeypatch.setenv(key, value)


def test_comment_posts_once_then_updates_the_same_comment(url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    with open_store(url) as store:
        store.record(make_run([True] * 4, branch="main", created="2026-12-07T06:00:00Z"))
        store.record(make_run([True, True, False, False], branch="feature", created="2026-12-07T07:00:00Z",
                              verdict="failed", metric="m01|<b>*x*</b>"))
    with FakeGitHub(token=TOKEN) as github:
        _actions_env(monkeypatch, tmp_path, github)
        assert main(["comment", "demo", "--store", url]) == 0
        first = capsys.readouterr()
        assert "posted on pull request #7" in first.out
        [comment] = github.comments[("team/app", 7)]
        body = comment["body"]
        assert "<!-- evalbench-comment -->" in body and "**failed**" in body and "feature" in body
        assert "<b>" not in body and "\\*x\\*" in body  # a run's words are escaped
        with open_store(url) as store:
            store.record(make_run([True] * 4, branch="feature", created="2026-12-07T08:00:00Z"))
        assert main(["comment", "demo", "--store", url]) == 0
        second = capsys.readouterr()
        assert "updated" in second.out
        assert len(github.comments[("team/app", 7)]) == 1 and "**passed**" in github.comments[("team/app", 7)][0]["body"]
        assert "Compared with run 1" in github.comments[("team/app", 7)][0]["body"]
        assert all(auth == f"Bearer {TOKEN}" for _, _, auth in github.requests)
    for text in (first.out, first.err, second.out, second.err):
        assert TOKEN not in text


def test_comment_with_a_wrong_token_is_one_line_without_the_token(url: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    with open_store(url) as store:
        store.record(make_run([True], branch="feature"))
    with FakeGitHub(token="another") as github:
        _actions_env(monkeypatch, tmp_path, github)
        assert main(["comment", "--store", url]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1
    assert "GitHub answered 401" in captured.err and TOKEN not in captured.err


@pytest.mark.parametrize("event", ["[" * 100_000 + "]" * 100_000,
                                   '{"pull_request": {"number": 7}, "pull_request": {"number": 8}}'])
def test_a_hostile_github_event_file_is_one_line_naming_it(url: str, tmp_path: Path, event: str,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The event file is read as every input file is (depth, duplicate keys): one line naming it, no
    comment posted."""
    with open_store(url) as store:
        store.record(make_run([True], branch="feature"))
    with FakeGitHub(token=TOKEN) as github:
        _actions_env(monkeypatch, tmp_path, github)
        (tmp_path / "event.json").write_text(event)
        assert main(["comment", "--store", url]) == 2
        assert github.requests == []
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1 and "event.json" in captured.err


WRITER = """
import sys
from pytest_evalbench.store.db import open_store, RunData, ItemData
url, tag = sys.argv[1], sys.argv[2]
with open_store(url) as store:
    for n in range(3):
        store.record(RunData(benchmark="demo", kind="scenarios", created=f"2026-12-07T06:00:0{n}Z", commit=tag,
                             branch="main", base_branch=None, plugin_version="0", targets={}, judge=None,
                             verdict="passed", exit_status=0, reason="", cost=0.0, scope="full",
                             cases=[ItemData(node_id=f"{tag}-{n}-{i}", target="t", metric="m", unit=str(i), sample=0,
                                             status="passed", passed=True) for i in range(100)]))
"""


def concurrent_writers(url: str) -> None:
    """Two processes writing three runs each into one store, started together on a new store: nothing lost."""
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, url, tag], stderr=subprocess.PIPE, text=True)
             for tag in ("a", "b")]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    with open_store(url) as store:
        runs = store.runs("demo")
        assert len(runs) == 6 and sorted(r.commit or "" for r in runs) == ["a"] * 3 + ["b"] * 3
        assert all(r.case_count == 100 for r in runs)
        assert sum(len(store.run(r.id or 0).cases) for r in runs) == 600  # type: ignore[union-attr]


def test_two_processes_writing_one_sqlite_store_lose_nothing(url: str) -> None:
    concurrent_writers(url)


OPENER = "import sys; from pytest_evalbench.store.db import open_store; open_store(sys.argv[1]).close()"


@pytest.mark.slow
def test_processes_opening_one_new_store_at_once_all_open_it(tmp_path: Path) -> None:
    """Ten rounds of four processes creating the same new store at the same moment: each opens it (the
    migrations run one after the other), none fails on the tables another made."""
    for round_ in range(10):
        url = sqlite_url(tmp_path / f"runs{round_}.sqlite")
        procs = [subprocess.Popen([sys.executable, "-c", OPENER, url], stderr=subprocess.PIPE, text=True)
                 for _ in range(4)]
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A new database on the PostgreSQL server of EVALBENCH_TEST_POSTGRES (.ci/run starts one), dropped after."""
    server = os.environ.get("EVALBENCH_TEST_POSTGRES")
    if not server:
        pytest.skip("EVALBENCH_TEST_POSTGRES is not set: no PostgreSQL server to test the store on "
                    "(.ci/run starts one)")
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"evalbench_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()


def test_a_postgresql_store_keeps_runs_and_refuses_a_newer_revision(postgres_url: str) -> None:
    with open_store(postgres_url) as store:
        run_id = store.record(make_run([True, False, True]))
        run = store.run(run_id)
        assert run is not None and [c.passed for c in run.cases] == [True, False, True]
        assert run.cases[0].transcript == [{"role": "user", "content": "hi"}]
        from sqlalchemy import text

        with store.engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = 'f00d9999'"))
    with pytest.raises(StoreError, match="newer pytest-evalbench"):
        open_store(postgres_url)


def test_two_processes_writing_one_postgresql_store_lose_nothing(postgres_url: str) -> None:
    concurrent_writers(postgres_url)


def test_compare_prints_hostile_words_from_runs_inert(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    hostile = make_run([False])
    hostile.cases[0].node_id = "benchmarks/demo/x.json::\x1b[2J\n::error::pwned[t]"
    with open_store(url) as store:
        old = make_run([True])
        old.cases[0].node_id = hostile.cases[0].node_id
        store.record(old)
        store.record(hostile)
    assert main(["compare", "1", "2", "--store", url]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and not any(line.lstrip().startswith("::") for line in out.splitlines())


def test_the_store_setting_is_read_in_one_place_without_a_database_module() -> None:
    """The option, else EVALBENCH_STORE; `none` in any case and spacing is off; nothing given is the default."""
    from pytest_evalbench.store import store_setting

    assert store_setting(None, {}) == ""
    assert store_setting(None, {"EVALBENCH_STORE": " None "}) is None
    assert store_setting("NONE", {"EVALBENCH_STORE": "sqlite:///x.sqlite"}) is None
    assert store_setting("sqlite:///a.sqlite", {"EVALBENCH_STORE": "none"}) == "sqlite:///a.sqlite"
    assert store_setting(None, {"EVALBENCH_STORE": "sqlite:///b.sqlite"}) == "sqlite:///b.sqlite"
