"""Tools of agent targets: the MCP servers a model target calls, and the OpenTelemetry spans of an app target.

Both need the `[agents]` extra (the official `mcp` SDK, `opentelemetry-sdk`), imported only here and only
when a benchmark uses them; a benchmark that needs one that is not installed gets one error naming the extra.

MCP. A model target's `tools.mcp` servers are started at most once per process (each xdist worker has its
own), at the first use that the cache cannot answer, on the engine's event loop, and stopped with the
engine. Their tools are offered to the model in the chat-completions `tools` format; each tool call the
model makes runs on its server under the server's `timeout`, and the call and its result go into the
transcript and the trajectory. The tool list and every tool result are recorded in the response cache
(`CachedCalls.recorded`): a server's list under its `name`, a result under the server, tool, arguments and
the cache key of the completion that asked for it, so a replay needs no server process at all. A result is
hostile like any model output: lone surrogates replaced, secrets masked, then cut to
`tools.max_result_chars` with a note, before the model, the transcript or the cache sees it. What a
server sends is bounded as it arrives: a stdio server's stdout goes through `mcp_relay.py`, which
refuses a message over `max_message` bytes without holding it (an HTTP server's answers, through
`mcp_relay.bounded_client`, alike); its stderr keeps its last
`STDERR_KEEP` bytes (`StderrTail`); its tool list is refused beyond `MAX_TOOLS` tools or a name or
schema too long to go into every request. A server that cannot start, a call
that gets no result in time or a connection that breaks is the item's error (`ToolServerError`), never a
result given to the model; the tool's own errors (`isError`) are results, as the model would see them.

OpenTelemetry. An app target with `traces: opentelemetry` has the spans it makes while replying collected
in-process: one span processor (no exporter, no network) is added to the process's SDK tracer provider
(set up when the process has none), and the spans of one reply are found by the context the app is called
in and by their trace. GenAI semantic-convention spans become the reply's tool calls (`execute_tool` spans:
`gen_ai.tool.name`, `gen_ai.tool.call.arguments`, `gen_ai.tool.call.result`), model calls and token usage
(`gen_ai.usage.input_tokens` / `output_tokens` of `chat` spans). The spans themselves are kept with the
reply, bounded (`MAX_SPANS`, `MAX_ATTRIBUTES`, `MAX_ATTRIBUTE_CHARS`), secrets masked.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib
import json
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pytest_evalbench.base.errors import ConfigError, EvalbenchError, InputError, UnusableAnswer
from pytest_evalbench.base.json_input import check_depth
from pytest_evalbench.base.numbers import MAX_TOKENS, is_json_number, is_token_count, shown_number
from pytest_evalbench.base.safe_text import SECRETS, cut, redact, redact_data, terminal, truncated
from pytest_evalbench.formats.results import ModelCall, Span, ToolCall, tool_arguments
from pytest_evalbench.formats.spec import McpServer, ToolsConfig, resolve_env
from pytest_evalbench.kinds.mcp_relay import StderrTail
from pytest_evalbench.llm.cache import CachedCalls, cache_key
from pytest_evalbench.llm.types import Usage, safe_json, safe_text

AGENTS_EXTRA = "pip install 'pytest-evalbench[agents]'"
STDERR_CHARS = 600
"""How much of a server's stderr an error quotes (its tail, masked before it is cut)."""
DESCRIPTION_CHARS = 2_000
MAX_TOOLS = 128
"""Most tools one server may offer: what OpenAI's chat completions accept in one request."""
MAX_TOOL_NAME = 256
MAX_SCHEMA_CHARS = 64_000
"""Longest `inputSchema` (as JSON) a tool may have: it goes into every request of its target and the cache."""
NAMES_LISTED = 20
"""How many tool names an answer to an unknown tool lists."""


class ToolServerError(EvalbenchError):
    """An MCP server could not start, answer a tool call in time, or stay connected."""


def load_extra(module: str, who: str) -> Any:
    """`module`, or a ConfigError saying that `who` needs the [agents] extra."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ConfigError(f"{who} needs the `{module.split('.', maxsplit=1)[0]}` package of the [agents] extra: {AGENTS_EXTRA}"
                          ) from None


# --------------------------------------------------------------------------- MCP servers


RELAY = Path(__file__).with_name("mcp_relay.py")
MIN_MESSAGE_BYTES = 32 * 2**20
"""The bound on one message of a server whatever its targets' results: room for a tool list of
`MAX_TOOLS` tools with schemas of `MAX_SCHEMA_CHARS`, and for a result of 10 MB (sent twice: as text
and as structured content) that `tools.max_result_chars` then cuts with a note."""


def message_bound(max_result_chars: int) -> int:
    """Bytes one message of a server may have: a tool result of `max_result_chars` characters escaped in
    JSON (6 bytes a character at most) with room for its other blocks, and never less than
    `MIN_MESSAGE_BYTES`."""
    return max(MIN_MESSAGE_BYTES, 6 * max_result_chars + 2**20)


class McpConnection:
    """One MCP server of this process: started at its first use on the engine's loop, stopped with it."""

    def __init__(self, server: McpServer, bench_dir: Path, env: Mapping[str, str],
                 max_result_chars: int = 0) -> None:
        self.server = server
        self.max_message = message_bound(max_result_chars)
        """Longest message the server may send (a stdio server's longer ones are refused as they arrive)."""
        self.bench_dir = bench_dir
        self.env = resolve_env(server.env, env, headers=False)
        self.headers = resolve_env(server.headers, env, headers=True)
        """`{env: NAME}` values read once; unset ones are listed at the preflight (a replay needs none)."""
        for value in [*self.env.values.values(), *self.headers.values.values()]:
            SECRETS.add(value)
        self._client: Any = None
        self._failure: str | None = None
        self._lock: asyncio.Lock | None = None
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._errlog: StderrTail | None = None

    @property
    def missing_env(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.env.missing + self.headers.missing))

    @property
    def env_problems(self) -> tuple[str, ...]:
        return self.headers.problems

    @property
    def label(self) -> str:
        where = " ".join(self.server.command) if self.server.command else str(self.server.url)
        return f"MCP server '{self.server.name}' ({cut(where, 200)})"

    async def client(self) -> Any:
        """The connected client, the server started on first use; a failed start fails every use after it."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._failure is not None:
                raise ToolServerError(self._failure)
            if self._client is None:
                try:
                    self._client = await self._start()
                except ToolServerError as exc:
                    self._failure = str(exc)
                    raise
        return self._client

    async def _start(self) -> Any:
        if self.missing_env or self.env_problems:
            raise ToolServerError("; ".join([*(f"environment variable {name} not set" for name in self.missing_env),
                                             *self.env_problems]) + f" (needed by MCP server '{self.server.name}')")
        try:
            mcp = load_extra("mcp", self.label)
        except ConfigError as exc:
            raise ToolServerError(str(exc)) from None
        env, headers = self.env.values, self.headers.values
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Any] = loop.create_future()
        self._stop = asyncio.Event()
        self._errlog = errlog = StderrTail() if self.server.command else None
        self._task = asyncio.create_task(self._own(mcp, ready, env, headers))
        try:
            return await asyncio.wait_for(asyncio.shield(ready), self.server.timeout)
        except asyncio.TimeoutError:
            problem = f"did not start and list its tools within {self.server.timeout:g}s (its timeout)"
        except Exception as exc:
            leaf = first_leaf(exc)
            problem = f"failed to start: {type(leaf).__name__}: {cut(' '.join(str(leaf).split()), 300)}"
        await self.close()  # the server stopped and its stderr read to the end before it is quoted
        tail = stderr_ending(errlog) if errlog is not None else ""
        raise ToolServerError(f"{self.label} {problem}{f'; its stderr ends: {tail}' if tail else ''}")

    async def _own(self, mcp: Any, ready: asyncio.Future[Any], env: dict[str, str], headers: dict[str, str]) -> None:
        """Owns the client for its whole life (the SDK's contexts are left in the task they were entered in)."""
        assert self._stop is not None
        try:
            async with contextlib.AsyncExitStack() as stack:
                if self.server.command:
                    from mcp.client.stdio import stdio_client

                    params = mcp.StdioServerParameters(  # through the relay, which bounds each message
                        command=sys.executable, args=["-I", "-S", str(RELAY), str(self.max_message), *self.server.command],
                        env=env, cwd=str(self.bench_dir))
                    assert self._errlog is not None
                    transport = stdio_client(params, errlog=self._errlog.writer)
                else:
                    load_extra("httpx2", self.label)
                    from mcp.client.streamable_http import streamable_http_client

                    from pytest_evalbench.kinds.mcp_relay import bounded_client

                    http = await stack.enter_async_context(bounded_client(self.max_message, headers=headers,
                                                                         timeout=self.server.timeout))
                    transport = streamable_http_client(str(self.server.url), http_client=http,
                                                       max_sse_event_size=self.max_message)
                client = await stack.enter_async_context(
                    mcp.Client(transport, read_timeout_seconds=self.server.timeout, cache=None))
                if not ready.done():
                    ready.set_result(client)
                await self._stop.wait()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except BaseException as exc:  # the SDK raises exception groups too: the start's error, or a broken link
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            else:
                self._failure = f"{self.label} lost its connection: {type(exc).__name__}"

    async def list_tools(self) -> list[dict[str, Any]]:
        """The server's tools as `{name, description, input_schema}`; ToolServerError when it lists more
        tools than a request carries, or a name or an input schema too long to send with every request."""
        client = await self.client()
        try:
            listed = await asyncio.wait_for(client.list_tools(), self.server.timeout)
        except asyncio.TimeoutError:
            raise ToolServerError(f"{self.label} did not list its tools within {self.server.timeout:g}s") from None
        except Exception as exc:  # a list the SDK refuses (not MCP's shape), or a refused message
            raise ToolServerError(f"{self.label}: its tool list could not be read: {type(exc).__name__}: "
                                  f"{terminal(cut(' '.join(str(exc).split()), 300))}") from None
        if len(listed.tools) > MAX_TOOLS:
            raise ToolServerError(f"{self.label} lists {len(listed.tools):,} tools; a request carries at most {MAX_TOOLS}")
        tools = []
        for tool in listed.tools:
            name = safe_text(str(tool.name))
            if len(name) > MAX_TOOL_NAME:
                raise ToolServerError(f"{self.label} lists a tool named {cut(name, 100)!r} of {len(name):,} "
                                      f"characters; at most {MAX_TOOL_NAME} are sent")
            schema = safe_json(tool.input_schema or {"type": "object", "properties": {}})
            try:  # numbers a file may hold, nesting within bounds: it goes into every request and the cache
                check_depth(schema, Path("inputSchema"), numbers=True)
            except InputError as exc:
                where = f", field '{exc.field}'" if exc.field else ""
                raise ToolServerError(f"{self.label}: tool {cut(name, 100)!r} has an inputSchema that cannot be "
                                      f"sent{where}: {exc.message}") from None
            size = len(json.dumps(schema, ensure_ascii=False))
            if size > MAX_SCHEMA_CHARS:
                raise ToolServerError(f"{self.label}: tool {cut(name, 100)!r} has an inputSchema of {size:,} characters "
                                      f"of JSON; at most {MAX_SCHEMA_CHARS:,} go into every request of its target "
                                      "and the cache, so the tool cannot be offered")
            tools.append({"name": name, "description": cut(safe_text(tool.description or ""), DESCRIPTION_CHARS),
                          "input_schema": schema})
        return tools

    async def call(self, tool: str, arguments: dict[str, Any], limit: int) -> tuple[str, bool]:
        """One tool call: (its result as text, bounded to `limit` characters with a note; whether the
        tool reported an error). ToolServerError when no result comes in time or the link broke."""
        client = await self.client()
        try:
            result = await asyncio.wait_for(client.call_tool(tool, arguments), self.server.timeout)
        except asyncio.TimeoutError:
            raise ToolServerError(f"{self.label}: tool '{cut(tool, 100)}' gave no result within "
                                  f"{self.server.timeout:g}s (its timeout)") from None
        except Exception as exc:
            raise ToolServerError(f"{self.label}: tool '{cut(tool, 100)}' failed: {type(exc).__name__}: "
                                  f"{cut(' '.join(str(exc).split()), 300)}") from None
        return bounded_result(redact(result_text(result)), limit), bool(getattr(result, "is_error", False))

    async def close(self) -> None:
        """Stop the server (bounded: the SDK's own shutdown waits a few seconds at most)."""
        if self._stop is not None:
            self._stop.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, 15)
            except (asyncio.TimeoutError, asyncio.CancelledError, Exception):
                pass
            self._task = None
        self._client = None
        if self._errlog is not None:
            await asyncio.to_thread(self._errlog.close)


def stderr_ending(errlog: StderrTail) -> str:
    """A server's kept stderr as one line: masked whole first, then cut to its last `STDERR_CHARS`
    characters, so the cut never hides a secret from the masker; "" when there was none."""
    kept, cut_before = errlog.kept()
    text = redact(("…" if cut_before else "") + safe_text(kept))  # "…": the masker sees a cut
    text = " | ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    if len(text) > STDERR_CHARS:
        text = "…" + text[-STDERR_CHARS:]
    return terminal(text)


def first_leaf(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups: what actually went wrong."""
    inner = getattr(exc, "exceptions", None)  # BaseExceptionGroup (or its backport on Python 3.10)
    while isinstance(inner, tuple) and inner and isinstance(inner[0], BaseException):
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    return exc


def result_text(result: Any) -> str:
    """A tool result's content blocks as text: text as it is, other blocks named by their type."""
    parts: list[str] = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(getattr(block, "text", "")))
        elif kind == "resource" and hasattr(getattr(block, "resource", None), "text"):
            parts.append(str(block.resource.text))
        else:
            parts.append(f"[{kind or 'content'} block: {getattr(block, 'mime_type', None) or 'no text'}]")
    structured = getattr(result, "structured_content", None)
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False, default=str))
    return safe_text("\n".join(parts))


def tool_names(names: list[str]) -> str:
    """The tools there are, for a model that called one that is not: the first `NAMES_LISTED`."""
    if not names:
        return "the tools are: none"
    more = len(names) - NAMES_LISTED
    return "the tools are: " + ", ".join(cut(n, 64) for n in names[:NAMES_LISTED]) + (
        f" and {more:,} more" if more > 0 else "")


def bounded_result(text: str, limit: int) -> str:
    """A tool result cut to `limit` characters, saying so (the model, the transcript and the cache see the note)."""
    return truncated(text, limit, "tool result", "tools.max_result_chars")


@dataclass
class ToolBox:
    """A model target's tools: its servers' tools offered to the model, each call run (or replayed) on its server."""

    target_id: str
    config: ToolsConfig
    connections: dict[str, McpConnection]
    cached: CachedCalls
    _offered: list[dict[str, Any]] | None = None
    _owner: dict[str, str] = field(default_factory=dict)
    """Tool name -> the name of the server that has it."""

    async def offered(self) -> list[dict[str, Any]]:
        """The tools in the chat-completions format (every server's list, from the cache or the server)."""
        if self._offered is None:
            offered: list[dict[str, Any]] = []
            owner: dict[str, str] = {}
            for server in self.config.mcp:
                connection = self.connections[server.name]
                material = {"mcp_server": server.name, "list": "tools"}

                async def produce(connection: McpConnection = connection) -> dict[str, Any]:
                    return {"tools": await connection.list_tools()}

                listed = await self.cached.recorded(cache_key(material), material, produce,
                                                    f"MCP server '{server.name}' tool list", counted=False)
                for tool in listed["tools"]:
                    name = str(tool.get("name"))
                    if name in owner:
                        raise ToolServerError(f"target '{self.target_id}': tool {name!r} is offered by MCP servers "
                                              f"'{owner[name]}' and '{server.name}'; a tool name must be unique")
                    owner[name] = server.name
                    offered.append({"type": "function", "function": {
                        "name": name, "description": str(tool.get("description") or ""),
                        "parameters": tool.get("input_schema") or {"type": "object", "properties": {}}}})
            self._offered, self._owner = offered, owner
        return self._offered

    async def run(self, call: dict[str, Any], call_id: str, after: str | None, index: int
                  ) -> tuple[ToolCall, dict[str, Any]]:
        """Run one of the model's tool calls: the transcript's `ToolCall` and the `tool` message for the model.
        A call of an unknown tool or with arguments that are not a JSON object is answered with an
        error message (the model's mistake, part of its trajectory), never run."""
        await self.offered()
        name = safe_text(str(call.get("name") or ""))
        arguments, problem = tool_arguments(call.get("arguments"))
        shown_args = arguments
        server = self._owner.get(name)
        if server is None:
            text, error = f"no tool named {cut(name, 100)!r}; {tool_names(list(self._owner))}", True
        elif problem is not None:
            text, error = f"the arguments are not a JSON object ({problem})", True
        else:
            connection = self.connections[server]
            material = safe_json({"mcp_server": server, "tool": name, "arguments": arguments, "after": after,
                                  "index": index})
            limit = self.config.max_result_chars

            async def produce() -> dict[str, Any]:
                result, failed = await connection.call(name, arguments, limit)
                return {"tool_result": result, "is_error": failed}

            answer = await self.cached.recorded(cache_key(material), material, produce,
                                                f"MCP server '{server}' tool '{cut(name, 100)}'")
            text, error = str(answer["tool_result"]), bool(answer.get("is_error"))
        text = redact(safe_text(text))
        made = ToolCall(tool=cut(name, 200), arguments=redact_data(safe_json(shown_args)),
                        outcome=f"[error] {text}" if error else text)
        return made, {"role": "tool", "tool_call_id": call_id, "content": text}


# --------------------------------------------------------------------------- OpenTelemetry spans

MAX_SPANS = 200
MAX_ATTRIBUTES = 64
MAX_ATTRIBUTE_CHARS = 4_000
MAX_MODEL_CHARS = 200
"""Longest model name read from a span (it keys usage and prices)."""
MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
_STATUS: dict[str, Literal["unset", "ok", "error"]] = {"OK": "ok", "ERROR": "error"}


class SpanCollector:
    """The finished spans of one app reply (at most `MAX_SPANS` kept; the rest counted)."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.dropped = 0
        self.traces: set[int] = set()
        self._lock = threading.Lock()

    def add(self, span: Any) -> None:
        with self._lock:
            if len(self.spans) < MAX_SPANS:
                self.spans.append(span)
            else:
                self.dropped += 1


_COLLECTOR: contextvars.ContextVar[SpanCollector | None] = contextvars.ContextVar("evalbench_spans", default=None)
_BY_TRACE: dict[int, SpanCollector] = {}
_TRACE_LOCK = threading.Lock()
_INSTALLED: list[bool] = []


def install_span_processor() -> None:
    """Add the collecting span processor to the process's SDK tracer provider (once), setting one up when
    the process has none. ConfigError when the extra is missing or another kind of provider is set."""
    with _TRACE_LOCK:
        if _INSTALLED:
            return
        trace = load_extra("opentelemetry.trace", "`traces: opentelemetry`")
        sdk = load_extra("opentelemetry.sdk.trace", "`traces: opentelemetry`")
        provider = trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider):
            provider = sdk.TracerProvider()
            trace.set_tracer_provider(provider)
            provider = trace.get_tracer_provider()
        if not isinstance(provider, sdk.TracerProvider):
            raise ConfigError(f"`traces: opentelemetry` needs opentelemetry-sdk's TracerProvider as the process's "
                              f"tracer provider; it is a {type(provider).__name__}")

        class Collecting(sdk.SpanProcessor):  # type: ignore[name-defined]
            """Hands each finished span to the collector of the reply it belongs to (no export)."""

            def on_start(self, span: Any, parent_context: Any = None) -> None:
                collector = _COLLECTOR.get()
                if collector is not None:
                    with _TRACE_LOCK:
                        _BY_TRACE.setdefault(span.context.trace_id, collector)
                        collector.traces.add(span.context.trace_id)

            def on_end(self, span: Any) -> None:
                with _TRACE_LOCK:
                    collector = _BY_TRACE.get(span.context.trace_id)
                if collector is not None:
                    collector.add(span)

        provider.add_span_processor(Collecting())
        _INSTALLED.append(True)


@contextlib.contextmanager
def collecting() -> Iterator[SpanCollector]:
    """Collect the spans started in this context (and in their traces) until the block ends."""
    collector = SpanCollector()
    token = _COLLECTOR.set(collector)
    try:
        yield collector
    finally:
        _COLLECTOR.reset(token)
        with _TRACE_LOCK:
            for trace_id in collector.traces:
                if _BY_TRACE.get(trace_id) is collector:
                    del _BY_TRACE[trace_id]


@dataclass
class Traced:
    """What an app reply's spans say: its tool calls, model calls and usage, and the spans kept."""

    tool_calls: list[ToolCall] = field(default_factory=list)
    model_calls: list[ModelCall] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    dropped: int = 0

    def usage(self) -> dict[str | None, Usage]:
        """Tokens per model, from the model calls."""
        out: dict[str | None, Usage] = {}
        for call in self.model_calls:
            out.setdefault(call.model, Usage()).add(Usage(call.input_tokens, call.output_tokens))
        return out


def _attribute(value: Any) -> Any:
    """A span attribute as a result file can hold it: a number that is not finite or does not fit
    64 bits is kept as its text (no file may hold NaN, an infinity or a 400-digit integer)."""
    if isinstance(value, str):
        return cut(safe_text(value), MAX_ATTRIBUTE_CHARS)
    if isinstance(value, (list, tuple)):
        return [_attribute(v) for v in list(value)[:MAX_ATTRIBUTES]]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return value if is_json_number(value) else shown_number(value)
    return cut(str(value), MAX_ATTRIBUTE_CHARS)


def _tokens(span: str, name: str, attributes: dict[str, Any]) -> int:
    """A model span's token count: absent is 0; anything but an integer from 0 to MAX_TOKENS is an
    unusable reply, said in one line (a count of 10^400 would overflow the price)."""
    value = attributes.get(name)
    if value is None:
        return 0
    if not is_token_count(value):
        raise UnusableAnswer(f"OpenTelemetry span {cut(span, 100)!r}: {name} is {cut(str(value), 40)}, not a "
                             f"token count (an integer from 0 to {MAX_TOKENS:,})")
    return int(value)


def read_spans(collector: SpanCollector) -> Traced:
    """The collected spans, in start order, as transcript pieces (see the module docstring)."""
    spans = sorted(collector.spans, key=lambda s: (s.start_time or 0, s.context.span_id))
    first = spans[0].start_time or 0 if spans else 0
    traced = Traced(dropped=collector.dropped)
    for span in spans:
        attributes = {str(k): _attribute(v) for k, v in list((span.attributes or {}).items())[:MAX_ATTRIBUTES]}
        attributes = redact_data(attributes)
        operation = attributes.get("gen_ai.operation.name")
        if operation == "execute_tool" or "gen_ai.tool.name" in attributes:
            traced.tool_calls.append(_tool_call(span.name, attributes))
        elif operation in MODEL_OPERATIONS or "gen_ai.usage.input_tokens" in attributes:
            model = attributes.get("gen_ai.response.model") or attributes.get("gen_ai.request.model")
            traced.model_calls.append(ModelCall(model=cut(str(model), MAX_MODEL_CHARS) if model is not None else None,
                                                input_tokens=_tokens(span.name, "gen_ai.usage.input_tokens", attributes),
                                                output_tokens=_tokens(span.name, "gen_ai.usage.output_tokens",
                                                                      attributes)))
        status = getattr(getattr(span, "status", None), "status_code", None)
        parent = span.parent.span_id if span.parent is not None else None
        traced.spans.append(Span(
            name=cut(safe_text(span.name or ""), 200), span_id=f"{span.context.span_id:016x}",
            parent_id=f"{parent:016x}" if parent is not None else None,
            start_ms=round(((span.start_time or 0) - first) / 1e6, 3),
            duration_ms=round(((span.end_time or span.start_time or 0) - (span.start_time or 0)) / 1e6, 3),
            status=_STATUS.get(getattr(status, "name", ""), "unset"), attributes=attributes))
    return traced


def _tool_call(name: str, attributes: dict[str, Any]) -> ToolCall:
    """An `execute_tool` span as the tool call it records."""
    tool = attributes.get("gen_ai.tool.name") or (name or "").removeprefix("execute_tool").strip() or "?"
    arguments, _ = tool_arguments(attributes.get("gen_ai.tool.call.arguments"))
    result = attributes.get("gen_ai.tool.call.result")
    return ToolCall(tool=cut(str(tool), 200), arguments=safe_json(arguments),
                    outcome=None if result is None else str(result))
