"""The HTTP client of a streamable-HTTP MCP server, bounded as the stdio relay is: an answer sent as one
JSON body of more than the server's message bound is never held whole.

The MCP SDK reads a JSON body whole (`response.aread()`) before it parses it, so a server answering
300 MB would cost the run 300 MB before `tools.max_result_chars` could cut it. `BoundedClient` reads
such a body itself, chunk by chunk (decoded: a compressed body is bounded by what it expands to), and
from the first byte over the bound drops it: the request it answered gets the JSON-RPC error the relay
gives (`mcp_relay.refusal`, naming the bound); so does a body nested deeper than the relay's
MAX_DEPTH. Server-sent events are bounded by the SDK's own `max_sse_event_size`, which the
connection sets to the same bound. Needs the [agents] extra (`httpx2`):
imported only when a benchmark has an MCP server with a `url`.
"""

from __future__ import annotations

from typing import Any

import httpx2

from pytest_evalbench.kinds.mcp_relay import DEEP, EDGE, refusal, too_deep


class BoundedClient(httpx2.AsyncClient):
    """An `httpx2.AsyncClient` whose JSON bodies are at most `max_message` bytes (see the module docstring)."""

    def __init__(self, max_message: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_message = max_message

    async def send(self, request: httpx2.Request, *args: Any, **kwargs: Any) -> httpx2.Response:
        stream = kwargs.pop("stream", False)
        response = await super().send(request, *args, stream=True, **kwargs)
        if not response.headers.get("content-type", "").lower().startswith("application/json"):
            if not stream:  # what `send` without streaming does
                try:
                    await response.aread()
                except BaseException:
                    await response.aclose()
                    raise
            return response
        limit = self.max_message
        body = bytearray()
        size = _declared(response)
        if size <= limit:
            try:
                async for chunk in response.aiter_bytes():
                    size = len(body) + len(chunk)
                    if size > limit:
                        break
                    body += chunk
            finally:
                await response.aclose()
        else:
            await response.aclose()
        if size > limit:
            return httpx2.Response(200, headers={"content-type": "application/json"}, request=request,
                                   content=refusal(request.content[:EDGE], b"", size, limit))
        if too_deep(body):
            return httpx2.Response(200, headers={"content-type": "application/json"}, request=request,
                                   content=refusal(request.content[:EDGE], b"", size, limit, DEEP))
        headers = [(name, value) for name, value in response.headers.multi_items()
                   if name.lower() not in ("content-encoding", "content-length", "transfer-encoding")]
        return httpx2.Response(response.status_code, headers=headers, content=bytes(body), request=request,
                               extensions=response.extensions)


def _declared(response: httpx2.Response) -> int:
    """The body's length as its Content-Length header declares it (0 when it declares none or nonsense)."""
    text = response.headers.get("content-length", "")
    return int(text) if text.isdigit() and len(text) < 20 else 0
