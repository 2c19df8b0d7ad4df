"""Scripts for the fake server: the scripted answer (`Reply`), responders and helpers that build them.

A responder gets the parsed request JSON and returns what to answer; `by_model`, `sequence` and
`schema_answer` cover the common scripts (route on the model, answer in call order, the smallest
object a JSON Schema allows).
"""

from __future__ import annotations

import itertools
import json
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Union

__all__ = ["Reply", "Responder", "by_model", "schema_answer", "sequence"]


@dataclass
class Reply:
    """One scripted answer of the fake server.

    Every fault a real endpoint can produce is a field here, so a test states the fault it wants
    instead of monkeypatching the client.
    """

    content: str | None = ""
    tool_calls: list[dict[str, Any]] | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str = "stop"
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    raw_body: bytes | None = None
    delay: float | None = None
    drop_connection: bool = False
    endless: bool = False
    """Answer 200 with a chunked body that never ends (until the client hangs up): a hostile endpoint."""
    trickle: float | None = None
    """Seconds between the body's bytes (the head goes at once): an endpoint that keeps a call alive
    without ever letting a read time out."""
    logprobs: dict[str, Any] | None = None
    """The choice's `logprobs` object as OpenAI gives it (`{"content": [{"token", "logprob",
    "top_logprobs": [...]}]}`), e.g. from `verdict_logprobs`; None: the endpoint gives none."""
    cached_tokens: int | None = None
    """`usage.prompt_tokens_details.cached_tokens`: prompt tokens read from the provider's cache."""
    wire: bytes | None = None
    """Bytes written instead of an HTTP answer, then the connection closes: an endpoint that is not
    HTTP, cuts its answer short or announces a body it never sends."""


Responder = Callable[[dict[str, Any]], Union[Reply, str, dict[str, Any]]]
"""Gets the parsed request JSON; a str means Reply(content=str), a dict means JSON content."""


def echo_ok(request: dict[str, Any]) -> Reply:
    """Default responder: a fixed "ok" keeps tests that do not care about content short."""
    return Reply(content="ok")


def coerce(answer: Reply | str | dict[str, Any]) -> Reply:
    """Normalise what a responder returned, so responders can stay one-liners."""
    if isinstance(answer, Reply):
        return answer
    if isinstance(answer, str):
        return Reply(content=answer)
    if isinstance(answer, dict):
        return Reply(content=json.dumps(answer))
    raise TypeError(f"responder returned {type(answer).__name__}; expected Reply, str or dict")


def by_model(routes: dict[str, Responder], default: Responder | None = None) -> Responder:
    """Route on request["model"], so one server can play candidate and judge at the same time."""

    def route(request: dict[str, Any]) -> Reply | str | dict[str, Any]:
        model = request.get("model")
        responder = routes.get(model) if isinstance(model, str) else None
        if responder is None:
            responder = default
        if responder is None:
            return Reply(status=404, content=f"The model {model!r} does not exist")
        return responder(request)

    return route


def sequence(*replies: Reply | str | dict[str, Any] | Responder) -> Responder:
    """Answer with the given replies in call order, repeating the last one once exhausted.

    Thread-safe, so the order is the order in which requests reached the server. A callable item
    is invoked with the request, which lets a script mix fixed and computed answers.
    """
    if not replies:
        raise ValueError("sequence() needs at least one reply")
    lock = threading.Lock()
    position = [0]

    def next_reply(request: dict[str, Any]) -> Reply | str | dict[str, Any]:
        with lock:
            item = replies[min(position[0], len(replies) - 1)]
            position[0] += 1
        if callable(item):
            return item(request)
        return item

    return next_reply


def schema_answer(request: dict[str, Any]) -> dict[str, Any]:
    """Answer like a provider that enforces the JSON Schema in `response_format` and nothing more:
    the smallest valid object. Arrays get exactly `minItems` items (1 when the schema sets none),
    strings `minLength` characters (or a short distinct text), integers `minimum` (or 1), enums
    their first value. A client that needs more than its schema says will not get it."""
    root = ((request.get("response_format") or {}).get("json_schema") or {}).get("schema") or {}
    counter = itertools.count(1)

    def build(node: dict[str, Any]) -> Any:
        if "$ref" in node:
            return build(root.get("$defs", {})[node["$ref"].rsplit("/", 1)[-1]])
        for key in ("anyOf", "oneOf", "allOf"):
            if key in node:
                return build(node[key][0])
        if "enum" in node:
            return node["enum"][0]
        kind = node.get("type")
        if kind == "object":
            return {name: build(sub) for name, sub in node.get("properties", {}).items()}
        if kind == "array":
            return [build(node.get("items", {})) for _ in range(node.get("minItems", 1))]
        if kind == "integer":
            return int(node.get("minimum", 1))
        if kind == "number":
            return float(node.get("minimum", 1))
        if kind == "boolean":
            return False
        text = f"text {next(counter)}"
        return text.ljust(int(node.get("minLength", 0)), ".")

    return build(root)


def verdict_logprobs(answer: dict[str, Any], p_present: float) -> dict[str, Any]:
    """An OpenAI `logprobs` object for `answer` (a judge's JSON answer, serialised with json.dumps) whose
    `present` value token has P(true) = p_present among its top alternatives."""
    text = json.dumps(answer)
    head, value, tail = text.partition('"present": ')
    verdict = "true" if tail.startswith("true") else "false"
    rest = tail[len(verdict):]
    alternatives = [{"token": "true", "logprob": math.log(max(p_present, 1e-9))},
                    {"token": "false", "logprob": math.log(max(1 - p_present, 1e-9))}]
    tokens = [{"token": (head + value)[i:i + 8], "logprob": 0.0, "top_logprobs": []}
              for i in range(0, len(head + value), 8)]
    tokens += [{"token": verdict, "logprob": next(a["logprob"] for a in alternatives if a["token"] == verdict),
                "top_logprobs": alternatives}]
    if rest:
        tokens.append({"token": rest, "logprob": 0.0, "top_logprobs": []})
    return {"content": tokens}
