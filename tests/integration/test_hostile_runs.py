"""Hostile values through a whole run, not a reader alone: an endpoint's answer (usage counts,
log-probabilities, content, tool calls), an MCP server's tool list and an OpenTelemetry span carry a
value drawn from the one strategy of hostile values (`tests/hostile_values.py`). Whatever the value,
the run ends with exit 0, 1, 4, 6 or 7, prints no traceback or INTERNALERROR, and every result file
it writes is JSON any parser reads: no NaN, no infinity, no integer past 64 bits.

Each example is a whole run, so each property draws few of them (the suite has a time budget); the
readers themselves are attacked with many more in tests/unit/test_hostile_values.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import JUDGE, TARGET, USER, scenario, write_benchmark
from hostile_values import HUGE, NUMBERS, TEXTS, VALUES, Deep, json_text
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from pytest_evalbench.base.numbers import MAX_INT
from pytest_evalbench.testing import FakeLLMServer, Reply, by_model

pytestmark = pytest.mark.usefixtures("quick_backoff")  # in-process runs retry after short backoffs

RUNS = settings(max_examples=4, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
"""Few examples a property, and no shrinking: each example is a whole run (a second or two), and a
failing one is shown as it was drawn."""

EXITS = {0, 1, 4, 6, 7}
HOSTILE = "__hostile__"
ROWS = [scenario("m01_s001_v01", "m01")]


def _number(text: str) -> Any:
    value = int(text) if text.lstrip("-").isdigit() else float(text)
    if isinstance(value, int) and not -MAX_INT <= value <= MAX_INT:
        raise AssertionError(f"an integer past 64 bits was written: {text[:30]}")
    if (isinstance(value, float) and value != value) or value in (float("inf"), float("-inf")):
        raise AssertionError(f"a non-finite number was written: {text[:30]}")
    return value


def _constant(text: str) -> Any:
    raise AssertionError(f"a non-finite number was written: {text}")


def assert_sound_run(result: pytest.RunResult, bench: Path) -> None:
    """The run's exit code is one of its promises, its output has no traceback, and every JSON file
    it wrote holds only finite numbers within 64 bits."""
    out = result.stdout.str() + result.stderr.str()
    assert result.ret in EXITS, (result.ret, out[-3000:])
    assert "INTERNALERROR" not in out and "Traceback" not in out, out[-3000:]
    for path in [*bench.rglob("*.json"), *bench.rglob("*.jsonl")]:  # result files and cache entries
        text = path.read_text(encoding="utf-8")
        texts = text.splitlines() if path.suffix == ".jsonl" else [text]
        for line in filter(str.strip, texts):
            try:
                json.loads(line, parse_int=_number, parse_float=_number, parse_constant=_constant)
            except AssertionError as exc:
                raise AssertionError(f"{path}: {exc}") from None


def with_hostile(template: dict[str, Any], path: tuple[Any, ...], value: Any) -> bytes:
    """`template` as JSON with the hostile value's JSON text (NaN, deep nesting and all) at `path`."""
    body = json.loads(json.dumps(template))
    node = body
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = HOSTILE
    return json.dumps(body).replace(f'"{HOSTILE}"', json_text(value)).encode("utf-8", "surrogatepass")


def completion(model: str, content: str | None) -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5}}


ENDPOINT_FIELDS = [
    ("usage", "prompt_tokens"), ("usage", "completion_tokens"), ("choices", 0, "message", "content"),
    ("choices", 0, "message", "tool_calls"), ("choices", 0, "logprobs"),
]
"""Where a hostile endpoint puts a value: usage counts, the answer, tool calls, log-probabilities."""


@RUNS
@given(field=st.sampled_from(ENDPOINT_FIELDS), value=VALUES, whose=st.sampled_from([TARGET, JUDGE]))
@example(field=("choices", 0, "logprobs"), value={"content": [{"token": "x", "logprob": 800.0}]}, whose=JUDGE)
def test_a_hostile_endpoint_field_never_breaks_a_run(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                     field: tuple[Any, ...], value: Any, whose: str) -> None:
    bench = write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1}, judge={"probability": True})
    verdict = json.dumps({"justification": "because", "present": True})
    bodies = {TARGET: with_hostile(completion(TARGET, "Sure, where to?"), field, value) if whose == TARGET else None,
              JUDGE: with_hostile(completion(JUDGE, verdict), field, value) if whose == JUDGE else None}

    def answer(model: str, content: str) -> Any:
        body = bodies[model]
        return (lambda r: Reply(raw_body=body, headers={"Content-Type": "application/json"})) if body else (
            lambda r: content)

    bench_env.set_responder(by_model({USER: lambda r: "Thought: ok\nMessage: I need some help",
                                      TARGET: answer(TARGET, "Sure, where to?"), JUDGE: answer(JUDGE, verdict)}))
    result = pytester.runpytest_inprocess("--benchmark=demo", "--evalbench-cache=refresh", "--evalbench-max-attempts=2")
    assert_sound_run(result, bench)


MCP_SERVER = r'''
import json, sys
hostile = open(sys.argv[1], encoding="utf-8", errors="surrogatepass").read()
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    method = message["method"]
    if method == "initialize":
        result = json.dumps({"protocolVersion": message["params"]["protocolVersion"],
                             "capabilities": {"tools": {}}, "serverInfo": {"name": "hostile", "version": "1"}})
    elif method == "tools/list":
        result = ('{"tools": [{"name": "lookup_order", "description": "Look up an order.", "inputSchema": '
                  '{"type": "object", "properties": {"order_id": {"type": "string", "default": %s}}}}]}' % hostile)
    else:
        result = '{"content": [{"type": "text", "text": %s}]}' % json.dumps(hostile[:1000])
    sys.stdout.write('{"jsonrpc": "2.0", "id": %s, "result": %s}\n' % (json.dumps(message["id"]), result))
    sys.stdout.flush()
'''


def tool_calling_target(request: dict[str, Any]) -> Reply:
    if request["messages"][-1]["role"] == "tool":
        return Reply(content="Done.")
    return Reply(content=None, finish_reason="tool_calls", tool_calls=[
        {"id": "call_1", "type": "function", "function": {"name": "lookup_order", "arguments": '{"order_id": "A1"}'}}])


@RUNS
@given(value=VALUES)
@example(value=HUGE)  # a default no file may hold: was written into the cache entry of the tool list
@example(value=Deep(5_000, 1, as_dict=False))  # the SDK's parser fails without answering: was a wait for the timeout
def test_a_hostile_mcp_tool_schema_never_breaks_a_run(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                      value: Any) -> None:
    pytest.importorskip("mcp", reason="the [agents] extra is not installed")
    hostile = pytester.path / "hostile.json"  # beside the benchmark: not a file the run writes
    bench = write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1},
                            targets=[{"id": "tgt", "model": TARGET, "tools": {"mcp": [
                                {"name": "orders", "command": [sys.executable, "server.py", str(hostile)],
                                 "timeout": 10}]}}])
    (bench / "server.py").write_text(MCP_SERVER)
    hostile.write_bytes(json_text(value).encode("utf-8", "surrogatepass"))
    bench_env.set_responder(by_model({USER: lambda r: "Thought: ok\nMessage: where is my order?",
                                      TARGET: tool_calling_target,
                                      JUDGE: lambda r: {"justification": "because", "present": True}}))
    result = pytester.runpytest_inprocess("--benchmark=demo", "--evalbench-cache=refresh")
    assert_sound_run(result, bench)


OTEL_APP = '''
import json
from opentelemetry import trace

tracer = trace.get_tracer("hostile-app")
HOSTILE = json.loads(open("hostile.json", encoding="utf-8").read())

def app(messages):
    with tracer.start_as_current_span("chat some-model") as chat:
        chat.set_attribute("gen_ai.operation.name", "chat")
        chat.set_attribute("gen_ai.request.model", "some-model")
        chat.set_attribute(HOSTILE["attribute"], HOSTILE["value"])
    return "Done."

def pytest_evalbench_make_target(config, target):
    return app if target.id == "app" else None
'''

SPAN_ATTRIBUTES = ["gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.request.model"]


@RUNS
@given(attribute=st.sampled_from(SPAN_ATTRIBUTES), value=st.one_of(NUMBERS, TEXTS))
def test_a_hostile_span_attribute_never_breaks_a_run(pytester: pytest.Pytester, bench_env: FakeLLMServer,
                                                     attribute: str, value: Any) -> None:
    pytest.importorskip("opentelemetry.sdk.trace", reason="the [agents] extra is not installed")
    pytester.makeconftest(OTEL_APP)
    (pytester.path / "hostile.json").write_text(json.dumps({"attribute": attribute, "value": value}))
    bench = write_benchmark(pytester.path, scenarios=ROWS, generation={"turns": 1},
                            targets=[{"id": "app", "traces": "opentelemetry"}])
    bench_env.set_responder(by_model({USER: lambda r: "Thought: ok\nMessage: where is my order?",
                                      JUDGE: lambda r: {"justification": "because", "present": True}}))
    result = pytester.runpytest_inprocess("--benchmark=demo", "--evalbench-cache=refresh")
    assert_sound_run(result, bench)
