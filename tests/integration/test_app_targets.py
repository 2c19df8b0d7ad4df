"""The team's own app as a target, and the plugin's hooks."""

from __future__ import annotations

import json

import pytest
from helpers import JUDGE, TARGET, USER, read_json, scenario, script, write_benchmark

from pytest_evalbench.testing import FakeLLMServer

APP_TARGETS = [{"id": "app"}]

SYNC_APP = """
def pytest_evalbench_make_target(config, target):
    if target.id != "app":
        return None
    def app(messages):
        assert all(m["role"] in ("user", "assistant") for m in messages)
        return f"app reply #{len(messages)} to: {messages[-1]['content']}"
    return app
"""

ASYNC_APP = """
import asyncio
from pytest_evalbench import TargetReply

class Bot:
    async def __call__(self, messages):
        await asyncio.sleep(0.01)
        return TargetReply(content="async bot here")

def pytest_evalbench_make_target(config, target):
    return Bot() if target.id == "app" else None
"""

TOOL_APP = """
def pytest_evalbench_make_target(config, target):
    def app(messages):
        return {"content": "Your order ships Monday.",
                "tool_calls": [{"tool": "lookup_order", "arguments": {"order_id": "A17"}, "outcome": "found"}]}
    return app
"""

RAISING_APP = """
def pytest_evalbench_make_target(config, target):
    def app(messages):
        if "v02" in messages[0]["content"]:
            raise_inside_the_app()
        return "fine"
    return app

def raise_inside_the_app():
    raise RuntimeError("database is down")
"""


def user_names_scenario(request: dict) -> str:
    text = json.dumps(request)
    return "Thought: x\nMessage: I am " + ("v02" if "m01_s001_v02" in text else "v01")


@pytest.mark.parametrize("xdist", [[], ["-n", "1"]], ids=["no-xdist", "xdist"])  # the app made in a worker process
def test_sync_app_target(pytester: pytest.Pytester, bench_env: FakeLLMServer, xdist: list[str]) -> None:
    pytester.makeconftest(SYNC_APP)
    bench = write_benchmark(pytester.path, targets=APP_TARGETS)
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo", *xdist).assert_outcomes(passed=2, failed=2)
    assert not [r for r in bench_env.requests if r["model"] == TARGET]
    conv = read_json(bench / "runs" / "app" / "conversations.json")
    assert conv[0]["target"] == {"id": "app", "model": None}
    assert conv[0]["transcript"][1]["content"] == "app reply #1 to: I need some help"
    assert conv[0]["transcript"][3]["content"] == "app reply #3 to: I need some help"
    judge_text = json.dumps([r for r in bench_env.requests if r["model"] == JUDGE])
    assert "app reply #3" in judge_text


def test_async_app_target(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    pytester.makeconftest(ASYNC_APP)
    bench = write_benchmark(pytester.path, targets=APP_TARGETS, scenarios=[scenario("m01_s001_v01", "m01")])
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1)
    conv = read_json(bench / "runs" / "app" / "conversations.json")
    assert {m["content"] for m in conv[0]["transcript"] if m["role"] == "assistant"} == {"async bot here"}


def test_tool_calls_are_recorded(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    pytester.makeconftest(TOOL_APP)
    bench = write_benchmark(pytester.path, targets=APP_TARGETS, scenarios=[scenario("m01_s001_v01", "m01")])
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1)
    reply = read_json(bench / "runs" / "app" / "conversations.json")[0]["transcript"][1]
    assert reply["tool_calls"] == [{"tool": "lookup_order", "arguments": {"order_id": "A17"}, "outcome": "found"}]


def test_raising_app_is_error_with_user_traceback(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    pytester.makeconftest(RAISING_APP)
    bench = write_benchmark(pytester.path, targets=APP_TARGETS,
                            scenarios=[scenario("m01_s001_v01", "m01"), scenario("m01_s001_v02", "m01")])
    bench_env.set_responder(script(True, user=user_names_scenario))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*evalbench target error: target 'app' raised:*",
                                 "*in raise_inside_the_app*", "*RuntimeError: database is down*"])
    rows = read_json(bench / "runs" / "app" / "scores.json")
    assert [r["id"] for r in rows] == ["m01_s001_v01"]


def test_missing_app_and_model_is_a_clear_error(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, targets=APP_TARGETS)
    result = pytester.runpytest("--benchmark=demo")
    result.stdout.fnmatch_lines(["*target 'app' has no `model` and no pytest_evalbench_make_target hook*"])
    result.stdout.no_fnmatch_line("*Traceback*")
    assert result.ret == pytest.ExitCode.INTERRUPTED


def test_row_and_results_hooks(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    pytester.makeconftest("""
import json, pathlib

def pytest_evalbench_judged_row(config, row, record):
    if row["id"].endswith("v02"):
        row["present"] = not row["present"]
        row["justification"] += " (overridden by reviewer)"

def pytest_evalbench_results(config, benchmark, results, records):
    pathlib.Path("published.json").write_text(json.dumps(
        {"benchmark": benchmark, "targets": [r["target_model"] for r in results], "n": len(records)}))
""")
    bench = write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01"),
                                                      scenario("m01_s001_v02", "m01")])
    bench_env.set_responder(script(True))
    # in-process: both hooks under xdist are test_typed_records.py's (its `-n 1` parameter)
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1, failed=1)
    rows = read_json(bench / "runs" / "tgt" / "scores.json")
    assert [(r["present"], r["passed"], r["score"]) for r in rows] == [(True, True, 1), (False, False, 0)]
    assert rows[1]["justification"].endswith("(overridden by reviewer)")
    assert read_json(pytester.path / "published.json") == {"benchmark": "demo", "targets": ["tgt"], "n": 2}


def test_model_target_uses_system_prompt(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")],
                    scenario={"user_context": "You are the ACME helper."},
                    targets=[{"id": "a", "model": TARGET}, {"id": "b", "model": TARGET, "system_prompt": "Be B."}])
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=2)
    systems = {r["messages"][0]["content"] for r in bench_env.requests if r["model"] == TARGET}
    assert systems == {"You are the ACME helper.", "Be B."}
    assert all(r["messages"][0]["role"] == "system" for r in bench_env.requests if r["model"] == USER)
