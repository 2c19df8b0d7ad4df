"""The newer inputs from outside against the one strategy of hostile values (`tests/hostile_values.py`):
the labels API's body (`POST /api/labels` of `evalbench view`), the run store's columns (a tampered
SQLite file), the Batch API's output lines, and GitHub's answers to `evalbench comment`. Each takes a
hostile value as a bounded one of its own types, or refuses it with one line naming the source; nothing
reaches a terminal, a page or a Markdown comment raw, and no secret is printed. Never a traceback."""

from __future__ import annotations

import asyncio
import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers import write_benchmark
from hostile_values import JSON_TEXTS, LEAVES, NUMBERS, RAW_JSON, TEXTS, VALUES, WRONG_TYPES, Deep, json_text
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_store import TOKEN, _actions_env, make_run
from view_helpers import case, run_of, serve

from pytest_evalbench.__main__ import main
from pytest_evalbench.base.json_input import has_surrogate
from pytest_evalbench.base.numbers import MAX_INT
from pytest_evalbench.base.safe_text import SECRETS
from pytest_evalbench.llm.batch import Batches
from pytest_evalbench.llm.types import Completion, EngineSettings, EngineStats
from pytest_evalbench.store.db import MAX_STORED_NAME, StoreError, open_store, sqlite_url
from pytest_evalbench.store.labelling import MAX_NOTE, parse_label_request
from pytest_evalbench.store.query import MARKER, compare_runs
from pytest_evalbench.testing.fake_github import FakeGitHub

FEW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                       HealthCheck.too_slow])
SECRET = "sk-hostile-services-0123456789abcdef"
"""A key the process knows (as an endpoint's would be): no error may show it."""
SHALLOW = VALUES.filter(lambda v: not isinstance(v, Deep))


def inert(text: str) -> bool:
    """Nothing in `text` acts on a terminal or a CI log: no control or direction-changing character (but
    newlines and tabs), no line starting a workflow command, no lone surrogate, no secret."""
    controls = [c for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7f <= ord(c) < 0xa0
                or c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f"]
    commands = [line for line in text.splitlines() if line.lstrip().startswith("::")]
    return not controls and not commands and not has_surrogate(text) and SECRET not in text and TOKEN not in text


def spliced(template: dict[str, Any], field: str, value: Any) -> str:
    """`template` as JSON text with `value` at its `field`, written as a hostile writer would (NaN,
    huge integers, thousands deep: `json_text`)."""
    others = json.dumps({k: v for k, v in template.items() if k != field})
    return others[:-1] + (", " if len(others) > 2 else "") + json.dumps(field) + ": " + json_text(value) + "}"


# --------------------------------------------------------------------------- the labels API's body

LABEL = {"run": 1, "case": "benchmarks/demo/scenarios.json::s00001_m01[tgt-0]", "metric": "m01", "present": True,
         "note": "why"}


def assert_label_or_one_line(body: bytes) -> None:
    try:
        label = parse_label_request(body)
    except ValueError as exc:
        message = str(exc)
        assert message and "\n" not in message and len(message) < 1000, message[:2000]
        return
    assert (isinstance(label.run, int) and not isinstance(label.run, bool) and abs(label.run) <= MAX_INT) or (
        isinstance(label.run, str) and 1 <= len(label.run) <= 1000)
    assert 1 <= len(label.case) <= 1000 and 1 <= len(label.metric) <= 200 and len(label.note) <= MAX_NOTE
    assert isinstance(label.present, bool)
    assert not any(has_surrogate(text) for text in (str(label.run), label.case, label.metric, label.note))


@FEW
@given(st.sampled_from([*LABEL, "extra"]), VALUES)
def test_a_label_body_with_a_hostile_field_is_a_bounded_label_or_one_line(field: str, value: Any) -> None:
    assert_label_or_one_line(spliced(LABEL, field, value).encode("utf-8", "surrogatepass"))


@FEW
@given(JSON_TEXTS)
def test_a_hostile_label_body_is_a_bounded_label_or_one_line(text: str) -> None:
    assert_label_or_one_line(text.encode("utf-8", "surrogatepass"))


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_hostile_label_bodies_over_http_change_nothing_and_answer_inert_json(tmp_path: Path) -> None:
    """The served API: every hostile body is refused with one line, its control characters escaped (JSON
    the page shows as text, never as markup), and calibration.jsonl is never written."""
    write_benchmark(tmp_path)
    store = open_store(sqlite_url(tmp_path / "runs.sqlite"))
    store.record(run_of([case(i) for i in range(3)]))
    bodies = [text.encode("utf-8", "surrogatepass") for text in [
        "NaN", "1e999", "1" + "0" * 400, "{" * 50_000, '{"a": 1, "a": 2}', '"\\ud800"', "", "{", "\x00"]]
    bodies += [spliced(LABEL, field, value).encode("utf-8", "surrogatepass") for field, value in [
        ("case", "\x1b[2J<script>alert(1)</script>\u202e"), ("metric", "::error::x"), ("run", 10**400),
        ("run", "1" * 2000), ("note", "x" * (MAX_NOTE + 1)), ("present", math.nan), ("case", "\ud800"),
        ("run", Deep(5_000, 1, False)), ("note", {"a": 1, "b": [1] * 3})]]
    bodies += [b'{"run": 1, "run": 2, "case": "c", "metric": "m01", "present": true}', b"\xff\xfe", b"[" * 100_000]
    with serve(store, tmp_path) as served:
        for body in bodies:
            status, answer = served.post_label(body, token=served.token)
            assert status in (404, 413, 422), (status, body[:100])
            assert set(answer) == {"error"} and "\n" not in answer["error"] and inert(answer["error"]), answer
    store.close()
    assert list(tmp_path.rglob("calibration.jsonl")) == []


# --------------------------------------------------------------------------- the run store's columns

JSON_COLUMNS = [("runs", "targets"), ("runs", "identities"), ("cases", "transcript")]
SCALAR_COLUMNS = [("runs", c) for c in ("benchmark", "kind", "created", "commit", "branch", "plugin_version",
                                        "judge", "verdict", "exit_status", "reason", "cost", "scope", "case_count")] + [
    ("cases", c) for c in ("node_id", "target", "metric", "unit", "sample", "status", "passed", "present",
                           "probability", "agreement", "decided_by", "justification")]


def sqlite_value(value: Any) -> Any:
    """A hostile value as SQLite can hold it in any column (its columns take any type): an integer past
    64 bits as text, a list or mapping as JSON text, a text with a lone surrogate as a BLOB."""
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        return value if abs(value) <= MAX_INT else str(value)
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass") if has_surrogate(value) else value
    return json_text(value)


def sound_run(run: Any) -> None:
    """Every value of a run read back is of its type, finite and bounded."""
    for name in ("benchmark", "kind", "created", "plugin_version", "verdict", "reason", "scope"):
        assert isinstance(getattr(run, name), str)
    assert isinstance(run.targets, dict) and isinstance(run.identities, dict)
    assert math.isfinite(run.cost) and run.cost >= 0 and 0 <= run.exit_status <= 255
    for item in run.cases:
        assert item.passed in (True, False, None) and item.present in (True, False, None)
        assert isinstance(item.status, str) and len(item.status) <= MAX_STORED_NAME
        for share in (item.probability, item.agreement):
            assert share is None or (math.isfinite(share) and 0 <= share <= 1)
        assert item.transcript is None or isinstance(item.transcript, list)
        assert isinstance(item.sample, int) and 0 <= item.sample <= MAX_INT


@FEW
@given(st.one_of(st.tuples(st.sampled_from(JSON_COLUMNS), st.one_of(JSON_TEXTS, RAW_JSON)),
                 st.tuples(st.sampled_from(SCALAR_COLUMNS), st.one_of(NUMBERS, TEXTS, WRONG_TYPES))))
@example(tampered=(("cases", "passed"), "x" * 100_000))
@example(tampered=(("runs", "commit"), 10**400))
def test_a_hostile_store_column_is_read_as_its_type_or_one_line_naming_run_and_case(
        tmp_path_factory: pytest.TempPathFactory, tampered: tuple[tuple[str, str], Any]) -> None:
    (table, column), value = tampered
    path = tmp_path_factory.mktemp("store") / "runs.sqlite"
    url = sqlite_url(path)
    with open_store(url) as store:
        store.record(make_run([True, False], created="2026-12-07T06:00:00Z"))
        store.record(make_run([True, True], created="2026-12-07T07:00:00Z"))
    if isinstance(value, float) and math.isnan(value):
        value = "NaN"  # SQLite would store NULL
    stored = value if (table, column) in JSON_COLUMNS else sqlite_value(value)
    try:
        with sqlite3.connect(path) as conn:
            conn.execute(f"UPDATE {table} SET \"{column}\" = ? WHERE id = 2", (stored,))  # run 2 / run 1's second case
    except sqlite3.IntegrityError:  # NULL in a NOT NULL column: the database itself refuses it
        return
    with open_store(url) as store:
        try:
            runs = [store.run(1), store.run(2)]
        except StoreError as exc:
            message = str(exc)
            assert "\n" not in message and len(message) < 1500 and str(path) in message
            assert ("run 2" if table == "runs" else "run 1, case") in message and f"field '{column}'" in message
            return
    for run in runs:
        sound_run(run)
    comparison = compare_runs(runs[0], runs[1])  # type: ignore[arg-type]
    assert comparison.comparison is not None


# --------------------------------------------------------------------------- the Batch API's output lines

ANSWER = {"id": "chatcmpl-1", "object": "chat.completion", "model": "m",
          "choices": [{"index": 0, "message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}
LINE_PATHS = [("custom_id",), ("response",), ("response", "status_code"), ("response", "body"),
              ("response", "body", "choices"), ("response", "body", "choices", 0, "message", "content"),
              ("response", "body", "choices", 0, "message", "tool_calls"), ("response", "body", "usage"),
              ("response", "body", "usage", "prompt_tokens"), ("error",), ("error", "message"), ("error", "code")]


def output_line(key: str, path: tuple[Any, ...], value: Any) -> str:
    line: dict[str, Any] = {"id": "r", "custom_id": key, "response": {"status_code": 200, "body": ANSWER},
                            "error": None}
    line = json.loads(json.dumps(line))
    if path == ("error", "message") or path == ("error", "code"):
        line["error"] = {"code": "server_error", "message": "m"}
    node = line
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = "\x00PLACE\x00"
    text = json.dumps(line)
    return text.replace(json.dumps("\x00PLACE\x00"), json_text(value))


def read_output(tmp_path: Path, data: bytes) -> tuple[dict[str, Completion], dict[str, str], set[str]]:
    async def write(*_: Any) -> None:
        return None

    batches = Batches(EngineSettings(), EngineStats(), tmp_path, write)

    async def content(endpoint: Any, file_id: str) -> bytes:
        return data

    batches._api.content = content  # type: ignore[method-assign]
    answers: dict[str, Completion] = {}
    failed: dict[str, str] = {}
    retry: set[str] = set()

    async def run() -> None:
        try:
            await batches._read_output(None, "file-1", {"k1": None, "k2": None},  # type: ignore[arg-type, dict-item]
                                       answers, failed, retry)
        finally:
            await batches.aclose()

    asyncio.run(run())
    return answers, failed, retry


@FEW
@given(st.lists(st.one_of(JSON_TEXTS, st.builds(output_line, st.sampled_from(["k1", "k2"]), st.sampled_from(LINE_PATHS),
                                                SHALLOW),
                          st.builds(lambda key, text: output_line(key, ("error", "message"), text + " " + SECRET),
                                    st.sampled_from(["k1", "k2"]), TEXTS)),
                min_size=1, max_size=4))
@example([output_line("k1", ("response", "body", "usage", "prompt_tokens"), -5),
          output_line("k2", ("response", "body", "choices", 0, "message", "content"), "\ud800\x1b[2J")])
@example([output_line("k1", ("response", "body", "usage", "prompt_tokens"), True),
          output_line("k2", ("response", "body", "usage", "prompt_tokens"), 10**30)])
@example([output_line("k1", ("response", "status_code"), True), output_line("k2", ("error", "message"), SECRET * 20)])
@example([output_line("k1", ("response", "body", "choices", 0, "message", "tool_calls"), [1, "x", {"a": None}])])
def test_hostile_batch_output_lines_are_answers_of_their_types_or_one_error_each(
        tmp_path_factory: pytest.TempPathFactory, lines: list[str]) -> None:
    SECRETS.add(SECRET)
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    answers, failed, retry = read_output(tmp_path_factory.mktemp("batch"), data)
    assert set(answers) <= {"k1", "k2"} and set(failed) <= {"k1", "k2"} and retry <= set(failed)
    for completion in answers.values():
        assert completion.content is None or (isinstance(completion.content, str) and not has_surrogate(completion.content))
        for count in (completion.input_tokens, completion.output_tokens, completion.cached_tokens):
            assert isinstance(count, int) and not isinstance(count, bool) and 0 <= count <= MAX_INT
        assert completion.tool_calls is None or isinstance(completion.tool_calls, list)
    for problem in failed.values():
        assert isinstance(problem, str) and len(problem) < 1000 and SECRET not in problem


# --------------------------------------------------------------------------- GitHub's answers

GITHUB_ANSWERS = st.one_of(JSON_TEXTS, st.builds(lambda t: json.dumps({"message": t}), TEXTS),
                           st.builds(lambda v: json.dumps([{"id": v, "body": MARKER}]), st.one_of(LEAVES)),
                           st.builds(lambda v: json.dumps([{"id": 5, "body": v}]), st.one_of(LEAVES)))


@FEW
@given(st.sampled_from(["GET", "POST", "PATCH"]), st.sampled_from([200, 201, 301, 401, 404, 422, 500]), GITHUB_ANSWERS)
@example("GET", 200, json.dumps([{"id": True, "body": MARKER}]))
@example("GET", 200, json.dumps([{"id": -3, "body": MARKER}]))
@example("POST", 422, json.dumps({"message": "\x1b[2J::error::x\n::warning::y \u202e " + TOKEN}))
@example("GET", 301, json.dumps({"message": "moved"}))
def test_hostile_github_answers_are_one_line_naming_github_or_a_posted_comment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], method: str, status: int,
        answer: str) -> None:
    url = sqlite_url(tmp_path / "runs.sqlite")
    if not (tmp_path / "runs.sqlite").exists():
        with open_store(url) as store:
            store.record(make_run([True, False], branch="feature"))
    with FakeGitHub(token=TOKEN) as github:
        _actions_env(monkeypatch, tmp_path, github)
        if method == "PATCH":
            github.comments[("team/app", 7)] = [{"id": 5, "body": MARKER}]
        github.scripted[method] = (status, answer.encode("utf-8", "surrogatepass"))
        code = main(["comment", "demo", "--store", url])
    out, err = capsys.readouterr()
    assert code in (0, 2), (code, err)
    assert inert(out) and inert(err)
    if code == 2:
        assert out == "" and len(err.splitlines()) == 1 and "GitHub" in err and len(err) < 1000
    for _, path, _ in github.requests:
        assert "True" not in path and "False" not in path and path.startswith("/repos/team/app/issues/"), path


def test_hostile_store_columns_reach_the_view_as_escaped_text_or_one_line(tmp_path: Path) -> None:
    """The view over a store whose run and case columns hold hostile values: every page and the labels API
    answer 200 (or 201) with the value escaped, or 422 naming the run; never a 500 or raw markup. One
    server for every example: each tampers one column and puts it back."""
    write_benchmark(tmp_path)
    path = tmp_path / "runs.sqlite"
    store = open_store(sqlite_url(path))
    store.record(run_of([case(i) for i in range(3)]))
    store.record(run_of([case(i, passed=i != 1) for i in range(3)], created="2026-12-07T07:00:00Z"))
    seen: list[int] = []
    with serve(store, tmp_path) as served:

        @FEW
        @given(st.one_of(st.tuples(st.sampled_from(JSON_COLUMNS), st.one_of(JSON_TEXTS, RAW_JSON)),
                         st.tuples(st.sampled_from(SCALAR_COLUMNS), st.one_of(NUMBERS, TEXTS, WRONG_TYPES))))
        @example((("cases", "transcript"), '[{"role": "user", "content": "<script>alert(1)</script>\\u001b[2J"}]'))
        @example((("runs", "branch"), "<img src=x onerror=alert(1)>\x1b[31m\u202e"))
        def check(tampered: tuple[tuple[str, str], Any]) -> None:
            (table, column), value = tampered
            stored = value if (table, column) in JSON_COLUMNS else sqlite_value(value)
            if isinstance(stored, float) and math.isnan(stored):
                stored = "NaN"
            with sqlite3.connect(path) as conn:
                before = conn.execute(f'SELECT "{column}" FROM {table} WHERE id = 2').fetchone()[0]
                try:
                    conn.execute(f'UPDATE {table} SET "{column}" = ? WHERE id = 2', (stored,))
                except sqlite3.IntegrityError:
                    return
            try:
                for page in ("/", "/runs/1", "/runs/2", "/compare/1/2"):
                    status, html = served.get(page)
                    seen.append(status)
                    assert status in (200, 422), (page, status, html[:300])
                    assert "<script>alert" not in html and "<img src=x" not in html and "\x1b" not in html
                    assert "\u202e" not in html and "Traceback" not in html
                status, answer = served.post_label(dict(LABEL, case=case(1).node_id, note=""), token=served.token)
                assert status in (201, 404, 422), (status, answer)
            finally:
                with sqlite3.connect(path) as conn:
                    conn.execute(f'UPDATE {table} SET "{column}" = ? WHERE id = 2', (before,))

        check()
    store.close()
    assert 422 in seen and 200 in seen
