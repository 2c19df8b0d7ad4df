"""The four requests of an OpenAI-compatible Batch API, as raw HTTP over one aiohttp session: upload an
input file (`POST /files`, multipart, purpose `batch`), create a batch (`POST /batches`), retrieve it
(`GET /batches/{id}`) and read an output or error file (`GET /files/{id}/content`).

Spoken directly rather than through the openai SDK, as the default chat transport is: importing the
SDK and building its client is the largest part of a batched run's start (and holds the interpreter
while it runs, even in a thread), and each poll through its typed models costs more CPU than the
exchange. The same rules as `transport.AiohttpTransport`: the role's URL (without userinfo), key and
headers, the environment's proxy (never a loopback one), no redirects (`RedirectRefused`), every
body capped as received and as decompressed, `timeout` bounding each whole request, an error status
raised as `HTTPStatusError`. Ids the provider sends back are checked before they go into a path.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote

from pytest_evalbench.llm.transport import (
    ACCEPT_ENCODING,
    DEFAULT_BASE_URL,
    HTTPStatusError,
    RedirectRefused,
    body_json,
    check_length,
    decoded,
    proxy_for,
    read_capped,
    without_userinfo,
)
from pytest_evalbench.llm.types import Endpoint

OBJECT_BYTES = 1024 * 1024
"""Cap on a file or batch object's body (a few hundred bytes in practice)."""
_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,199}$")


def checked_id(value: Any, what: str) -> str:
    """An id from the provider, safe in a URL path; ValueError naming what it was otherwise."""
    if not isinstance(value, str) or not _ID.match(value):
        raise ValueError(f"the provider's {what} id is not a plain id")
    return value


class BatchAPI:
    """The Batch API requests of one engine, over one aiohttp session opened on the engine loop."""

    def __init__(self, timeout: float, max_bytes: int) -> None:
        self.timeout = timeout
        self.max_bytes = max_bytes
        """Cap on an output or error file as read."""
        self._session: Any = None
        self._timeout: Any = None

    def _open(self) -> Any:
        import aiohttp

        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        self._timeout = aiohttp.ClientTimeout(total=self.timeout)
        self._session = aiohttp.ClientSession(connector=connector, skip_auto_headers=("User-Agent",),
                                              raise_for_status=False, auto_decompress=False)
        return self._session

    async def upload(self, endpoint: Endpoint, data: bytes) -> str:
        """The id of a new input file holding `data` (JSON lines)."""
        import aiohttp

        form = aiohttp.FormData()
        form.add_field("purpose", "batch")
        form.add_field("file", data, filename="evalbench-batch.jsonl", content_type="application/jsonl")
        made = body_json(await self._request("POST", endpoint, "/files", form, OBJECT_BYTES))
        return checked_id(made.get("id") if isinstance(made, dict) else None, "file")

    async def create(self, endpoint: Endpoint, input_file_id: str) -> Any:
        """The batch object of a new batch over an uploaded input file."""
        request = {"input_file_id": input_file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
        return body_json(await self._request("POST", endpoint, "/batches", json.dumps(request).encode(),
                                             OBJECT_BYTES, json_body=True))

    async def retrieve(self, endpoint: Endpoint, batch_id: str) -> Any:
        """The batch object as it is now."""
        return body_json(await self._request("GET", endpoint, f"/batches/{quote(checked_id(batch_id, 'batch'))}",
                                             None, OBJECT_BYTES))

    async def content(self, endpoint: Endpoint, file_id: str) -> bytes:
        """An output or error file's bytes, within the cap."""
        return await self._request("GET", endpoint, f"/files/{quote(checked_id(file_id, 'file'))}/content",
                                   None, self.max_bytes)

    async def _request(self, method: str, endpoint: Endpoint, path: str, data: Any, limit: int, *,
                       json_body: bool = False) -> bytes:
        session = self._session or self._open()
        url = without_userinfo(endpoint.base_url or DEFAULT_BASE_URL).rstrip("/") + path
        headers = {"Authorization": f"Bearer {endpoint.api_key or 'no-key'}", "Accept-Encoding": ACCEPT_ENCODING}
        if json_body:
            headers["Content-Type"] = "application/json"
        if endpoint.headers:  # the role's own headers, as with its synchronous calls
            headers.update(endpoint.headers)
        async with session.request(method, url, data=data, headers=headers, timeout=self._timeout,
                                   proxy=proxy_for(url), allow_redirects=False) as response:
            check_length(response.content_length, limit)
            raw = await read_capped(response.content.iter_any(), limit)
            lowered = {k.lower(): v for k, v in response.headers.items()}
        status = response.status
        if 300 <= status < 400:
            raise RedirectRefused(status, url, lowered.get("location"))
        raw = decoded(raw, lowered.get("content-encoding"), limit)
        if status >= 400:
            raise HTTPStatusError(status, _message(raw, response.reason), lowered)
        return raw

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _message(raw: bytes, reason: str | None) -> str:
    """The `error.message` of an OpenAI-style error body, else the status line's reason."""
    try:
        error = body_json(raw).get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if isinstance(message, str) and message:
            return message[:300]
    except (ValueError, AttributeError):
        pass
    return reason or "error"
