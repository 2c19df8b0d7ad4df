"""Faults, interruptions, bad input and secrets: every failure has a defined, visible outcome."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import JUDGE, TARGET, dead_base_url, read_json, scenario, script, write_benchmark

from conftest import SECRET
from pytest_evalbench.gate.decision import EXIT_INCOMPLETE
from pytest_evalbench.testing import FakeLLMServer, Reply, sequence

pytestmark = pytest.mark.usefixtures("quick_backoff")  # in-process runs retry after short backoffs

FAST = ["--evalbench-timeout=0.5", "--evalbench-max-attempts=3", "--evalbench-retry-budget=5",
        "--evalbench-cache=off"]


def judge_requests(server: FakeLLMServer) -> int:
    return len([r for r in server.requests if r["model"] == JUDGE])


@pytest.mark.parametrize("fault", [Reply(status=429, headers={"Retry-After": "0.05"}), Reply(status=503),
                                   Reply(raw_body=b"<html>oops</html>"), Reply(delay=2.0)],
                         ids=["429", "503", "non-json-200", "hang"])
def test_transient_faults_recover_transparently(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                fault: Reply, transport_name: str) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")])
    bench_env.set_responder(script(sequence(fault, fault, True)))  # the judge's first two calls fail
    result = pytester.runpytest("--benchmark=demo", *FAST, f"--evalbench-transport={transport_name}")
    result.assert_outcomes(passed=1)
    assert judge_requests(bench_env) == 3
    retries = 0 if fault.status == 429 else 2  # a 429 is the provider pacing us: asked again, not a retry
    result.stdout.fnmatch_lines([f"*llm: 7 requests, 0 cache hits, {retries} retries*"])
    assert read_json(bench / "runs" / "tgt" / "scores.json")[0]["passed"] is True


@pytest.mark.parametrize(("fault", "kind"), [(Reply(status=500), "server error"),
                                             (Reply(raw_body=b"not json"), "bad response"),
                                             (Reply(delay=2.0), "timeout")],
                         ids=["500", "non-json-200", "hang"])  # a 429 is not a failed attempt: test_rate_limits.py
def test_persistent_faults_are_bounded_errors_and_keep_other_rows(pytester: pytest.Pytester,
                                                                  bench_env: FakeLLMServer,
                                                                  fault: Reply, kind: str) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01"),
                                                      scenario("m02_s001_v01", "m02")])
    bench_env.set_responder(script(lambda r: fault if "m02" in json.dumps(r) else False))
    started = time.monotonic()
    result = pytester.runpytest("--benchmark=demo", *FAST)
    assert time.monotonic() - started < 15
    result.assert_outcomes(failed=1, errors=1)
    assert result.ret == EXIT_INCOMPLETE
    result.stdout.fnmatch_lines([f"*evalbench {kind}: judge model 'sim-judge': {kind}*after 3 attempts*"])
    result.stdout.no_fnmatch_line("*Traceback*")
    assert judge_requests(bench_env) == 1 + 3
    assert [r["id"] for r in read_json(bench / "runs" / "tgt" / "scores.json")] == ["m01_s001_v01"]


def test_retry_budget_bounds_total_time(pytester: pytest.Pytester, bench_env: FakeLLMServer, transport_name: str) -> None:
    write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")])
    bench_env.set_responder(script(lambda r: Reply(status=429, headers={"Retry-After": "1"})))
    started = time.monotonic()
    result = pytester.runpytest("--benchmark=demo", "--evalbench-max-attempts=50", "--evalbench-retry-budget=1.5",
                                "--evalbench-cache=off", f"--evalbench-transport={transport_name}")
    assert time.monotonic() - started < 10
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*retry budget 2s exhausted*"])
    assert judge_requests(bench_env) <= 3


def test_truncated_structured_output_is_unscored(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")])
    bench_env.set_responder(script(lambda r: Reply(content='{"justification": "x", "pres', finish_reason="length")))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(errors=1)
    assert judge_requests(bench_env) == 3
    row = read_json(bench / "runs" / "tgt" / "scores.json")[0]
    assert (row["present"], row["passed"], row["score"]) == (None, None, None)
    # the unusable chain is not cached: a rerun asks the judge again, the conversation replays
    bench_env.reset()
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1)
    assert [r["model"] for r in bench_env.requests] == [JUDGE]


@pytest.mark.slow
def test_connection_refused_stops_retrying_quickly(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                                   transport_name: str) -> None:
    rows = [scenario(f"m01_s{i:03d}_v01", "m01") for i in range(1, 21)]
    write_benchmark(pytester.path, scenarios=rows)
    url = dead_base_url()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    started = time.monotonic()
    result = pytester.runpytest("--benchmark=demo", f"--evalbench-base-url={url}", "--evalbench-max-attempts=3",
                                f"--evalbench-transport={transport_name}")
    assert time.monotonic() - started < 20
    result.assert_outcomes(errors=20)
    result.stdout.fnmatch_lines(["*requests*"])
    requests = int(result.stdout.str().split("llm: ")[1].split(" requests")[0])
    assert requests < 20 * 3  # the circuit breaker fails the rest fast


INTERRUPT = """
import pytest
calls = {"n": 0}
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    calls["n"] += 1
    if calls["n"] == 3:
        raise KeyboardInterrupt
"""


def test_keyboard_interrupt_keeps_finished_rows_and_resumes(pytester: pytest.Pytester,
                                                            bench_env: FakeLLMServer) -> None:
    pytester.makeconftest(INTERRUPT)
    bench = write_benchmark(pytester.path, generation={"turns": 1})
    bench_env.set_responder(script(True, user=lambda r: "Message: hi from " + json.dumps(r)[-40:]))
    # a real process: an in-process KeyboardInterrupt would stop the outer test session too
    result = pytester.runpytest_subprocess("--benchmark=demo", "--evalbench-concurrency=1")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    rows = read_json(bench / "runs" / "tgt" / "scores.json")
    assert [r["id"] for r in rows] == ["m01_s001_v01", "m01_s001_v02"]
    assert read_json(bench / "last_run.json")["status"] == "incomplete"
    first = len(bench_env.requests)
    pytester.makeconftest("")
    bench_env.reset()
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=2, failed=2)
    assert len(bench_env.requests) < first + 3 * 4 - 3 * 2  # finished items replay from the cache
    assert len(read_json(bench / "runs" / "tgt" / "scores.json")) == 4


def test_killed_xdist_worker_loses_nothing_else(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    pytester.makeconftest("""
import os
def pytest_evalbench_make_target(config, target):
    def app(messages):
        if "doomed" in messages[0]["content"]:
            os._exit(1)
        return "fine"
    return app
""")
    rows = [scenario(f"m01_s{i:03d}_v01", "m01") for i in range(1, 7)]
    bench = write_benchmark(pytester.path, scenarios=rows, targets=[{"id": "app"}], generation={"turns": 1})
    bench_env.set_responder(script(True, user=lambda r: "Message: " + (
        "doomed" if "m01_s003_v01" in json.dumps(r) else "hello")))
    result = pytester.runpytest("--benchmark=demo", "-n", "2")
    result.stdout.fnmatch_lines(["*worker*crashed*"])
    assert result.ret == EXIT_INCOMPLETE  # the lost row is counted, never silently missing
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) + outcomes.get("errors", 0) >= 1
    ids = [r["id"] for r in read_json(bench / "runs" / "app" / "scores.json")]
    assert "m01_s003_v01" not in ids and len(ids) >= 4
    for path in bench.rglob("*.json"):
        json.loads(path.read_text())


@pytest.mark.parametrize(("spec_text", "rows", "expected"), [
    ("name: demo\nmetrics: [\n", None, "*benchmark.yaml:3: invalid YAML*"),
    ("- just\n- a list\n", None, "*benchmark.yaml: expected a mapping at the top level*"),
    (None, "[{]", "*scenarios.json:1: invalid JSON*"),
    (None, "{}", "*scenarios.json: expected a JSON list of scenario rows*"),
    (None, "[]", "*scenarios.json: no scenario rows*gen-scenarios*"),
    (None, [{"id": "m01_s001_v01", "metric_id": "m01", "user_goal": "x"}],
     "*scenarios.json, row 1 (id m01_s001_v01): needs `persona` (or impactbench's `user_persona`)*"),
    (None, [scenario("m09_s001_v01", "m09")], "*field 'metric_id': unknown metric id 'm09'; benchmark.yaml defines m01, m02*"),
    (None, [scenario("m01_s001_v01", "m01"), scenario("m01_s001_v01", "m01")],
     "*scenarios.json, row 2 (id m01_s001_v01), field 'id': duplicate id 'm01_s001_v01' (also row 1)*"),
    (None, [scenario("m01_s001_v01", "m01", metric_type="negative")], "*field 'metric_type'*contradicts*"),
    (None, [scenario("m01_s001_v01", "m01", landmarks=[{"turn": "x", "instruction": "i"}])],
     "*field 'landmarks.1.turn'*"),
])
def test_bad_input_is_one_clear_error(pytester: pytest.Pytester, bench_env: FakeLLMServer, spec_text: str | None,
                                      rows: Any, expected: str) -> None:
    bench = write_benchmark(pytester.path)
    if spec_text is not None:
        (bench / "benchmark.yaml").write_text(spec_text)
    if rows is not None:
        (bench / "scenarios.json").write_text(rows if isinstance(rows, str) else json.dumps(rows))
    result = pytester.runpytest("--benchmark=demo")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([expected])
    result.stdout.no_fnmatch_line("*Traceback*")
    assert bench_env.requests == []


@pytest.mark.parametrize(("spec", "expected"), [
    ({"turns": "six"}, "*field 'generation.turns'*"),
    ({"generaton": {}}, "*benchmark.yaml:*, field 'generaton': unknown key 'generaton': did you mean `generation`?*"),
    ({"metrics": [{"id": "m01", "name": "a", "type": "positive", "definition": "d"}] * 2},
     "*duplicate metrics id(s): m01*"),
])
def test_bad_spec_values(pytester: pytest.Pytester, bench_env: FakeLLMServer, spec: dict[str, Any],
                         expected: str) -> None:
    extra = {"generation": {"turns": spec.pop("turns")}} if "turns" in spec else {}
    write_benchmark(pytester.path, spec={**spec, **extra})
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo")
    result.stdout.fnmatch_lines([expected])
    result.stdout.no_fnmatch_line("*Traceback*")


def test_missing_scenarios_and_bad_options(pytester: pytest.Pytester) -> None:
    bench = write_benchmark(pytester.path)
    (bench / "scenarios.json").unlink()
    result = pytester.runpytest("--benchmark=demo")
    result.stdout.fnmatch_lines(["*scenarios.json: file not found; generate it with `evalbench gen-scenarios demo`*"])
    for option, message in (("--evalbench-concurrency=0", "*must be at least 1*"),
                            ("--evalbench-cache=sometimes", "*invalid choice: 'sometimes'*"),
                            ("--evalbench-transport=http", "*--evalbench-transport: invalid choice: 'http'*aiohttp*openai*"),
                            ("--benchmark=a/b", "*is not a benchmark name*")):
        result = pytester.runpytest("--benchmark=demo", option)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([message])


def test_huge_row_is_handled(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01", persona="p" * 1_000_000)])
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1)


def test_api_key_never_written_or_printed(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    pytester.makeconftest("""
def pytest_evalbench_make_target(config, target):
    if target.id != "app":
        return None
    def app(messages):
        raise RuntimeError("app failed")
    return app
""")
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01"), scenario("m02_s001_v01", "m02")],
                            targets=[{"id": "tgt", "model": TARGET}, {"id": "app"}])

    normal = script(True, user=lambda r: "Message: hello from " + ("m02" if "m02_s001" in json.dumps(r) else "m01"))

    def respond(request: dict[str, Any]) -> Any:
        if "hello from m02" in json.dumps(request) and request["model"] == TARGET:
            echoed = request["_headers"].get("authorization", "")
            return Reply(status=401, content=None, raw_body=json.dumps(
                {"error": {"message": f"Incorrect API key provided: {echoed}", "type": "invalid_request_error"}}
            ).encode())
        return normal(request)

    bench_env.set_responder(respond)
    result = pytester.runpytest("--benchmark=demo", "--junitxml=junit.xml", "--evalbench-html=report.html",
                                "--evalbench-save-baseline", "-rA")
    assert any(SECRET in r["_headers"].get("authorization", "") for r in bench_env.requests)
    output = result.stdout.str() + result.stderr.str()
    assert "request rejected" in output and SECRET not in output
    scanned = 0
    for path in Path(pytester.path).rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
            scanned += 1
    assert scanned > 10 and (bench / ".evalbench-cache").is_dir()
