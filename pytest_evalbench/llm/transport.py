"""One chat request through the official `openai` client, with errors classified.

The SDK's own retries are switched off (max_retries=0): the engine owns retry policy so that it
is bounded in count and total time, honours Retry-After and is visible in statistics.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from dataclasses import dataclass
from typing import Any

import openai

from .local_server import LocalServer
from .types import Completion, Endpoint


@dataclass(frozen=True)
class Failure:
    """A classified transport failure: whether to retry and how long the server asked to wait."""

    kind: str
    message: str
    retryable: bool
    retry_after: float | None = None
    connection: bool = False


def _retry_after(response: Any) -> float | None:
    try:
        value = response.headers.get("retry-after")
        return max(0.0, float(value)) if value is not None else None
    except (AttributeError, TypeError, ValueError):
        return None


def _transport_kind(exc: BaseException) -> str | None:
    """httpx/httpx2 transport errors can escape the SDK unwrapped (seen with openai 3.x + httpx2)."""
    for cls in type(exc).__mro__:
        if cls.__module__.startswith(("httpx", "httpcore")):
            if cls.__name__ == "TimeoutException":
                return "timeout"
            if cls.__name__ in ("TransportError", "NetworkError"):
                return "connection"
    return None


def _refused(chain: list[BaseException]) -> bool:
    """A refused or dropped connection somewhere in the cause chain.

    The aiohttp backend reports a refused connection as an httpx ConnectTimeout (and the SDK then
    as APITimeoutError); the chain still holds the real cause, which the circuit breaker needs.
    """
    return any(isinstance(e, ConnectionError) or type(e).__name__ in ("ClientConnectorError", "ServerDisconnectedError")
               for e in chain)


def _cause_chain(exc: BaseException) -> list[BaseException]:
    """The exception and its causes, innermost last (bounded: chains can be cyclic)."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(chain) < 8 and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def classify(exc: BaseException) -> Failure:
    """Map an exception from the SDK to a Failure (never leaks the request headers)."""
    chain = _cause_chain(exc)
    transport = "connection" if _refused(chain) else _transport_kind(exc)
    unreachable = Failure("connection error", f"cannot reach the endpoint ({type(chain[-1]).__name__})",
                          True, connection=True)
    if transport == "connection":
        return unreachable
    if isinstance(exc, (openai.APITimeoutError, TimeoutError)) or transport == "timeout":
        return Failure("timeout", "request timed out", True)
    if isinstance(exc, openai.APIConnectionError):
        return unreachable
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message = f"HTTP {status}: {_short(exc.message)}"
        if status == 429:
            return Failure("rate limited", message, True, _retry_after(exc.response))
        if status >= 500 or status in (408, 409):
            return Failure("server error", message, True, _retry_after(exc.response))
        return Failure("request rejected", message, False)
    if isinstance(exc, (openai.APIResponseValidationError, json.JSONDecodeError, ValueError, KeyError,
                        IndexError, AttributeError, TypeError)):
        return Failure("bad response", f"unusable HTTP 200 body ({type(exc).__name__})", True)
    return Failure("error", f"{type(exc).__name__}: {_short(str(exc))}", False)


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class OpenAITransport:
    """AsyncOpenAI clients for the engine's event loop, one per (base URL, key).

    The clients use the SDK's aiohttp backend (`openai[aiohttp]`): on the 2-core reference machine
    it costs about a third less CPU per request than the default httpx backend, and CPU is
    what limits a single pytest process at high concurrency. Requests go through the SDK's
    public `post()` with the request body as JSON (`cast_to=object`): the SDK still builds the
    request, authenticates and raises its typed errors, but skips its per-call type
    transformation and response models, which cost more CPU than the HTTP exchange itself.
    A role's `headers` go with each of its requests (not into the client, which is shared by
    every role with the same URL and key).
    httpx-level timeouts bound each phase; `timeout` also bounds the whole call, so a server
    that trickles bytes cannot hold a slot for ever.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._clients: dict[tuple[str | None, str | None], openai.AsyncOpenAI] = {}
        self._tls: ssl.SSLContext | None = None
        self.local = LocalServer()

    def client_for(self, base_url: str | None, api_key: str | None) -> openai.AsyncOpenAI:
        slot = (base_url, api_key)
        client = self._clients.get(slot)
        if client is None:
            if self._tls is None:
                self._tls = ssl.create_default_context()  # load the CA bundle once per run
            client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key or "no-key", timeout=self.timeout,
                                        max_retries=0, http_client=_http_client(self._tls, self.timeout))
            self._clients[slot] = client
        return client

    async def complete(self, endpoint: Endpoint, body: dict[str, Any]) -> Completion:
        if endpoint.provider == "local":
            client = self.client_for(await asyncio.to_thread(self.local.ensure_started), None)
        else:
            client = self.client_for(endpoint.base_url, endpoint.api_key)
        options: openai.RequestOptions = {"headers": endpoint.headers} if endpoint.headers else {}
        request = client.post("/chat/completions", body=body, cast_to=object, options=options)
        return parse_completion(await asyncio.wait_for(request, self.timeout + 1.0))

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()
        await asyncio.to_thread(self.local.stop)


def _http_client(tls: ssl.SSLContext, timeout: float) -> Any:
    """The SDK's aiohttp-backed client when `openai[aiohttp]` is installed, else its httpx default."""
    try:
        return openai.DefaultAioHttpClient(verify=tls, timeout=timeout)
    except RuntimeError:  # the extra is missing (a minimal install): same behaviour, more CPU
        return openai.DefaultAsyncHttpxClient(verify=tls, timeout=timeout)


def parse_completion(data: Any) -> Completion:
    """An OpenAI chat.completion JSON body -> Completion; anything else raises (bad response)."""
    choice = data["choices"][0]
    message = choice["message"]
    tool_calls = None
    if message.get("tool_calls"):
        tool_calls = [{"id": c.get("id"), "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                      for c in message["tool_calls"]]
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise TypeError("message content is not a string")
    usage = data.get("usage") or {}
    return Completion(content=content, tool_calls=tool_calls, finish_reason=choice.get("finish_reason"),
                      input_tokens=int(usage.get("prompt_tokens") or 0),
                      output_tokens=int(usage.get("completion_tokens") or 0))
