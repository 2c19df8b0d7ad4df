"""Systems under test: a model endpoint, or the team's own app (a sync or async callable).

Both take the conversation so far (OpenAI-shaped user/assistant messages, no system prompt) and
return a `TargetReply`; the simulator does not care which one it talks to.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .errors import TargetError, UnusableAnswer
from .llm.engine import Engine
from .llm.types import Endpoint, Usage
from .spec import ToolCall


@dataclass
class TargetReply:
    """What a target answered: text, and the tool calls it made on the way (if any)."""

    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)


class Target(Protocol):
    id: str
    model: str | None

    async def reply(self, messages: list[dict[str, Any]], *, sample: int, ledger: dict[str, Usage]
                    ) -> TargetReply: ...


class ModelTarget:
    """A chat model behind an OpenAI-compatible endpoint, with the benchmark's system prompt."""

    def __init__(self, target_id: str, endpoint: Endpoint, system_prompt: str, engine: Engine) -> None:
        self.id = target_id
        self.model: str | None = endpoint.model
        self.endpoint = endpoint
        self.system_prompt = system_prompt
        self.engine = engine

    async def reply(self, messages: list[dict[str, Any]], *, sample: int, ledger: dict[str, Usage]
                    ) -> TargetReply:
        sent = [{"role": "system", "content": self.system_prompt}, *messages]
        completion = await self.engine.complete(self.endpoint, sent, role="target", phase="simulate",
                                                sample=sample, ledger=ledger)
        if not (completion.content or "").strip():
            raise UnusableAnswer(f"target '{self.id}' returned an empty reply "
                                 f"(finish_reason={completion.finish_reason})")
        return TargetReply(content=completion.content or "")


class AppTarget:
    """The team's own assistant: any callable `f(messages) -> str | dict | TargetReply`, sync or async.

    A dict may carry `content` and `tool_calls` (each `{tool|name, arguments, outcome?}`). Sync
    callables run in a worker thread so they do not block other conversations.
    """

    def __init__(self, target_id: str, app: Callable[..., Any], model: str | None = None) -> None:
        self.id = target_id
        self.model = model
        self.app = app

    async def reply(self, messages: list[dict[str, Any]], *, sample: int, ledger: dict[str, Usage]
                    ) -> TargetReply:
        history = [dict(m) for m in messages]
        try:
            if inspect.iscoroutinefunction(self.app) or inspect.iscoroutinefunction(
                    getattr(self.app, "__call__", None)):
                raw = await self.app(history)
            else:
                raw = await asyncio.to_thread(self.app, history)
                if inspect.isawaitable(raw):
                    raw = await raw
        except Exception as exc:
            raise TargetError(self.id, "".join(traceback.format_exception(exc)).rstrip()) from None
        return coerce_reply(self.id, raw)


def coerce_reply(target_id: str, raw: Any) -> TargetReply:
    """Accept the reply shapes documented for app targets; anything else is the app's error."""
    if isinstance(raw, TargetReply):
        return raw
    if isinstance(raw, str):
        return TargetReply(raw)
    if isinstance(raw, dict) and isinstance(raw.get("content"), str):
        calls = []
        for call in raw.get("tool_calls") or []:
            name = call.get("tool") or call.get("name") or (call.get("function") or {}).get("name")
            args = call.get("arguments", (call.get("function") or {}).get("arguments", {}))
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except ValueError:
                    args = {"_raw": args}
            calls.append(ToolCall(tool=str(name), arguments=args or {}, outcome=call.get("outcome")))
        return TargetReply(raw["content"], calls)
    raise TargetError(target_id, f"returned {type(raw).__name__}; expected str, TargetReply or "
                      "{'content': str, 'tool_calls': [...]}")
