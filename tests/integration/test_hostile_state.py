"""State files, rate headers, usage numbers and unreadable inputs as a hostile pull request or
endpoint would make them: every one is bounded by the run's own limits, refused with one line, or
ignored with one warning naming the file; never a hang, a budget credit, an INTERNALERROR or a
wrong exit code. What could hang (a FIFO, planted waits) or patches the package (a full disk) runs
in a subprocess with a timeout; the rest in-process."""

from __future__ import annotations

import json
import os
import time

import pytest
from helpers import JUDGE, TARGET, USER, judge_says, read_json, scenario, script, write_benchmark

from pytest_evalbench.gate.decision import EXIT_INCOMPLETE
from pytest_evalbench.llm.shared_limits import endpoint_key
from pytest_evalbench.testing import FakeLLMServer, Reply, by_model

pytestmark = pytest.mark.usefixtures("quick_backoff")  # in-process runs retry after short backoffs

ROWS = [scenario("m01_s001_v01", "m01"), scenario("m01_s002_v01", "m01"), scenario("m01_s003_v01", "m01")]
USAGE_ERROR = 4


def test_rate_headers_never_hold_a_request_past_its_retry_budget(pytester: pytest.Pytester,
                                                                 bench_env: FakeLLMServer) -> None:
    # 0.5 requests per minute would space starts 120 s apart: with a retry budget of 1 s, a request
    # that would wait that long ends with an error at once instead of sleeping
    answer = script(True)
    bench_env.set_responder(lambda r: Reply(content=answer(r), headers={"x-ratelimit-limit-requests": "0.5"})
                            if isinstance(answer(r), str) else answer(r))
    write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1})
    started = time.monotonic()
    result = pytester.runpytest_subprocess("--benchmark=demo", "--evalbench-timeout=5",
                                           "--evalbench-retry-budget=1", timeout=120)
    elapsed = time.monotonic() - started
    assert elapsed < 60, elapsed  # 247 s before; seconds now (the machine may be shared)
    assert result.ret == EXIT_INCOMPLETE
    result.stdout.fnmatch_lines(["*would hold this request 1*s, longer than its retry budget allows (1s*"])
    result.stdout.no_fnmatch_line("*Traceback*")


def test_planted_endpoint_limits_are_ignored_with_one_warning(pytester: pytest.Pytester,
                                                              bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1})
    cache = bench / ".evalbench-cache"
    cache.mkdir()
    key = endpoint_key(bench_env.base_url)
    (cache / ".endpoint-limits").write_text(json.dumps({key: {"updated": 1e15, "req_gap": 120, "next": 1e15}}))
    (cache / ".rate-limit").write_text("9e99")
    bench_env.set_responder(script(True))
    started = time.monotonic()
    result = pytester.runpytest_subprocess("--benchmark=demo", "--evalbench-rate-limit=6000", timeout=120)
    assert time.monotonic() - started < 60  # 369 s and forever before
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*.endpoint-limits: an entry claims times more than 60s ahead*ignored*"])
    result.stdout.fnmatch_lines(["*.rate-limit: next slot b'9e99' is not a time within 3600s of now; ignored*"])


@pytest.mark.parametrize("usage", [-30000, 10**400, True, 2.5, 10**10])
def test_unbelievable_usage_is_a_bad_answer_never_a_credit(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                          usage: object) -> None:
    def target(request: dict[str, object]) -> Reply:
        body = {"id": "x", "object": "chat.completion", "model": TARGET,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "Sure"},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": usage, "completion_tokens": 5}}
        return Reply(raw_body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})

    bench_env.set_responder(by_model({USER: lambda r: "Thought: ok\nMessage: I need some help", TARGET: target,
                                      JUDGE: judge_says(True)}))
    bench = write_benchmark(pytester.path, scenarios=ROWS[:1], generation={"turns": 1})
    result = pytester.runpytest("--benchmark=demo", "--evalbench-max-attempts=2", "--evalbench-max-cost=1")
    assert result.ret == EXIT_INCOMPLETE
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*bad response*usage.prompt_tokens*"  # 10**400: refused by the JSON reader
                                 + ("*out of range*" if usage == 10**400 else " is *, not a token count*")])
    out = result.stdout.str()
    assert "INTERNALERROR" not in out and "$-" not in out
    assert len([r for r in bench_env.requests if r["model"] == TARGET]) == 2  # retried, then an error
    assert read_json(bench / "last_run.json")["status"] == "incomplete"


@pytest.mark.parametrize("name", ["scenarios.json", "calibration.jsonl"])
@pytest.mark.parametrize("kind", ["dev-zero", "fifo"])
def test_non_regular_input_is_refused_before_any_read(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                      name: str, kind: str) -> None:
    bench = write_benchmark(pytester.path, scenarios=ROWS)
    target = bench / name
    target.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.symlink_to("/dev/zero")
    args = ["--evalbench-calibrate"] if name == "calibration.jsonl" else []
    started = time.monotonic()
    result = pytester.runpytest_subprocess("--benchmark=demo", *args, timeout=60)
    assert time.monotonic() - started < 30
    assert result.ret in (pytest.ExitCode.INTERRUPTED, USAGE_ERROR)
    result.stdout.fnmatch_lines([f"*{name}: not a regular file (a FIFO, a device such as /dev/zero, or a "
                                 "directory): refused, not read*"])
    result.stdout.no_fnmatch_line("*Traceback*")
    assert bench_env.requests == []


def test_sessions_link_out_of_the_benchmark_is_refused_before_any_call(pytester: pytest.Pytester,
                                                                       bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=ROWS)
    outside = pytester.path / "elsewhere.json"
    outside.write_text("{}")
    (bench / ".sessions.json").symlink_to(outside)
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo")
    assert result.ret == USAGE_ERROR
    result.stderr.fnmatch_lines(["*.sessions.json: is a symbolic link*"])
    assert bench_env.requests == []
    assert outside.read_text() == "{}"


def test_control_character_in_benchmark_yaml_is_one_line(pytester: pytest.Pytester,
                                                         bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=ROWS)
    spec = bench / "benchmark.yaml"
    spec.write_text(spec.read_text().replace("test benchmark", "test\x07 benchmark"))
    result = pytester.runpytest("--benchmark=demo")
    assert result.ret in (pytest.ExitCode.INTERRUPTED, USAGE_ERROR)
    result.stdout.fnmatch_lines(["*benchmark.yaml:2: invalid YAML: control character U+0007 is not allowed*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert bench_env.requests == []


def test_deeply_nested_state_files_never_crash_the_run(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = write_benchmark(pytester.path, scenarios=ROWS[:1], generation={"turns": 1})
    deep = "[" * 100_000
    for name in ("calibration.json", ".sessions.json", ".usage.json"):
        (bench / name).write_text(deep)
    (bench / "history.jsonl").write_text(deep + "\n")
    bench_env.set_responder(script(True))
    result = pytester.runpytest_subprocess("--benchmark=demo", "-W", "always", timeout=120)
    out = result.stdout.str()
    assert "INTERNALERROR" not in out and "Traceback" not in out
    assert result.ret in (0, USAGE_ERROR), out[-2000:]
    if result.ret == 0:
        result.stdout.fnmatch_lines(["*calibration.json: nested deeper than 64 levels; ignored*"])
    baseline = bench / "baseline-deep.json"
    baseline.write_text(deep)
    result = pytester.runpytest_subprocess("--benchmark=demo", f"--evalbench-compare={baseline}", timeout=120)
    assert result.ret == USAGE_ERROR
    result.stderr.fnmatch_lines(["*baseline-deep.json: baseline file unreadable: nested deeper than 64 levels*"])
