"""`evalbench view` over real HTTP (uvicorn on 127.0.0.1, a real SQLite store): its pages escape what runs
recorded, filter and page a run's cases, put flipped cases first; `POST /api/labels` writes only with the
pages' token, a JSON body of the documented shape, and writes a line `--evalbench-calibrate` reads."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import write_benchmark
from view_helpers import HOSTILE, Served, case, new_store, request, run_of, serve

from pytest_evalbench.__main__ import main
from pytest_evalbench.formats.spec import load_spec
from pytest_evalbench.kinds.labels import load_labels
from pytest_evalbench.store.query import PAGE_SIZE

TOKEN = re.compile(r'<meta name="evalbench-token" content="([^"]+)">')


@pytest.fixture
def served(tmp_path: Path):
    write_benchmark(tmp_path)
    store = new_store(tmp_path / "runs.sqlite")
    store.record(run_of([case(i, passed=i % 3 != 0, probability=round(i / 120, 4), text=HOSTILE) for i in range(120)]))
    store.record(run_of([case(i, passed=i % 4 != 0, probability=0.9, text=HOSTILE) for i in range(120)],
                        created="2026-12-07T07:00:00Z", branch="feature"))
    with serve(store, tmp_path) as server:
        yield server
    store.close()


def test_pages_escape_hostile_text(served: Served) -> None:
    for path in ("/", "/runs/1", "/runs/1?q=trip&order=node", "/compare/1/2", "/runs/1?status=<script>"):
        status, html = served.get(path)
        assert status == 200, path
        assert "<script>alert" not in html and "<img src=x" not in html and "</details><script>" not in html
        assert "\x1b" not in html and "\u202e" not in html
        assert TOKEN.search(html).group(1) == served.token
    _, html = served.get("/runs/1")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "\\x1b[31mred" in html and "\\u202eevil" in html


def test_every_recorded_field_is_hostile_text(tmp_path: Path) -> None:
    """A store is outside data: names, branch, commit, reason, tool calls and a transcript that is not a
    list of messages all reach the page as text, and a label of such a run is refused, not written."""
    store = new_store(tmp_path / "runs.sqlite")
    odd = case(1, text=HOSTILE)
    odd.node_id, odd.target, odd.metric, odd.unit = HOSTILE, HOSTILE, HOSTILE, HOSTILE
    odd.transcript = [1, "<b>x</b>", None, {"role": HOSTILE, "content": 5, "tool_calls": [{"name": HOSTILE,
                                                                                           "arguments": {HOSTILE: HOSTILE}}, 7]}]
    run = run_of([odd, case(2)], benchmark="../" + HOSTILE, branch=HOSTILE)
    run.commit, run.reason, run.judge, run.verdict = HOSTILE, HOSTILE, HOSTILE, HOSTILE
    store.record(run)
    store.record(run_of([case(1)], benchmark="../" + HOSTILE))
    with serve(store, tmp_path) as served:
        for path in ("/", "/runs/1", "/compare/1/2", "/compare/2/1", "/runs/1?q=" + "%3Cscript%3E"):
            status, html = served.get(path)
            assert status == 200 and "<script>alert" not in html and "<img src=x" not in html and "<b>x</b>" not in html
        status, body = served.post_label(label(case=case(2).node_id), token=served.token)
    store.close()
    assert status == 422 and "not in" in body["error"]
    assert list(tmp_path.rglob("calibration.jsonl")) == []


def test_a_dataset_run_shows_its_case_rows_and_offers_no_label(tmp_path: Path) -> None:
    """A dataset case's recorded row (no messages) is shown as its fields; its calibration labels are 1-5
    scores a person writes, so the page has no label buttons and the API refuses one."""
    write_benchmark(tmp_path)
    store = new_store(tmp_path / "runs.sqlite")
    row = case(1)
    row.metric, row.transcript = "case", [{"case_id": "c1", "input": HOSTILE, "response": "fine"}]
    run = run_of([row])
    run.kind = "dataset"
    store.record(run)
    with serve(store, tmp_path) as served:
        _, html = served.get("/runs/1")
        status, _ = served.post_label(label(metric="case"), token=served.token)
    store.close()
    assert '<pre class="row">' in html and "&#34;case_id&#34;: &#34;c1&#34;" in html and "<script>alert" not in html
    assert 'class="label"' not in html and status == 422


def test_a_store_failing_mid_request_is_one_line_not_a_traceback(tmp_path: Path,
                                                                capfd: pytest.CaptureFixture[str]) -> None:
    from sqlalchemy import text

    write_benchmark(tmp_path)
    store = new_store(tmp_path / "runs.sqlite")
    store.record(run_of([case(1, text=HOSTILE)]))
    with serve(store, tmp_path) as served:
        with store.engine.begin() as conn:
            conn.execute(text("DROP TABLE cases"))
        status, html = served.get("/runs/1")
        api, body = served.post_label(label(), token=served.token)
    store.close()
    assert status == 503 and "the run store could not be read (OperationalError)" in html
    assert api == 503 and "could not be read" in body["error"]
    err = capfd.readouterr().err
    assert "evalbench view: the run store could not be read: no such table: cases" in err
    assert "Traceback" not in err and "alert(1)" not in err


def test_token_is_new_per_server_and_pages_forbid_framing_and_inline_script(tmp_path: Path, served: Served) -> None:
    store = new_store(tmp_path / "other.sqlite")
    with serve(store, tmp_path) as other:
        assert other.token != served.token and len(other.token) >= 32
    store.close()
    req = __import__("urllib.request").request.urlopen(served.url + "/runs/1", timeout=30)
    policy = req.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy and req.headers["Cache-Control"] == "no-store"


def test_run_page_filters_and_pages(served: Served) -> None:
    _, html = served.get("/runs/1?order=node")
    assert html.count('class="case"') == PAGE_SIZE and "120 cases · page 1 of 3" in html
    _, html = served.get("/runs/1?order=node&page=3")
    assert html.count('class="case"') == 120 - 2 * PAGE_SIZE and "s00119_m01" in html
    _, html = served.get("/runs/1?status=failed")
    assert "40 cases" in html and 'data-status="passed"' not in html
    _, html = served.get("/runs/1?q=traveller%2042%3F")
    assert "1 cases" in html and "s00042_m01" in html
    _, html = served.get("/runs/1?page=999999999999999&order=bogus")
    assert "page 3 of 3" in html
    assert served.get("/runs/77")[0] == 404 and served.get("/compare/1/77")[0] == 404


def test_cases_most_worth_labelling_come_first(served: Served) -> None:
    """Without calibration.json the threshold is 0.5: the cases whose P(present) is nearest it lead."""
    _, html = served.get("/runs/1")
    first = re.findall(r"s(\d{5})_m01\[tgt-0\]</code>", html)[:3]
    assert [int(n) for n in first] == [60, 59, 61]
    assert "near the threshold 0.50" in html
    bench = Path(served.store.engine.url.database).parent / "benchmarks" / "demo"
    (bench / "calibration.json").write_text(json.dumps([{"metric_id": "m01", "judge": "sim-judge", "n": 4,
                                                         "unscored": 0, "agreement": 1, "kappa": 1, "kappa_ci": None,
                                                         "weighting": "none", "confusion": {}, "threshold": 0.2}]))
    _, html = served.get("/runs/1")
    assert [int(n) for n in re.findall(r"s(\d{5})_m01\[tgt-0\]</code>", html)[:1]] == [24]


def test_a_case_the_judges_split_on_comes_before_a_settled_one(tmp_path: Path) -> None:
    """A panel that split (agreement below 1) is a reason to label the case, as a P(present) near the
    threshold is: it leads the cases the judges agreed on, with its reason shown."""
    write_benchmark(tmp_path)
    store = new_store(tmp_path / "runs.sqlite")
    cases = [case(i, probability=0.95) for i in range(4)]
    cases[2].agreement = 2 / 3
    store.record(run_of(cases))
    with serve(store, tmp_path) as server:
        _, html = server.get("/runs/1")
    store.close()
    assert [int(n) for n in re.findall(r"s(\d{5})_m01\[tgt-0\]</code>", html)][:1] == [2]
    assert "judges split (67% agree)" in html


@pytest.mark.parametrize("text", ["{", '[{"metric_id": "m01", "threshold": 1e400}]', '[{"metric_id": "m01", "threshold": 7}]',
                                  '[{"metric_id": "m01", "threshold": NaN}]', "[]"])
def test_a_bad_calibration_json_leaves_the_order_at_its_default(served: Served, text: str) -> None:
    bench = Path(served.store.engine.url.database).parent / "benchmarks" / "demo"
    (bench / "calibration.json").write_text(text)
    status, html = served.get("/runs/1")
    assert status == 200 and "near the threshold 0.50" in html


def test_flaky_cases_and_close_calls_lead_and_checks_never_do(tmp_path: Path) -> None:
    """A case whose samples disagree is flaky: it leads, with a close call; a check's verdict is no judge's
    to correct, however near its number."""
    write_benchmark(tmp_path)
    store = new_store(tmp_path / "runs.sqlite")
    cases = [case(i, passed=True, probability=0.95) for i in range(10)]
    cases[3] = case(3, passed=True, probability=0.5)
    cases[3].decided_by = "check"
    cases[7] = case(7, passed=False, probability=0.55)
    second = case(7, passed=True, probability=0.95)
    second.sample, second.node_id = 1, second.node_id.replace("-0]", "-1]")
    store.record(run_of([*cases, second, case(8, passed=True, probability=0.6)]))
    with serve(store, tmp_path) as served:
        _, html = served.get("/runs/1")
    store.close()
    order = re.findall(r"s(\d{5})_m01\[tgt-(\d)\]</code>", html)
    # two reasons (flaky and near 0.5), then one each, the nearer first
    assert order[:3] == [("00007", "0"), ("00008", "0"), ("00007", "1")]
    assert html.count('<span class="flag">flaky</span>') == 2 and html.count('class="flag"') == 4
    assert order[-1] == ("00003", "0")


def test_runs_page_lists_runs_newest_first_with_each_metrics_rate_over_runs(served: Served) -> None:
    _, html = served.get("/")
    assert html.index('data-testid="run-2"') < html.index('data-testid="run-1"') and 'href="/compare/1/2"' in html
    row = html.split('data-testid="trend-demo-tgt-m01"', 1)[1].split("</tr>", 1)[0]
    assert re.findall(r"(\d+)%</td>", row) == ["67", "75"]  # 80 and 90 of 120 passed


def test_compare_shows_flipped_cases_first(served: Served) -> None:
    _, html = served.get("/compare/1/2")
    flags = re.findall(r'data-flipped="(yes|no)"', html)
    flipped = sum(1 for i in range(120) if (i % 3 != 0) != (i % 4 != 0))
    assert f"{flipped} flipped of 120 paired cases" in html
    assert flags[:flipped] == ["yes"] * min(flipped, PAGE_SIZE) or flags == ["yes"] * PAGE_SIZE
    assert 'data-testid="rate-tgt-m01"' in html


def label(run: int = 1, i: int = 1, **change: object) -> dict[str, object]:
    return {"run": run, "case": case(i).node_id, "metric": "m01", "present": False, "note": "asks nothing", **change}


def test_label_appends_a_line_calibration_reads(served: Served) -> None:
    bench = Path(served.store.engine.url.database).parent / "benchmarks" / "demo"
    (bench / "calibration.jsonl").write_text('{"metric_id": "m01", "transcript": [{"role": "assistant", '
                                             '"content": "Where?"}], "present": true}')  # no final newline
    status, body = served.post_label(label(), token=served.token)
    assert status == 201 and body["line"] == 2 and body["file"] == "benchmarks/demo/calibration.jsonl"
    assert served.post_label(label(i=2, present=True, note=""), token=served.token)[0] == 201
    spec = load_spec(bench)
    cases = load_labels(bench / "calibration.jsonl", spec, "metrics")
    assert [c.line for c in cases] == [1, 2, 3]
    second = cases[1].label
    assert second.present is False and second.note == "asks nothing"
    assert [m.model_dump(exclude_none=True) for m in second.transcript] == case(1, text=HOSTILE).transcript
    assert cases[2].label.present is True and cases[2].label.note is None


def test_labels_posted_at_once_are_whole_lines(served: Served) -> None:
    from concurrent.futures import ThreadPoolExecutor

    bench = Path(served.store.engine.url.database).parent / "benchmarks" / "demo"
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda i: served.post_label(label(i=i, note=f"label {i}"), token=served.token)[0],
                                range(1, 25)))
    assert answers == [201] * 24
    cases = load_labels(bench / "calibration.jsonl", load_spec(bench), "metrics")
    assert sorted(c.label.note for c in cases) == sorted(f"label {i}" for i in range(1, 25))


@pytest.mark.parametrize(("change", "token", "content_type", "status"), [
    ({}, None, "application/json", 403),
    ({}, "not-the-token", "application/json", 403),
    ({}, "", "application/json", 403),
    ({}, "TOKEN", "application/x-www-form-urlencoded", 415),
    ({}, "TOKEN", "text/plain", 415),
    ({}, "TOKEN", "multipart/form-data; boundary=x", 415),
    ({"present": "yes"}, "TOKEN", "application/json", 422),
    ({"present": 1}, "TOKEN", "application/json", 422),
    ({"extra": 1}, "TOKEN", "application/json", 422),
    ({"note": "x" * 5000}, "TOKEN", "application/json", 422),
    ({"metric": "m09"}, "TOKEN", "application/json", 404),
    ({"case": "benchmarks/demo/scenarios.json::nope"}, "TOKEN", "application/json", 404),
    ({"run": 99}, "TOKEN", "application/json", 404),
    ({"run": "../1"}, "TOKEN", "application/json", 404),
])
def test_a_refused_label_changes_nothing(served: Served, change: dict[str, object], token: str | None,
                                         content_type: str, status: int) -> None:
    bench = Path(served.store.engine.url.database).parent / "benchmarks" / "demo"
    got, body = served.post_label(label(**change), token=served.token if token == "TOKEN" else token,
                                  content_type=content_type)
    assert got == status and body["error"]
    assert not (bench / "calibration.jsonl").exists()


@pytest.mark.parametrize("raw", [b"[1, 2]", b"not json", b'{"run": 1, "run": 2}', b"\xff\xfe", b"x" * 70_000,
                                 b'{"a":' * 100 + b"1" + b"}" * 100])
def test_a_body_not_of_the_shape_is_refused(served: Served, raw: bytes) -> None:
    got, _ = served.post_label(raw, token=served.token)
    assert got in (413, 422)
    assert not (Path(served.store.engine.url.database).parent / "benchmarks" / "demo" / "calibration.jsonl").exists()


def test_another_origin_or_host_cannot_write(served: Served) -> None:
    assert served.post_label(label(), token=served.token, headers={"Origin": "http://evil.example"})[0] == 403
    status, _ = request(served.url + "/", headers={"Host": "evil.example"})
    assert status == 400
    assert served.post_label(label(), token=served.token, headers={"Host": "evil.example"})[0] == 400


def test_view_command_serves_until_interrupted(tmp_path: Path) -> None:
    write_benchmark(tmp_path)
    (tmp_path / ".evalbench").mkdir()
    store = new_store(tmp_path / ".evalbench" / "runs.sqlite")
    store.record(run_of([case(1)]))
    store.close()
    env = {**os.environ, "EVALBENCH_STORE": ""}
    proc = subprocess.Popen([sys.executable, "-m", "pytest_evalbench", "view", "--port", "0", "--root", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line).group(0)
        status, html = request(url + "runs/1")
        assert status == 200 and "s00001_m01" in html
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err


def test_view_command_without_a_store_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("EVALBENCH_STORE", raising=False)
    assert main(["view", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no run store at" in err and "Traceback" not in err
    assert not (tmp_path / ".evalbench").exists()


def test_view_command_without_the_extra_says_which_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Without jinja2 (the `[view]` extra not installed) the command names the extra, in one line."""
    (tmp_path / ".evalbench").mkdir()
    new_store(tmp_path / ".evalbench" / "runs.sqlite").close()
    monkeypatch.delenv("EVALBENCH_STORE", raising=False)
    monkeypatch.setitem(sys.modules, "jinja2", None)  # what an import finds when the package is not installed
    monkeypatch.delitem(sys.modules, "pytest_evalbench.store.view", raising=False)
    assert main(["view", "--root", str(tmp_path)]) == 2
    assert capsys.readouterr().err == ("evalbench view: needs the [view] extra (jinja2 is not installed): "
                                       "pip install 'pytest-evalbench[view]'\n")


def test_view_command_refuses_a_taken_port_and_masks_the_store_password(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    (tmp_path / ".evalbench").mkdir()
    new_store(tmp_path / ".evalbench" / "runs.sqlite").close()
    monkeypatch.delenv("EVALBENCH_STORE", raising=False)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["view", "--root", str(tmp_path), "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
    assert main(["view", "--store", "postgresql+psycopg://evals:hunter2-secret@127.0.0.1:1/evals"]) == 2
    out, err = capsys.readouterr()
    assert "the run store" in err and "hunter2" not in out + err and "Traceback" not in err


def test_labels_from_the_view_are_what_the_next_calibration_judges(pytester: pytest.Pytester, bench_env) -> None:
    """Two labels written through the API (one the judge got right, one wrong) become calibration items
    that `--evalbench-calibrate` judges unchanged: its calibration.json counts them."""
    from helpers import script

    bench = write_benchmark(pytester.path)
    store = new_store(pytester.path / "runs.sqlite")
    store.record(run_of([case(1, passed=True), case(2, passed=True)]))
    with serve(store, pytester.path) as server:
        assert server.post_label(label(i=1, present=True, note=""), token=server.token)[0] == 201
        assert server.post_label(label(i=2, present=False), token=server.token)[0] == 201
    store.close()
    bench_env.set_responder(script(True))  # the judge says present for both
    collected = pytester.runpytest("--benchmark=demo", "--evalbench-calibrate", "--collect-only", "-q")
    collected.stdout.fnmatch_lines(["benchmarks/demo/calibration.jsonl::1", "benchmarks/demo/calibration.jsonl::2"])
    result = pytester.runpytest("--benchmark=demo", "--evalbench-calibrate")
    result.assert_outcomes(passed=1, failed=1)
    [entry] = json.loads((bench / "calibration.json").read_text())
    assert entry["metric_id"] == "m01" and entry["n"] == 2 and entry["confusion"]["absent"]["present"] == 1
