"""What an MCP server sends is bounded while it arrives and masked before it is cut: its stderr, its
tool list and schemas, its tool results."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import io
import json
import sys
import threading
import tracemalloc
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_evalbench.base.safe_text import SECRETS
from pytest_evalbench.formats.spec import McpServer, ToolsConfig
from pytest_evalbench.kinds.mcp_relay import REFUSED, relay
from pytest_evalbench.kinds.tools import (
    MAX_TOOLS,
    MIN_MESSAGE_BYTES,
    NAMES_LISTED,
    STDERR_CHARS,
    McpConnection,
    ToolBox,
    ToolServerError,
)
from pytest_evalbench.llm.cache import ResponseCache
from pytest_evalbench.llm.costs import PriceTable
from pytest_evalbench.llm.engine import Engine, EngineSettings


@pytest.fixture(scope="module", autouse=True)
def _agents_extra() -> None:
    """The `[agents]` extra, imported before this module's first test rather than at collection: every
    xdist worker collects the module, and the MCP SDK's imports are not small."""
    pytest.importorskip("mcp", reason="the [agents] extra is not installed")


KEY = "sk-tail-Q7vR2mX9pL4kW8nB3cF6hJ1dS5gT0yZe"  # 40 characters


def failed_start(tmp_path: Path, script: str) -> str:
    server = McpServer(name="loud", command=[sys.executable, "-c", script], timeout=30)
    connection = McpConnection(server, tmp_path, {})

    async def start() -> str:
        try:
            await connection.client()
        except ToolServerError as exc:
            return str(exc)
        raise AssertionError("the server started")

    return asyncio.run(start())


def test_a_server_writing_200_mb_of_stderr_is_quoted_from_a_bounded_tail(tmp_path: Path) -> None:
    script = ("import sys\nline = 'x' * 1023 + '\\n'\nfor _ in range(200 * 1024):\n    sys.stderr.write(line)\n"
              "sys.stderr.write('the end of it\\n')\nsys.exit(3)\n")
    tracemalloc.start()
    try:
        message = failed_start(tmp_path, script)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 5_000_000, peak
    assert message.endswith("the end of it") and "its stderr ends: …" in message
    assert len(message) < STDERR_CHARS + 500


@pytest.mark.parametrize("before_end", [STDERR_CHARS - 2, STDERR_CHARS + 4, STDERR_CHARS + 20, STDERR_CHARS + 38])
def test_a_key_across_the_stderr_cut_is_masked_before_the_cut(tmp_path: Path, before_end: int) -> None:
    """The key starts `before_end` characters before the end of stderr: the 600-character cut goes
    through it, or just misses it; no 4 characters of it are ever quoted."""
    SECRETS.add(KEY)
    text = "y" * 5000 + " " + KEY + " " + "z" * 100
    start = len(text) - before_end
    text = text[:start - len(KEY) - 1] + " " + KEY + " " + "z" * (before_end - len(KEY) - 1)
    message = failed_start(tmp_path, f"import sys\nsys.stderr.write({text!r})\nsys.exit(3)\n")
    assert "its stderr ends:" in message
    leaked = [KEY[i:i + 4] for i in range(len(KEY) - 3) if KEY[i:i + 4] in message]
    assert leaked == []


class FakeTool:
    def __init__(self, name: str, schema: dict[str, Any] | None = None) -> None:
        self.name, self.description, self.input_schema = name, "a tool", schema


class FakeClient:
    def __init__(self, tools: list[FakeTool], result_text: str = "") -> None:
        self.tools, self.result_text = tools, result_text

    async def list_tools(self) -> Any:
        return SimpleNamespace(tools=self.tools)

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        return SimpleNamespace(content=[SimpleNamespace(type="text", text=self.result_text)], is_error=False)


def connected(tmp_path: Path, client: FakeClient) -> McpConnection:
    connection = McpConnection(McpServer(name="many", command=["unused"]), tmp_path, {})
    connection._client = client
    return connection


def test_a_huge_input_schema_is_refused_with_its_size_and_bound(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string", "description": "d" * 100} for i in range(1000)}}
    connection = connected(tmp_path, FakeClient([FakeTool("ok"), FakeTool("big", schema)]))
    with pytest.raises(ToolServerError, match=r"tool 'big' has an inputSchema of [\d,]+ characters of JSON; at most "
                                              r"64,000 go into every request"):
        asyncio.run(connection.list_tools())
    many = connected(tmp_path, FakeClient([FakeTool(f"t{i}") for i in range(MAX_TOOLS + 1)]))
    with pytest.raises(ToolServerError, match=f"lists {MAX_TOOLS + 1} tools; a request carries at most {MAX_TOOLS}"):
        asyncio.run(many.list_tools())


def test_an_unknown_tool_answer_lists_a_bounded_number_of_names(tmp_path: Path) -> None:
    names = [f"tool_{i:03d}_" + "n" * 50 for i in range(MAX_TOOLS)]
    connection = connected(tmp_path, FakeClient([FakeTool(n) for n in names]))
    engine = Engine(EngineSettings(), ResponseCache(tmp_path / "cache", "on"), PriceTable())
    config = ToolsConfig(mcp=[{"name": "many", "command": ["unused"]}])
    box = ToolBox("tgt", config, {"many": connection}, engine.cached)
    try:
        _, message = engine.run(box.run({"name": "nope", "arguments": "{}"}, "c1", None, 0))
    finally:
        engine.close()
    assert message["content"].startswith("no tool named 'nope'; the tools are: tool_000_")
    assert message["content"].endswith(f" and {MAX_TOOLS - NAMES_LISTED} more") and len(message["content"]) < 2_000


def test_a_tool_result_is_masked_before_it_is_cut(tmp_path: Path) -> None:
    SECRETS.add(KEY)
    for at in range(1, len(KEY)):  # the limit falls inside the key, at every place
        text = "r" * (200 - at) + KEY + " done"
        connection = connected(tmp_path, FakeClient([FakeTool("t")], text))
        result, _ = asyncio.run(connection.call("t", {}, 200))
        assert [KEY[i:i + 4] for i in range(len(KEY) - 3) if KEY[i:i + 4] in result] == [], at


RESULT_SERVER = '''
import sys
from mcp.server.mcpserver import MCPServer

server = MCPServer("big")

@server.tool()
def flood() -> str:
    """A result of 40 MB."""
    return "x" * 40_000_000

@server.tool()
def small() -> str:
    """A result of 5 MB: within the bound, cut by max_result_chars."""
    return "y" * 5_000_000

if __name__ == "__main__":
    server.run("stdio")
'''


def test_a_tool_result_over_the_message_bound_is_refused_as_it_arrives(tmp_path: Path) -> None:
    """The SDK would hold the whole 40 MB line (and copy it while joining); through the relay the
    run never holds more than a chunk of it, and the call gets one error naming the bound."""
    (tmp_path / "big_server.py").write_text(RESULT_SERVER)
    connection = McpConnection(McpServer(name="big", command=[sys.executable, "big_server.py"], timeout=60),
                               tmp_path, {}, max_result_chars=1000)
    assert connection.max_message == MIN_MESSAGE_BYTES

    async def calls() -> tuple[str, str]:
        try:
            small, _ = await connection.call("small", {}, 1000)
            tracemalloc.start()
            try:
                await connection.call("flood", {}, 1000)
            except ToolServerError as exc:
                return small, str(exc)
            finally:
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                assert peak < 8_000_000, peak
            raise AssertionError("the 40 MB result was taken")
        finally:
            await connection.close()

    small, refused = asyncio.run(calls())
    assert small.startswith("y" * 1000) and small.endswith("truncated from 5000000 to 1000 characters; "
                                                           "see tools.max_result_chars]")
    assert f"the server's answer was more than {MIN_MESSAGE_BYTES:,} bytes" in refused
    assert "it was refused as it arrived" in refused


class JsonRpcHandler(http.server.BaseHTTPRequestHandler):
    """A streamable-HTTP MCP server answering every request with one JSON body: `flood` with 3 MB sent
    in chunks (no length declared), `declared` with a Content-Length of 5 GB, `small` with a line."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(405)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_DELETE = do_GET

    def do_POST(self) -> None:
        message = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if "id" not in message:
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        method, params = message["method"], message.get("params") or {}
        if method == "initialize":
            result: Any = {"protocolVersion": params["protocolVersion"], "capabilities": {"tools": {}},
                           "serverInfo": {"name": "big", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in ("flood", "declared", "small")]}
        else:
            result = {"content": [{"type": "text", "text": "a small result"}]}
        body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).encode()
        name = params.get("name")
        if name == "deep":  # within the size bound, nested past what the SDK's parser takes
            body = body.replace(b'"a small result"', b"[" * 5000 + b"]" * 5000)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if name == "flood":  # no length: read until the connection closes
            self.send_header("Connection", "close")
            self.end_headers()
            chunk = b" " * 65_536
            with contextlib.suppress(OSError):
                for _ in range(48):
                    self.wfile.write(chunk)
                self.wfile.write(body)
            self.close_connection = True
            return
        self.send_header("Content-Length", str(5 * 10**9 if name == "declared" else len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(body)


def test_an_http_servers_json_answer_over_the_message_bound_is_refused_as_it_arrives(tmp_path: Path) -> None:
    """The SDK reads a JSON body whole; the bounded client refuses one over the bound as it arrives
    (or, when its declared length is over it, before reading it), with the relay's error."""
    pytest.importorskip("httpx2")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), JsonRpcHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/mcp"
    connection = McpConnection(McpServer(name="big", url=url, timeout=30), tmp_path, {})
    assert connection.max_message == MIN_MESSAGE_BYTES  # the bound of a stdio server's messages
    connection.max_message = 1_000_000

    async def calls() -> list[str]:
        answers = []
        try:
            for tool in ("small", "flood", "declared", "deep"):
                try:
                    answers.append((await connection.call(tool, {}, 1000))[0])
                except ToolServerError as exc:
                    answers.append(str(exc))
        finally:
            await connection.close()
        return answers

    try:
        small, flood, declared, deep = asyncio.run(calls())
    finally:
        server.shutdown()
        server.server_close()
    assert small == "a small result"
    assert "tool 'flood' failed" in flood and "the server's answer was more than 1,000,000 bytes" in flood
    assert "it was refused as it arrived" in flood
    assert "the server's answer was more than 1,000,000 bytes (at least 5,000,000,000)" in declared
    assert "tool 'deep' failed" in deep and "the server's answer nests deeper than 64 levels; it was refused" in deep


def test_a_stdio_message_nested_too_deep_is_refused_for_its_request() -> None:
    """The SDK's parser fails on it without answering the request, which then waits for its timeout."""
    deep = b'{"jsonrpc": "2.0", "id": 7, "result": {"tools": ' + b"[" * 5000 + b"]" * 5000 + b"}}\n"
    fine = b'{"jsonrpc": "2.0", "id": 8, "result": {"text": "' + b"[" * 5000 + b'"}}\n'
    sink = io.BytesIO()
    relay(io.BufferedReader(io.BytesIO(deep + fine)), sink, 1_000_000)
    first, second = sink.getvalue().splitlines()
    assert json.loads(first) == {"jsonrpc": "2.0", "id": 7, "error": {
        "code": REFUSED, "message": "evalbench: the server's answer nests deeper than 64 levels; it was refused"}}
    assert second + b"\n" == fine  # brackets inside a string are text
