"""Systems under test: a model endpoint, or the team's own app (a sync or async callable).

Both take the conversation so far (OpenAI-shaped user/assistant messages, no system prompt) and
return a `TargetReply`; the simulator does not care which one it talks to. Replies are bounded
(`--evalbench-max-reply-chars`, with a note in the transcript). App code is contained: it runs
under `--evalbench-timeout`, sync callables in a daemon thread (a hung app cannot block exit),
and anything it raises, `SystemExit` and `KeyboardInterrupt` included, is that item's error.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pytest_evalbench.base.errors import TargetError, UnusableAnswer
from pytest_evalbench.base.safe_text import cut, redact, redact_data
from pytest_evalbench.formats.spec import ToolCall
from pytest_evalbench.llm.engine import Engine, EngineSettings
from pytest_evalbench.llm.types import Endpoint, Usage, safe_text


@dataclass
class TargetReply:
    """What a target answered: text, and the tool calls it made on the way (if any)."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)


def bounded(reply: TargetReply, limit: int | None) -> TargetReply:
    """The reply, lone surrogates (which no file can hold) made U+FFFD and secrets masked, cut to
    `limit` characters, saying so in the transcript (the judge sees the note). Masked before the cut,
    so the cut cannot leave a key's prefix."""
    content = redact(safe_text(reply.content))
    calls = [ToolCall(tool=redact(c.tool), arguments=redact_data(c.arguments), outcome=redact_data(c.outcome))
             for c in reply.tool_calls]
    if content != reply.content or calls != reply.tool_calls:
        reply = TargetReply(content, calls)
    if not limit or len(reply.content) <= limit:
        return reply
    note = (f"\n[evalbench: reply truncated from {len(reply.content)} to {limit} characters; "
            "see --evalbench-max-reply-chars]")
    return TargetReply(reply.content[:limit] + note, reply.tool_calls)


class Target(Protocol):
    id: str
    model: str | None

    async def reply(self, messages: list[dict[str, Any]], *, sample: int, usage_by_phase: dict[str, Usage]
                    ) -> TargetReply: ...


class ModelTarget:
    """A chat model behind an OpenAI-compatible endpoint, with the benchmark's system prompt."""

    def __init__(self, target_id: str, endpoint: Endpoint, system_prompt: str, engine: Engine) -> None:
        self.id = target_id
        self.model: str | None = endpoint.model
        self.endpoint = endpoint
        self.system_prompt = system_prompt
        self.engine = engine

    async def reply(self, messages: list[dict[str, Any]], *, sample: int, usage_by_phase: dict[str, Usage]
                    ) -> TargetReply:
        sent = [{"role": "system", "content": self.system_prompt}, *messages]
        completion = await self.engine.complete(self.endpoint, sent, role="target", phase="simulate",
                                                sample=sample, usage_by_phase=usage_by_phase)
        if not (completion.content or "").strip():
            raise UnusableAnswer(f"target '{self.id}' returned an empty reply "
                                 f"(finish_reason={completion.finish_reason})")
        return bounded(TargetReply(content=completion.content or ""), self.engine.settings.max_reply_chars)


class AppTarget:
    """The team's own assistant: any callable `f(messages) -> str | dict | TargetReply`, sync or async.

    A dict may carry `content` and `tool_calls` (each `{tool|name, arguments, outcome?}`). Sync
    callables run in a worker thread so they do not block other conversations.
    """

    def __init__(self, target_id: str, app: Callable[..., Any], model: str | None = None,
                 settings: EngineSettings | None = None) -> None:
        self.id = target_id
        self.model = model
        self.app = app
        settings = settings or EngineSettings()
        self.timeout = settings.timeout or None
        self.max_reply_chars = settings.max_reply_chars

    async def reply(self, messages: list[dict[str, Any]], *, sample: int, usage_by_phase: dict[str, Usage]
                    ) -> TargetReply:
        history = [dict(m) for m in messages]
        try:
            raw = await asyncio.wait_for(self._call(history), self.timeout)
        except asyncio.TimeoutError:
            raise TargetError(self.id, f"no reply within {self.timeout:g}s (--evalbench-timeout)") from None
        return bounded(coerce_reply(self.id, raw), self.max_reply_chars)

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
    args = call.get("arguments", (call.get("function") or {}).get("arguments", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            args = {"_raw": args}
    return ToolCall(tool=str(name), arguments=args or {}, outcome=call.get("outcome"))
