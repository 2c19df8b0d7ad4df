"""Systems under test: a model endpoint, or the team's own app (a sync or async callable).

Both take the conversation so far (OpenAI-shaped user/assistant messages, no system prompt) and
return a `TargetReply`; the simulator does not care which one it talks to. Replies are bounded
(`--evalbench-max-reply-chars`, with a note in the transcript). App code is contained: it runs
under `--evalbench-timeout`, sync callables in a daemon thread (a hung app cannot block exit),
and anything it raises, `SystemExit` and `KeyboardInterrupt` included, is that item's error.

A model target with `tools` runs a tool loop (`kinds/tools.py`): while the model asks for tool calls,
they run and their results go back to it, for at most `tools.max_rounds` rounds; the reply carries the
calls and the whole exchange, which later turns send again. An app target with `traces: opentelemetry`
reports nothing by hand: its spans give the reply's tool calls, model calls and token usage.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import inspect
import json
import threading
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pytest_evalbench.base.errors import TargetError, UnusableAnswer
from pytest_evalbench.base.safe_text import cut, redact, redact_data, truncated
from pytest_evalbench.formats.results import ModelCall, Span, ToolCall, tool_arguments
from pytest_evalbench.kinds.tools import ToolBox, ToolServerError, Traced, collecting, install_span_processor, read_spans
from pytest_evalbench.llm.engine import Engine, EngineSettings
from pytest_evalbench.llm.types import Endpoint, Usage, safe_json, safe_text

T = TypeVar("T")


@dataclass
class TargetReply:
    """What a target answered: text, and the tool calls it made on the way (if any)."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    exchange: list[dict[str, Any]] | None = None
    """A model target with tools: the messages of this reply (tool calls and results, then the reply),
    which the conversation's later turns send again."""
    model_calls: list[ModelCall] = field(default_factory=list)
    """An app traced with OpenTelemetry: its model calls."""
    spans: list[Span] = field(default_factory=list)
    """An app traced with OpenTelemetry: its spans (bounded), and how many more were dropped."""
    spans_dropped: int = 0


def bounded(reply: TargetReply, limit: int | None) -> TargetReply:
    """The reply, lone surrogates (which no file can hold) made U+FFFD and secrets masked, cut to
    `limit` characters, saying so in the transcript (the judge sees the note). Masked before the cut,
    so the cut cannot leave a key's prefix."""
    content = redact(safe_text(reply.content))
    calls = [ToolCall(tool=redact(safe_text(c.tool)), arguments=redact_data(safe_json(c.arguments)),
                      outcome=None if c.outcome is None else truncated(redact(safe_text(c.outcome)), limit, "tool outcome"))
             for c in reply.tool_calls]
    if content != reply.content or calls != reply.tool_calls:
        reply = dataclasses.replace(reply, content=content, tool_calls=calls)
    if not limit or len(reply.content) <= limit:
        return reply
    return dataclasses.replace(reply, content=truncated(reply.content, limit, "reply", "--evalbench-max-reply-chars"))


class Target(Protocol):
    id: str
    model: str | None

    async def reply(self, messages: list[dict[str, Any]], *, sample: int, usage_by_phase: dict[str, Usage]
                    ) -> TargetReply: ...


class ModelTarget:
    """A chat model behind an OpenAI-compatible endpoint, with the benchmark's system prompt (and
    its tools, when it has any)."""

    def __init__(self, target_id: str, endpoint: Endpoint, system_prompt: str, engine: Engine,
                 tools: ToolBox | None = None) -> None:
        self.id = target_id
        self.model: str | None = endpoint.model
        self.endpoint = endpoint
        self.system_prompt = system_prompt
        self.engine = engine
        self.tools = tools

    async def reply(self, messages: list[dict[str, Any]], *, sample: int, usage_by_phase: dict[str, Usage]
                    ) -> TargetReply:
        sent = [{"role": "system", "content": self.system_prompt}, *messages]
        if self.tools is not None:
            return await self._with_tools(sent, sample, usage_by_phase, self.tools)
        completion = await self.engine.complete(self.endpoint, sent, role="target", phase="simulate",
                                                sample=sample, usage_by_phase=usage_by_phase)
        if not (completion.content or "").strip():
            raise UnusableAnswer(f"target '{self.id}' returned an empty reply "
                                 f"(finish_reason={completion.finish_reason})")
        return bounded(TargetReply(content=completion.content or ""), self.engine.settings.max_reply_chars)

    async def _with_tools(self, sent: list[dict[str, Any]], sample: int, usage_by_phase: dict[str, Usage],
                          tools: ToolBox) -> TargetReply:
        """The tool loop: the model's tool calls run and their results go back to it until it answers
        without one, for at most `tools.max_rounds` rounds (then the reply says so)."""
        offered = await self._tool_call(tools.offered())
        exchange: list[dict[str, Any]] = []
        calls: list[ToolCall] = []
        rounds = tools.config.max_rounds
        for round_ in range(rounds + 1):
            completion = await self.engine.complete(self.endpoint, [*sent, *exchange], role="target", phase="simulate",
                                                    sample=sample, tools=offered, usage_by_phase=usage_by_phase)
            if not completion.tool_calls:
                content = completion.content or ""
                break
            if round_ == rounds:
                content = ((completion.content or "") + f"\n[evalbench: the target asked for more tool calls after "
                           f"{rounds} rounds (tools.max_rounds); its reply ends here]").lstrip("\n")
                break
            ids = [str(c.get("id") or f"call_{round_}_{i}") for i, c in enumerate(completion.tool_calls)]
            exchange.append({"role": "assistant", "content": completion.content, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": str(c.get("name")),
                                                                 "arguments": _arguments_text(c.get("arguments"))}}
                for call_id, c in zip(ids, completion.tool_calls)]})
            for index, (call_id, call) in enumerate(zip(ids, completion.tool_calls)):
                made, message = await self._tool_call(tools.run(call, call_id, completion.key, index))
                calls.append(made)
                exchange.append(message)
        if not content.strip() and not calls:
            raise UnusableAnswer(f"target '{self.id}' returned an empty reply (finish_reason={completion.finish_reason})")
        reply = bounded(TargetReply(content=content, tool_calls=calls), self.engine.settings.max_reply_chars)
        reply.exchange = [*exchange, {"role": "assistant", "content": reply.content}]
        return reply

    async def _tool_call(self, work: Awaitable[T]) -> T:
        """A tool server's failure is this item's error, naming the target."""
        try:
            return await work
        except ToolServerError as exc:
            raise TargetError(self.id, str(exc)) from None


class AppTarget:
    """The team's own assistant: any callable `f(messages) -> str | dict | TargetReply`, sync or async.

    A dict may carry `content` and `tool_calls` (each `{tool|name, arguments, outcome?}`). Sync
    callables run in a worker thread so they do not block other conversations.
    """

    def __init__(self, target_id: str, app: Callable[..., Any], model: str | None = None,
                 settings: EngineSettings | None = None, *, engine: Engine | None = None, traced: bool = False) -> None:
        self.id = target_id
        self.model = model
        self.app = app
        settings = settings or EngineSettings()
        self.timeout = settings.timeout or None
        self.max_reply_chars = settings.max_reply_chars
        self.engine = engine
        self.traced = traced
        """`traces: opentelemetry`: the app's spans give its tool calls, model calls and usage."""
        if traced:
            install_span_processor()

    async def reply(self, messages: list[dict[str, Any]], *, sample: int, usage_by_phase: dict[str, Usage]
                    ) -> TargetReply:
        history = [dict(m) for m in messages]
        with collecting() if self.traced else contextlib.nullcontext() as collector:
            try:
                raw = await asyncio.wait_for(self._call(history), self.timeout)
            except asyncio.TimeoutError:
                raise TargetError(self.id, f"no reply within {self.timeout:g}s (--evalbench-timeout)") from None
        reply = coerce_reply(self.id, raw)
        if collector is not None:
            reply = self._traced(reply, read_spans(collector), usage_by_phase)
        return bounded(reply, self.max_reply_chars)

    def _traced(self, reply: TargetReply, traced: Traced, usage_by_phase: dict[str, Usage]) -> TargetReply:
        """The reply with what its spans say: the tool calls (unless the app reported its own), the
        model calls and the spans; their tokens count as this item's `simulate` usage, priced."""
        for model, usage in traced.usage().items():
            if self.engine is not None:
                self.engine.count_usage(model or "", usage.input_tokens, usage.output_tokens, phase="simulate",
                                        role="app", usage_by_phase=usage_by_phase)
            else:
                usage_by_phase.setdefault("simulate", Usage()).add(usage)
        return dataclasses.replace(reply, tool_calls=reply.tool_calls or traced.tool_calls,
                                   model_calls=traced.model_calls, spans=traced.spans, spans_dropped=traced.dropped)

    async def _call(self, history: list[dict[str, Any]]) -> Any:
        """Run the app once; whatever it raises (BaseException too) becomes a `TargetError` here,
        inside the coroutine, so it can never escape into the engine's event loop."""
        try:
            if inspect.iscoroutinefunction(self.app) or inspect.iscoroutinefunction(
                    getattr(self.app, "__call__", None)):  # noqa: B004 (an async __call__)
                raw = await self.app(history)
            else:
                raw = await in_daemon_thread(self.app, history)
            if inspect.isawaitable(raw):
                raw = await raw
            return raw
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            raise TargetError(self.id, "".join(traceback.format_exception(exc)).rstrip()) from None


async def in_daemon_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` in a daemon thread (unlike `asyncio.to_thread`, a call that never returns does not
    block interpreter exit); its result or any exception it raised, BaseException included."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(result: Any, exc: BaseException | None) -> None:
        if future.done():  # timed out and cancelled meanwhile
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)

    def run() -> None:
        try:
            result, error = context.run(fn, *args), None
        except BaseException as exc:
            result, error = None, exc
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:
            pass  # the engine loop is already closed: nobody waits for this answer

    threading.Thread(target=run, name="evalbench-app-call", daemon=True).start()
    return await future


def coerce_reply(target_id: str, raw: Any) -> TargetReply:
    """Accept the reply shapes documented for app targets; anything else is the app's error."""
    if isinstance(raw, TargetReply):
        return raw
    if isinstance(raw, str):
        return TargetReply(raw)
    if isinstance(raw, dict) and isinstance(raw.get("content"), str):
        try:
            return TargetReply(raw["content"], [tool_call(call) for call in raw.get("tool_calls") or []])
        except (AttributeError, TypeError, ValueError) as exc:
            raise TargetError(target_id, f"returned malformed tool_calls ({type(exc).__name__}: "
                              f"{cut((str(exc).splitlines() or [''])[0], 200)}); expected a list of "
                              "{'tool': str, 'arguments': {...}, 'outcome'?: ...}") from None
    raise TargetError(target_id, f"returned {type(raw).__name__}; expected str, TargetReply or "
                      "{'content': str, 'tool_calls': [...]}")


def tool_call(call: dict[str, Any]) -> ToolCall:
    """One app-reported tool call in any of the documented shapes."""
    name = call.get("tool") or call.get("name") or (call.get("function") or {}).get("name")
    args, _ = tool_arguments(call.get("arguments", (call.get("function") or {}).get("arguments")))
    return ToolCall(tool=str(name), arguments=args, outcome=call.get("outcome"))


def _arguments_text(arguments: Any) -> str:
    """A tool call's arguments as the chat-completions format sends them back: a JSON text."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments if arguments is not None else {})
