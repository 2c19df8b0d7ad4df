"""Agent evaluations end to end: a model target with tools from a real MCP stdio server (recorded, then
replayed with no server), servers that fail to start, hang or return 10 MB, and an app instrumented
with OpenTelemetry whose trajectory is checked without any hand-written tool-call reporting."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import JUDGE, TARGET, USER, read_json, scenario, script, write_benchmark

from pytest_evalbench.testing import FakeLLMServer, Reply


@pytest.fixture(scope="module", autouse=True)
def _agents_extra() -> None:
    """The `[agents]` extra, imported before this module's first test rather than at collection (every
    xdist worker collects the module, and the MCP SDK's imports are not small), and before any
    in-process run, which would drop what it imported first."""
    pytest.importorskip("mcp", reason="the [agents] extra (which [dev] includes) is not installed")
    pytest.importorskip("opentelemetry.sdk.trace", reason="the [agents] extra (which [dev] includes) is not installed")


SERVER = '''
import time
from mcp.server.mcpserver import MCPServer

server = MCPServer("orders")

@server.tool()
def lookup_order(order_id: str) -> str:
    """Look up an order by its id."""
    return f"order {order_id}: shipped Monday"

@server.tool()
def huge() -> str:
    """A result of 10 MB."""
    return "x" * 10_000_000

@server.tool()
def hang() -> str:
    """Never answers."""
    time.sleep(3600)
    return "late"

if __name__ == "__main__":
    server.run("stdio")
'''

LOOKS_UP = {"id": "m01", "name": "Looks up the order", "type": "positive",
            "definition": "The assistant looks the order up before answering.",
            "checks": {"rules": [{"trajectory": {"mode": "strict", "calls": [
                {"tool": "lookup_order", "arguments": {"order_id": "A1001"}}]}, "then": "present"}],
                       "otherwise": "absent"}}


def tool_target(tool: str, arguments: dict[str, Any]) -> Any:
    """The target model: asks for one tool call, then answers with what the tool returned."""

    def respond(request: dict[str, Any]) -> Reply:
        messages = request["messages"]
        assert [t["function"]["name"] for t in request.get("tools", [])] == ["lookup_order", "huge", "hang"]
        if messages[-1]["role"] == "tool":
            return Reply(content=f"Done: {messages[-1]['content'][:40]}")
        return Reply(content=None, finish_reason="tool_calls", tool_calls=[
            {"id": "call_1", "type": "function", "function": {"name": tool, "arguments": json.dumps(arguments)}}])

    return respond


def mcp_benchmark(root: Path, *, timeout: float = 60, **tools: Any) -> Path:
    bench = write_benchmark(root, spec={"metrics": [LOOKS_UP], "generation": {"turns": 1}},
                            targets=[{"id": "tgt", "model": TARGET, "tools": {
                                "mcp": [{"name": "orders", "command": [sys.executable, "orders_server.py"],
                                         "timeout": timeout}], **tools}}],
                            scenarios=[scenario("m01_s001_v01", "m01")])
    (bench / "orders_server.py").write_text(SERVER)
    return bench


@pytest.mark.parametrize("xdist", [[], pytest.param(["-n", "2"], marks=pytest.mark.slow)], ids=["no-xdist", "xdist"])
def test_a_real_mcp_server_runs_the_tools_and_a_replay_needs_none(pytester: pytest.Pytester,
                                                                  bench_env: FakeLLMServer, xdist: list[str]) -> None:
    bench = mcp_benchmark(pytester.path)
    bench_env.set_responder(script(True, target=tool_target("lookup_order", {"order_id": "A1001"})))
    result = pytester.runpytest("--benchmark=demo", *xdist)
    result.assert_outcomes(passed=1)
    reply = read_json(bench / "runs" / "tgt" / "conversations.json")[0]["transcript"][1]
    assert reply["tool_calls"] == [{"tool": "lookup_order", "arguments": {"order_id": "A1001"},
                                    "outcome": "order A1001: shipped Monday"}]
    assert reply["content"] == "Done: order A1001: shipped Monday"
    target_requests = [r for r in bench_env.requests if r["model"] == TARGET]
    assert target_requests[1]["messages"][-1] == {"role": "tool", "tool_call_id": "call_1",
                                                  "content": "order A1001: shipped Monday"}
    assert not [r for r in bench_env.requests if r["model"] == JUDGE]  # the check decided, judge-free
    row = read_json(bench / "runs" / "tgt" / "scores.json")[0]
    assert row["decided_by"] == "check" and "trajectory strict" in row["justification"]

    # the replay: no endpoint, and a server command that cannot start
    (bench / "orders_server.py").write_text("raise SystemExit('the replay must not start me')\n")
    before = len(bench_env.requests)
    replay = pytester.runpytest("--benchmark=demo", "--evalbench-cache=replay", *xdist)
    replay.assert_outcomes(passed=1)
    assert len(bench_env.requests) == before
    assert read_json(bench / "runs" / "tgt" / "conversations.json")[0]["transcript"][1] == reply
    last = read_json(bench / "last_run.json")
    assert last["llm"]["requests"] == 0 and last["llm"]["tool_calls"] == 0 and last["llm"]["tool_replays"] == 1


def test_a_wrong_trajectory_fails_and_says_what_differed(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    bench = mcp_benchmark(pytester.path)
    bench_env.set_responder(script(True, target=tool_target("lookup_order", {"order_id": "B7"})))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(failed=1)
    differed = "call 1: expected lookup_order(order_id='A1001'), got lookup_order(order_id='B7')"
    result.stdout.fnmatch_lines([f"*{differed}*"])
    row = read_json(bench / "runs" / "tgt" / "scores.json")[0]
    assert differed in row["justification"] and row["passed"] is False


def test_a_server_that_fails_to_start_is_one_error_before_any_call(pytester: pytest.Pytester,
                                                                   bench_env: FakeLLMServer) -> None:
    bench = mcp_benchmark(pytester.path)
    (bench / "orders_server.py").write_text("import sys\nsys.stderr.write('orders db unreachable\\n')\nsys.exit(3)\n")
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo")
    result.stderr.fnmatch_lines(["*target 'tgt': MCP server 'orders' (*orders_server.py) failed to start*"
                                 "its stderr ends: orders db unreachable*"])
    result.stdout.no_fnmatch_line("*Traceback*")
    result.stderr.no_fnmatch_line("*Traceback*")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert not [r for r in bench_env.requests if r["model"] == TARGET]


def test_every_unset_variable_of_endpoints_and_mcp_servers_is_one_preflight_line(pytester: pytest.Pytester,
                                                                                bench_env: FakeLLMServer) -> None:
    """`{env: NAME}` is read by one function for endpoints and MCP servers alike: every unset variable is
    named in one line before any server starts or any call is made."""
    bench = mcp_benchmark(pytester.path)
    spec = yaml.safe_load((bench / "benchmark.yaml").read_text())
    spec["targets"][0]["headers"] = {"X-Team": {"env": "TEAM_TOKEN_UNSET"}}
    spec["targets"][0]["tools"]["mcp"][0]["env"] = {"ORDERS_TOKEN": {"env": "ORDERS_TOKEN_UNSET"}}
    (bench / "benchmark.yaml").write_text(yaml.safe_dump(spec))
    (bench / "orders_server.py").write_text("raise SystemExit('the preflight must not start me')\n")
    bench_env.set_responder(script(True))
    result = pytester.runpytest("--benchmark=demo")
    result.stderr.fnmatch_lines(["*environment variables not set: TEAM_TOKEN_UNSET (needed by target 'tgt'); "
                                 "ORDERS_TOKEN_UNSET (needed by MCP server 'orders')*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR and not bench_env.requests


@pytest.mark.slow
def test_a_tool_that_hangs_is_the_items_error(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    mcp_benchmark(pytester.path, timeout=20)
    bench_env.set_responder(script(True, target=tool_target("hang", {})))
    result = pytester.runpytest("--benchmark=demo")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*MCP server 'orders'*tool 'hang' gave no result within 20s (its timeout)*"])


def test_a_10_mb_tool_result_is_cut_before_anyone_sees_it(pytester: pytest.Pytester,
                                                           bench_env: FakeLLMServer) -> None:
    bench = mcp_benchmark(pytester.path, max_result_chars=1000)
    bench_env.set_responder(script(True, target=tool_target("huge", {})))
    pytester.runpytest("--benchmark=demo").assert_outcomes(failed=1)  # huge() is not the expected call
    outcome = read_json(bench / "runs" / "tgt" / "conversations.json")[0]["transcript"][1]["tool_calls"][0]["outcome"]
    assert outcome.startswith("x" * 1000)
    assert outcome.endswith("[evalbench: tool result truncated from 10000000 to 1000 characters; "
                            "see tools.max_result_chars]")
    sent = [r for r in bench_env.requests if r["model"] == TARGET][1]["messages"][-1]["content"]
    assert len(sent) < 1200
    entries = [p.read_text() for p in (bench / ".evalbench-cache").rglob("*.json")]
    assert entries and max(len(e) for e in entries) < 100_000


OTEL_APP = '''
import json
from opentelemetry import trace

tracer = trace.get_tracer("support-app")

def lookup_order(order_id):
    with tracer.start_as_current_span("execute_tool lookup_order") as span:
        span.set_attribute("gen_ai.operation.name", "execute_tool")
        span.set_attribute("gen_ai.tool.name", "lookup_order")
        span.set_attribute("gen_ai.tool.call.arguments", json.dumps({"order_id": order_id}))
        result = f"order {order_id}: shipped Monday"
        span.set_attribute("gen_ai.tool.call.result", result)
        return result

def app(messages):
    with tracer.start_as_current_span("invoke_agent support") as agent:
        agent.set_attribute("gen_ai.operation.name", "invoke_agent")
        with tracer.start_as_current_span("chat gpt-4o-mini") as chat:
            chat.set_attribute("gen_ai.operation.name", "chat")
            chat.set_attribute("gen_ai.request.model", "gpt-4o-mini")
            chat.set_attribute("gen_ai.usage.input_tokens", 120)
            chat.set_attribute("gen_ai.usage.output_tokens", 30)
        found = lookup_order("A1001")
        return f"Good news: {found}"

def pytest_evalbench_make_target(config, target):
    return app if target.id == "app" else None
'''


@pytest.mark.parametrize("xdist", [[], pytest.param(["-n", "2"], marks=pytest.mark.slow)], ids=["no-xdist", "xdist"])
def test_an_opentelemetry_app_is_checked_without_hand_written_reporting(
        pytester: pytest.Pytester, bench_env: FakeLLMServer, xdist: list[str]) -> None:
    pytester.makeconftest(OTEL_APP)
    bench = write_benchmark(pytester.path, spec={"metrics": [LOOKS_UP], "generation": {"turns": 1}},
                            targets=[{"id": "app", "traces": "opentelemetry"}],
                            scenarios=[scenario("m01_s001_v01", "m01"), scenario("m01_s001_v02", "m01")])
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo", *xdist).assert_outcomes(passed=2)
    for row in read_json(bench / "runs" / "app" / "conversations.json"):
        reply = row["transcript"][1]
        assert reply["tool_calls"] == [{"tool": "lookup_order", "arguments": {"order_id": "A1001"},
                                        "outcome": "order A1001: shipped Monday"}]
        assert reply["model_calls"] == [{"model": "gpt-4o-mini", "input_tokens": 120, "output_tokens": 30}]
        names = [s["name"] for s in reply["spans"]]
        assert names == ["invoke_agent support", "chat gpt-4o-mini", "execute_tool lookup_order"]
        assert reply["spans"][1]["parent_id"] == reply["spans"][0]["span_id"]
    scores = read_json(bench / "runs" / "app" / "scores.json")
    assert {s["decided_by"] for s in scores} == {"check"}
    assert not [r for r in bench_env.requests if r["model"] == JUDGE]
    assert [r for r in bench_env.requests if r["model"] == USER]


def test_a_named_argument_matcher_from_the_hook(pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    pytester.makeconftest(OTEL_APP + '''
def pytest_evalbench_argument_matchers(config):
    return {"order_prefix": lambda want, got: str(got.get("order_id", "")).startswith(want["order_id"])}
''')
    metric = json.loads(json.dumps(LOOKS_UP))
    metric["checks"]["rules"][0]["trajectory"].update(per_tool={"lookup_order": "order_prefix"},
                                                      calls=[{"tool": "lookup_order", "arguments": {"order_id": "A1"}}])
    write_benchmark(pytester.path, spec={"metrics": [metric], "generation": {"turns": 1}},
                    targets=[{"id": "app", "traces": "opentelemetry"}], scenarios=[scenario("m01_s001_v01", "m01")])
    bench_env.set_responder(script(True))
    pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1)
    metric["checks"]["rules"][0]["trajectory"]["per_tool"] = {"lookup_order": "nobody_supplies_this"}
    write_benchmark(pytester.path, spec={"metrics": [metric], "generation": {"turns": 1}},
                    targets=[{"id": "app", "traces": "opentelemetry"}], scenarios=[scenario("m01_s001_v01", "m01")])
    result = pytester.runpytest("--benchmark=demo")
    result.stderr.fnmatch_lines(["*benchmark.yaml, row metric m01, field 'checks.rules.1.trajectory': "
                                 "unknown argument matcher 'nobody_supplies_this'*"])
    result.stdout.no_fnmatch_line("*Traceback*")
    result.stderr.no_fnmatch_line("*Traceback*")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


ROOT = Path(__file__).parents[2]


def test_the_example_replays_with_no_request_and_no_server(tmp_path: Path) -> None:
    """benchmarks/agent-tools exits 1 (m01 fails on purpose, as its benchmark.yaml says), offline, with
    its MCP server's command made to fail."""
    bench = tmp_path / "benchmarks" / "agent-tools"
    shutil.copytree(ROOT / "benchmarks" / "agent-tools", bench,
                    ignore=shutil.ignore_patterns("runs", "*.json", "*.jsonl", "report.html", ".results.lock"))
    shutil.copytree(ROOT / "benchmarks" / "agent-tools" / ".evalbench-cache", bench / ".evalbench-cache",
                    dirs_exist_ok=True)
    shutil.copy(ROOT / "benchmarks" / "agent-tools" / "scenarios.json", bench / "scenarios.json")
    (bench / "orders_server.py").write_text("raise SystemExit('a replay must not start the server')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "OPENAI_", "EVALBENCH_"))}
    done = subprocess.run([sys.executable, "-m", "pytest", "--benchmark=agent-tools", "-p", "no:cacheprovider",
                           "--evalbench-markdown=summary.md"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert "llm: 0 requests" in done.stdout
    assert "MCP tools: 0 calls run on a server this session, " in done.stdout
    assert "1 failed, 3 passed" in done.stdout
    assert ("trajectory strict: call 1: expected lookup_order(order_id='A1001'), "
            "got search_faq(query='delivery of order A1001')") in done.stdout
    last = read_json(bench / "last_run.json")
    assert last["llm"]["requests"] == 0 and last["llm"]["tool_calls"] == 0 and last["llm"]["tool_replays"] == 8
    differed = "call 1: expected lookup_order(order_id=&#x27;A1001&#x27;), got search_faq("
    assert differed in (bench / "report.html").read_text() or differed.replace("&#x27;", "&#39;") in (
        bench / "report.html").read_text()
    assert ("<li>lookup_order(order_id=&#x27;A1001&#x27;) → shipped on Monday</li>"
            in (bench / "report.html").read_text())  # the transcript shows the tool calls
    markdown = (tmp_path / "summary.md").read_text()
    assert "trajectory strict: call 1: expected lookup_order(order_id='A1001'), got search_faq(" in markdown
    row = next(r for r in read_json(bench / "runs" / "support-agent" / "scores.json") if r["metric_id"] == "m01")
    assert row["passed"] is False and "got search_faq(query='delivery of order A1001')" in row["justification"]


def test_a_dataset_case_expected_trajectory_fails_the_case_whatever_the_scores(
        pytester: pytest.Pytester, bench_env: FakeLLMServer) -> None:
    from test_dataset import example_case, scores, write_dataset

    pytester.makeconftest("""
def pytest_evalbench_make_target(config, target):
    def curator(messages):
        return {"content": "a plan",
                "tool_calls": [{"tool": "microsoft_docs_search", "arguments": {"q": "AZ-900"}},
                               {"tool": "SearchLearningPaths", "arguments": {"query": "AZ-900", "top": 3}}]}
    return curator if target.id == "learning-path-curator" else None
""")
    expected = [{"tool": "SearchLearningPaths", "arguments": {"query": "AZ-900"}}]
    cases = [example_case(0, expected_tool_calls=expected,
                          expected_trajectory={"mode": "superset", "arguments": "subset"}),
             example_case(1, expected_tool_calls=expected,
                          expected_trajectory={"mode": "strict", "arguments": "subset"})]
    bench = write_dataset(pytester.path, cases=cases, targets=[{"id": "learning-path-curator"}])
    bench_env.set_responder(scores({}))  # every eval scores 5: only the trajectory can fail a case
    result = pytester.runpytest("--benchmark=agents")
    result.assert_outcomes(passed=1, failed=1)
    differed = "trajectory strict: call 1: expected SearchLearningPaths(query='AZ-900'), got microsoft_docs_search("
    result.stdout.fnmatch_lines([f"*{differed}*"])
    rows = read_json(bench / "case_results.json")
    assert rows[0]["trajectory"] == {"ok": True, "mode": "superset",
                                     "summary": "trajectory superset: holds (2 calls made, 1 expected)"}
    assert rows[1]["trajectory"]["ok"] is False and rows[1]["status"] == "failed"
    assert rows[1]["trajectory"]["summary"].startswith(differed)
    assert any(r.startswith(differed) for r in rows[1]["reasons"])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_streamable_http_server_by_url(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    (pytester.path / "http_server.py").write_text(SERVER.replace('server.run("stdio")',
                                                                 f'server.run("streamable-http", port={port})'))
    process = subprocess.Popen([sys.executable, "http_server.py"], cwd=pytester.path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "the MCP HTTP server did not start"
                time.sleep(0.2)
        bench = write_benchmark(pytester.path, spec={"metrics": [LOOKS_UP], "generation": {"turns": 1}},
                                targets=[{"id": "tgt", "model": TARGET, "tools": {"mcp": [
                                    {"name": "orders", "url": f"http://127.0.0.1:{port}/mcp",
                                     "headers": {"X-Orders-Token": {"env": "ORDERS_TOKEN"}}}]}}],
                                scenarios=[scenario("m01_s001_v01", "m01")])
        bench_env.set_responder(script(True, target=tool_target("lookup_order", {"order_id": "A1001"})))
        pytester.runpytest("--benchmark=demo").stderr.fnmatch_lines(
            ["*environment variable not set: ORDERS_TOKEN (needed by MCP server 'orders')*"])
        monkeypatch.setenv("ORDERS_TOKEN", "tok-5f3a9c0123456789")
        pytester.runpytest("--benchmark=demo").assert_outcomes(passed=1)
    finally:
        process.terminate()
        process.wait(timeout=30)
    reply = read_json(bench / "runs" / "tgt" / "conversations.json")[0]["transcript"][1]
    assert reply["tool_calls"][0]["outcome"] == "order A1001: shipped Monday"
    cached = "".join(p.read_text() for p in (bench / ".evalbench-cache").rglob("*.json"))
    assert "tok-5f3a9c0123456789" not in cached
