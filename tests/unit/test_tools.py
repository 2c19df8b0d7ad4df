"""MCP and OpenTelemetry pieces of kinds/tools.py that need no server: the missing extra, secrets in
a server's config, bounded tool results, and spans read into tool calls, model calls and usage."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pytest_evalbench.base.errors import ConfigError
from pytest_evalbench.base.safe_text import SECRETS
from pytest_evalbench.formats.spec import McpServer, TargetConfig
from pytest_evalbench.kinds import tools
from pytest_evalbench.kinds.tools import MAX_ATTRIBUTE_CHARS, MAX_SPANS, SpanCollector, bounded_result, load_extra

trace = pytest.importorskip("opentelemetry.trace", reason="the [agents] extra is not installed")
sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="the [agents] extra is not installed")


def test_a_missing_extra_is_one_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # import mcp now raises ImportError
    with pytest.raises(ConfigError, match=r"needs the `mcp` package of the \[agents\] extra: "
                                          r"pip install 'pytest-evalbench\[agents\]'"):
        load_extra("mcp", "MCP server 'orders'")


def test_a_servers_env_and_headers_stay_out_of_its_repr() -> None:
    server = McpServer(name="orders", command=["python", "s.py"], env={"TOKEN": "sk-literal-123456"},
                       headers={"Authorization": "Bearer abcdef123456"})
    assert "sk-literal-123456" not in repr(server) and "abcdef123456" not in repr(server)


def test_a_server_needs_a_command_or_a_url_and_tools_need_a_model() -> None:
    with pytest.raises(ValueError, match="exactly one of `command`"):
        McpServer(name="x")
    with pytest.raises(ValueError, match="exactly one of `command`"):
        McpServer(name="x", command=["a"], url="http://127.0.0.1:1/mcp")
    with pytest.raises(ValueError, match="this target has no `model`"):
        TargetConfig(id="app", tools={"mcp": [{"name": "x", "command": ["a"]}]})


def test_env_values_are_read_by_one_function_that_lists_what_is_missing() -> None:
    from pytest_evalbench.formats.spec import EnvRef, resolve_env

    values = {"A": EnvRef(env="SET_VAR"), "B": EnvRef(env="UNSET_ONE"), "C": "QZX-literal-1", "D": EnvRef(env="UNSET_TWO"),
              "E": EnvRef(env="UNSET_ONE"), "F": EnvRef(env="BROKEN")}
    env = {"SET_VAR": "s3cr3t-value-99", "BROKEN": "QZXb\nroken"}
    read = resolve_env(values, env, headers=True)
    assert read.values == {"A": "s3cr3t-value-99", "C": "QZX-literal-1", "F": "QZXb\nroken"}
    assert read.missing == ("UNSET_ONE", "UNSET_TWO") and read.from_env == ("A", "F")
    assert read.problems == ("environment variable BROKEN contains a line break, so it cannot be sent in an HTTP header",)
    assert resolve_env(values, env, headers=False).problems == ()  # a process environment is no HTTP header
    connection = tools.McpConnection(McpServer(name="x", command=["a"], env=values), Path("unused"), env)
    assert connection.missing_env == ("UNSET_ONE", "UNSET_TWO")
    assert "s3cr3t-value-99" not in SECRETS.redact("the token is s3cr3t-value-99")


def test_a_tool_result_is_cut_with_a_note() -> None:
    assert bounded_result("short", 100) == "short"
    cut = bounded_result("x" * 10_000_000, 1000)
    assert len(cut) < 1200 and cut.endswith("truncated from 10000000 to 1000 characters; see tools.max_result_chars]")


def spans_of(work: object) -> SpanCollector:
    provider = sdk.TracerProvider()
    tracer = provider.get_tracer("t")
    collector = SpanCollector()

    class Collect(sdk.SpanProcessor):  # type: ignore[misc]
        def on_end(self, span: object) -> None:
            collector.add(span)

    provider.add_span_processor(Collect())
    work(tracer)  # type: ignore[operator]
    return collector


def test_spans_become_tool_calls_model_calls_and_usage() -> None:
    def work(tracer: object) -> None:
        with tracer.start_as_current_span("invoke_agent"):  # type: ignore[attr-defined]
            with tracer.start_as_current_span("chat m") as chat:  # type: ignore[attr-defined]
                chat.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
                                     "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 4})
            with tracer.start_as_current_span("execute_tool lookup") as tool:  # type: ignore[attr-defined]
                tool.set_attributes({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup",
                                     "gen_ai.tool.call.arguments": '{"id": 1}', "gen_ai.tool.call.result": "ok",
                                     "huge": "y" * 100_000})
            with tracer.start_as_current_span("execute_tool broken") as tool:  # type: ignore[attr-defined]
                tool.set_attributes({"gen_ai.tool.name": "broken", "gen_ai.tool.call.arguments": "not json"})

    traced = tools.read_spans(spans_of(work))
    assert [(c.tool, c.arguments, c.outcome) for c in traced.tool_calls] == [
        ("lookup", {"id": 1}, "ok"), ("broken", {"_raw": "not json"}, None)]
    assert [(c.model, c.input_tokens, c.output_tokens) for c in traced.model_calls] == [("gpt-4o-mini", 10, 4)]
    usage = traced.usage()["gpt-4o-mini"]
    assert (usage.input_tokens, usage.output_tokens) == (10, 4)
    assert [s.name for s in traced.spans] == ["invoke_agent", "chat m", "execute_tool lookup", "execute_tool broken"]
    assert len(traced.spans[2].attributes["huge"]) <= MAX_ATTRIBUTE_CHARS + 20


def test_spans_beyond_the_bound_are_counted_not_kept() -> None:
    def work(tracer: object) -> None:
        for index in range(MAX_SPANS + 5):
            with tracer.start_as_current_span(f"s{index}"):  # type: ignore[attr-defined]
                pass

    traced = tools.read_spans(spans_of(work))
    assert len(traced.spans) == MAX_SPANS and traced.dropped == 5
