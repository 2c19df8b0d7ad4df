"""One chat request over HTTP, and its failures classified.

Two transports share one interface (`complete(endpoint, body) -> Completion`, `aclose()`):

- `AiohttpTransport` (the default, `aiohttp`): raw JSON over one shared aiohttp session, the request
  body serialised once (the engine's encoding), the response parsed once into a `Completion`. Kept
  beside the SDK because it costs markedly less CPU per request, which is what bounds one pytest
  process at high concurrency (docs/performance.md has the measurement, `tests/perf/transports.py`).
- `OpenAITransport` (`openai`): the official SDK, for endpoints that need its specifics.

Neither retries (the SDK's retries are switched off): the engine owns retry policy so that it is bounded
in count and total time, honours Retry-After and is visible in statistics. Neither follows a redirect (a
3xx is a `RedirectRefused` naming the status and the origin it points to, never its path or query): a
request, with its API key and headers, only ever goes to the endpoint URL the run was given. Every
answer's body is capped (`max_bytes`, as received and as decompressed, gzip and deflate only): over it,
the call fails with `ResponseTooLarge`, which is not retried. Both send a request through the proxy the
environment names for its URL (`proxy_for`), never a loopback one. `openai` and `aiohttp` are imported
when a transport is first used.

Failures are classified (`classify`): what failed (rate limited, server error, timeout, connection, bad
response, rejected, too large), whether asking again can help, and how long the server asked to wait.
Both transports raise into `classify`, so the retry policy sees one vocabulary; messages never carry
request headers, and endpoint text in them is made safe and redacted.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
import urllib.request
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union
from urllib.parse import urljoin, urlsplit, urlunsplit

import orjson

from pytest_evalbench.base.errors import InputError
from pytest_evalbench.base.json_input import parse_json
from pytest_evalbench.base.numbers import MAX_TOKENS, is_logprob, is_token_count
from pytest_evalbench.base.safe_text import redact
from pytest_evalbench.llm.costs import cache_tokens
from pytest_evalbench.llm.local_model import LocalServer
from pytest_evalbench.llm.shared_limits import retry_after
from pytest_evalbench.llm.types import (
    MAX_RESPONSE_BYTES,
    Completion,
    Endpoint,
    safe_json,
    safe_text,
)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
TRANSPORTS = ("aiohttp", "openai")
"""The names `--evalbench-transport` takes; the first is the default."""
__all__ = ["TRANSPORTS", "AiohttpTransport", "Failure", "HTTPStatusError", "OpenAITransport", "RedirectRefused",
           "Transport", "classify", "make_transport", "parse_completion", "proxy_for", "wire_json"]


def wire_json(body: dict[str, Any]) -> bytes:
    """A request body as sent: compact UTF-8 by orjson, what it refuses (an integer past 64 bits) by the
    standard library. The cache key is made from `cache.canonical_json`, never from these bytes."""
    try:
        return orjson.dumps(body)
    except TypeError:
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _size(count: int) -> str:
    """A byte count for a message: MiB from one MiB up."""
    return f"{count / (1 << 20):.1f} MiB" if count >= 1 << 20 else f"{count} bytes"


async def read_capped(chunks: Any, limit: int) -> bytes:
    """All of an async byte stream, or `ResponseTooLarge` once it passes `limit` bytes."""
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise ResponseTooLarge(f"body longer than the cap of {_size(limit)}")
        parts.append(chunk)
    return b"".join(parts)


def check_length(length: int | None, limit: int) -> None:
    """`ResponseTooLarge` when a Content-Length announces a body over the cap, before any of it is read."""
    if length is not None and length > limit:
        raise ResponseTooLarge(f"Content-Length {length} over the cap of {limit} bytes")


_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """A gzip or deflate body, at most `limit` bytes of it (`ResponseTooLarge` beyond: a
    compression bomb never gets more memory than the cap)."""
    inflater = zlib.decompressobj(_WBITS[encoding])
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise ProtocolError(f"bad {encoding} body: {exc}") from None
    if len(out) > limit:
        raise ResponseTooLarge(f"{encoding} body inflates past the cap of {_size(limit)}")
    if not inflater.eof:
        raise ProtocolError(f"bad {encoding} body: truncated")
    return out


def decoded(raw: bytes, encoding: str | None, limit: int) -> bytes:
    """A body read with automatic decompression off, decompressed within `limit`."""
    encoding = (encoding or "identity").strip().lower()
    if encoding in _WBITS and raw:
        return decompress(raw, encoding, limit)
    if encoding not in ("identity", *_WBITS):
        raise ProtocolError(f"unsupported Content-Encoding {encoding[:40]!r}")
    return raw


ACCEPT_ENCODING = "gzip, deflate"
"""The encodings asked for: the ones every answer is decompressed from within its cap."""
_BODY = Path("the answer's body")  # named in a refused body's error (made once, not per answer)


def body_json(raw: bytes) -> Any:
    """An answer's body by the one JSON reader of outside data (nesting, numbers, duplicate keys
    bounded); ValueError saying why, which the retry policy classifies as a bad response."""
    try:
        return parse_json(raw.decode("utf-8"), _BODY, surrogates=True)
    except InputError as exc:
        raise BadBody(str(exc)) from None


class BadBody(ValueError):
    """An answer's body the JSON reader refused (nesting, a number no file holds, a key given twice): a
    bad response, named in one line."""


def _error_message(raw: bytes, reason: str | None) -> str:
    """The `error.message` of an OpenAI-style error body, else the status line's reason."""
    try:
        error = body_json(raw).get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if isinstance(message, str) and message:
            return message
    except (ValueError, AttributeError):
        pass
    return reason or "error"


def without_userinfo(url: str) -> str:
    """`url` without `user:password@`: the API key goes in the Authorization header, and credentials
    in the URL are never sent (both clients would refuse them next to that header, or send them as
    Basic auth in its place)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def proxy_for(url: str) -> str | None:
    """The proxy the environment (HTTP_PROXY, HTTPS_PROXY, NO_PROXY, as urllib reads them) names
    for `url`; never one for a loopback endpoint (a local model server, the test server)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if host in LOOPBACK:
        return None

    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(host):
        return None
    return proxy


class AiohttpTransport:
    """Raw JSON over one shared aiohttp session (created on the engine loop at the first call),
    through the proxy the environment names for the URL, if any. URL and headers are built once
    per endpoint; the answer is read once (error status, rate headers, completion).

    `timeout` bounds the whole call (connect, send, wait, read), so a server that trickles bytes
    cannot hold a slot for ever. The connector has no connection cap of its own: the engine's
    semaphore is the one limit on requests in flight.
    """

    def __init__(self, timeout: float, max_bytes: int = MAX_RESPONSE_BYTES) -> None:
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.tls: ssl.SSLContext | None = None
        """Certificates to trust (None: aiohttp's default context, the system's CAs); read when the
        session opens."""
        self.local = LocalServer()
        self._urls: dict[str | None, str] = {}
        self._headers: dict[str | None, dict[str, str]] = {}
        self._proxies: dict[str, str | None] = {}
        self._session: Any = None
        self._timeout: Any = None

    def _open(self) -> Any:
        import aiohttp

        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, ssl=True if self.tls is None else self.tls)
        self._timeout = aiohttp.ClientTimeout(total=self.timeout)
        self._session = aiohttp.ClientSession(connector=connector, skip_auto_headers=("User-Agent",),
                                              raise_for_status=False, auto_decompress=False)
        return self._session

    async def _target(self, endpoint: Endpoint) -> tuple[str, dict[str, str]]:
        if endpoint.provider == "local":
            base: str | None = await asyncio.to_thread(self.local.ensure_started, endpoint.model)
        else:
            base = endpoint.base_url
        url = self._urls.get(base)
        if url is None:
            url = self._urls[base] = without_userinfo(base or DEFAULT_BASE_URL).rstrip("/") + "/chat/completions"
        headers = self._headers.get(endpoint.api_key)
        if headers is None:
            headers = self._headers[endpoint.api_key] = {
                "Authorization": f"Bearer {endpoint.api_key or 'no-key'}", "Content-Type": "application/json",
                "Accept": "application/json", "Accept-Encoding": ACCEPT_ENCODING}
        if endpoint.headers:  # the role's own headers (User-Agent, team keys), per request
            headers = {**headers, **endpoint.headers}
        return url, headers

    async def complete(self, endpoint: Endpoint, body: dict[str, Any],
                       headers_out: dict[str, str] | None = None, *, data: bytes | None = None) -> Completion:
        """One chat completion; `headers_out` receives the response's rate-limit headers; `data` is
        `body` already encoded as JSON (the engine's canonical encoding, also hashed into the cache key)."""
        session = self._session or self._open()
        url, headers = await self._target(endpoint)
        proxy = self._proxies[url] if url in self._proxies else self._proxies.setdefault(url, proxy_for(url))
        async with session.post(url, data=wire_json(body) if data is None else data, headers=headers,
                                timeout=self._timeout, proxy=proxy, allow_redirects=False) as response:
            check_length(response.content_length, self.max_bytes)
            raw = await read_capped(response.content.iter_any(), self.max_bytes)
            lowered = {k.lower(): v for k, v in response.headers.items()}
        status = response.status
        if 300 <= status < 400:
            raise RedirectRefused(status, url, lowered.get("location"))
        raw = decoded(raw, lowered.get("content-encoding"), self.max_bytes)
        if status >= 400:
            raise HTTPStatusError(status, _error_message(raw, response.reason), lowered)
        if headers_out is not None:  # what the answer says about the endpoint's limits (shared_limits.py)
            headers_out.update((k, v) for k, v in lowered.items() if k.startswith("x-ratelimit-"))
        return parse_completion(body_json(raw))

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        await asyncio.to_thread(self.local.stop)


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

    def __init__(self, timeout: float, max_bytes: int = MAX_RESPONSE_BYTES) -> None:
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._clients: dict[tuple[str | None, str | None], Any] = {}
        self.tls: ssl.SSLContext | None = None
        """Certificates to trust (None: the system's CAs, loaded once per run at the first client)."""
        self.local = LocalServer()

    def client_for(self, base_url: str | None, api_key: str | None) -> Any:
        import openai

        slot = (base_url, api_key)
        client = self._clients.get(slot)
        if client is None:
            if self.tls is None:
                self.tls = ssl.create_default_context()
            base_url = without_userinfo(base_url or DEFAULT_BASE_URL)
            http_client = _http_client(self.tls, self.timeout, self.max_bytes, proxy_for(base_url))
            client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key or "no-key", timeout=self.timeout,
                                        max_retries=0, http_client=http_client)
            self._clients[slot] = client
        return client

    async def complete(self, endpoint: Endpoint, body: dict[str, Any],
                       headers_out: dict[str, str] | None = None, *, data: bytes | None = None) -> Completion:
        """One chat completion (rate headers of successful answers are not read through the SDK;
        the SDK encodes `body` itself, so `data` is unused)."""
        if endpoint.provider == "local":
            client = self.client_for(await asyncio.to_thread(self.local.ensure_started, endpoint.model), None)
        else:
            client = self.client_for(endpoint.base_url, endpoint.api_key)
        options: dict[str, Any] = {"headers": endpoint.headers} if endpoint.headers else {}
        request = client.post("/chat/completions", body=body, cast_to=object, options=options)
        return parse_completion(await asyncio.wait_for(request, self.timeout + 1.0))

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()
        await asyncio.to_thread(self.local.stop)


def _http_client(tls: ssl.SSLContext, timeout: float, max_bytes: int, proxy: str | None) -> Any:
    """The SDK's aiohttp-backed client when `openai[aiohttp]` is installed, else its httpx default;
    redirects not followed (the SDK's default follows them, API key and all), every answer read
    through `_capped` transports. The environment is not read (`trust_env=False`: no proxy of its
    own choosing, no .netrc credentials): `proxy` is what `proxy_for` names for the client's URL,
    so both transports send a request the same way."""
    import openai

    options: dict[str, Any] = {"verify": tls, "timeout": timeout, "follow_redirects": False, "trust_env": False,
                               "proxy": proxy}
    try:
        client = openai.DefaultAioHttpClient(**options)
    except RuntimeError:  # the extra is missing (a minimal install): same behaviour, more CPU
        client = openai.DefaultAsyncHttpxClient(**options)
    client._transport = _capped(client._transport, max_bytes)
    client._mounts = {pattern: None if inner is None else _capped(inner, max_bytes)
                      for pattern, inner in client._mounts.items()}
    return client


def _capped(inner: Any, max_bytes: int) -> Any:
    """An httpx transport reading each answer whole within `max_bytes` and decompressing it
    within the same cap (httpx itself inflates without bound: a gzip bomb took gigabytes)."""
    httpx: Any = sys.modules["httpx2" if "httpx2" in sys.modules else "httpx"]  # the SDK's HTTP library

    class Capped(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: Any) -> Any:
            request.headers["Accept-Encoding"] = ACCEPT_ENCODING
            response = await inner.handle_async_request(request)
            try:
                length = response.headers.get("content-length", "")
                check_length(int(length) if length.isdigit() else None, max_bytes)
                raw = await read_capped(response.aiter_raw(), max_bytes)
            finally:
                await response.aclose()
            body = decoded(raw, response.headers.get("content-encoding"), max_bytes)
            headers = [(k, v) for k, v in response.headers.multi_items()
                       if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")]
            return httpx.Response(response.status_code, headers=headers, content=body, request=request,
                                  extensions=response.extensions)

        async def aclose(self) -> None:
            await inner.aclose()

    return Capped()


Transport = Union[AiohttpTransport, OpenAITransport]


def make_transport(name: str, timeout: float, max_bytes: int = MAX_RESPONSE_BYTES) -> Transport:
    """The transport `--evalbench-transport` names; `max_bytes` caps every answer's body."""
    if name == "aiohttp":
        return AiohttpTransport(timeout, max_bytes)
    if name == "openai":
        return OpenAITransport(timeout, max_bytes)
    raise ValueError(f"unknown transport {name!r}: choose one of {', '.join(TRANSPORTS)}")


def parse_completion(data: Any) -> Completion:
    """An OpenAI chat.completion JSON body -> Completion; anything else raises (bad response)."""
    choice = data["choices"][0]
    message = choice["message"]
    tool_calls = None
    if message.get("tool_calls"):
        tool_calls = safe_json([{"id": c.get("id"), "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                                for c in message["tool_calls"]])
    content = message.get("content")
    if content is not None:
        if not isinstance(content, str):
            raise TypeError("message content is not a string")
        content = safe_text(content)  # a "\ud800" escape must not reach a file
    usage = data.get("usage") or {}
    if not isinstance(usage, dict):
        raise BadUsage(f"usage is a JSON {type(usage).__name__}, not an object")
    for name in ("prompt_tokens", "completion_tokens"):
        value = usage.get(name)
        if value is not None and not is_token_count(value):
            shown = str(value) if len(str(value)) <= 24 else f"{str(value)[:20]}… ({len(str(value))} characters)"
            raise BadUsage(f"usage.{name} is {shown}, not a token count (an integer from 0 to {MAX_TOKENS:,})")
    finish = choice.get("finish_reason")
    finish = safe_text(finish) if isinstance(finish, str) else finish
    cache_read, cache_write = cache_tokens(usage)
    return Completion(content=content, tool_calls=tool_calls, finish_reason=finish,
                      input_tokens=usage.get("prompt_tokens") or 0,
                      output_tokens=usage.get("completion_tokens") or 0,
                      logprobs=parse_logprobs(choice.get("logprobs")), cached_tokens=cache_read,
                      cache_write_tokens=cache_write)


class BadUsage(ValueError):
    """An answer's usage numbers cannot be believed (negative, fractional, boolean, absurd): the answer
    is a bad response, never a cost or a budget credit."""


MAX_LOGPROB_TOKENS = 512
MAX_ALTERNATIVES = 20


def parse_logprobs(data: Any) -> list[list[Any]] | None:
    """OpenAI's `choices[0].logprobs.content` (llama.cpp's server gives the same shape) -> per token
    [token, {alternative: logprob}], bounded in tokens and alternatives; None when absent or not that
    shape (an endpoint without log-probabilities keeps the sampled judgment). An alternative without a
    usable number (or token: then under "") is kept with None, so a judge reading that token knows
    its probabilities are incomplete."""
    content = data.get("content") if isinstance(data, dict) else None
    if not isinstance(content, list):
        return None
    out: list[list[Any]] = []
    for item in content[:MAX_LOGPROB_TOKENS]:
        if not isinstance(item, dict) or not isinstance(item.get("token"), str):
            return None
        listed = item.get("top_logprobs")
        tops: list[Any] = listed if isinstance(listed, list) else []
        alternatives: dict[str, float | None] = {}
        for t in tops[:MAX_ALTERNATIVES]:  # a malformed one is kept as None: the judge must not read around it
            token = safe_text(t["token"])[:50] if isinstance(t, dict) and isinstance(t.get("token"), str) else ""
            logprob = t.get("logprob") if isinstance(t, dict) else None
            alternatives[token] = float(logprob) if logprob is not None and is_logprob(logprob) else None
        out.append([safe_text(item["token"])[:50], alternatives])
    return out or None


@dataclass(frozen=True)
class Failure:
    """A classified transport failure: whether to retry and how long the server asked to wait."""

    category: str
    message: str
    retryable: bool
    retry_after: float | None = None
    connection: bool = False
    headers: Mapping[str, str] | None = None
    """Response headers of an HTTP error (rate-limit hints for the engine), when there was one."""


class ProtocolError(ValueError):
    """The endpoint's answer is not usable HTTP (a body that does not decompress, an encoding never
    asked for): a bad response."""


class ResponseTooLarge(ProtocolError):
    """The answer's body is over the cap (received or decompressed): a broken or hostile endpoint,
    which asking again would not fix."""


class HTTPStatusError(Exception):
    """An HTTP error status from the raw transport (the SDK raises its own APIStatusError)."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str]) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status_code = status
        self.message = message
        self.headers = headers


class RedirectRefused(Exception):
    """A 3xx answer: redirects are never followed (the API key would go along)."""

    def __init__(self, status: int, url: str, location: str | None) -> None:
        self.status_code = status
        self.target = redirect_target(url, location)
        super().__init__(f"HTTP {status}: redirect to {self.target} not followed (redirects never are: "
                         "set the endpoint URL to where the endpoint really is)")


def redirect_target(url: str, location: str | None) -> str:
    """Where a redirect from `url` points, as an origin only (scheme, host, port): the path and query
    of a Location may carry tokens, and its userinfo credentials, so they are never shown."""
    if not location:
        return "nowhere (no Location header)"
    try:
        parts, base = urlsplit(urljoin(url, location.strip())), urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return "an unparseable Location"
    if parts.scheme not in ("http", "https") or not host or not all(c.isalnum() or c in ".-:_" for c in host):
        return "a Location that is not an http(s) URL"
    shown = f"[{host}]" if ":" in host else host
    origin = f"{parts.scheme}://{shown}" + (f":{port}" if port else "")
    same = (parts.scheme, host, port) == (base.scheme, base.hostname, base.port)
    return f"{origin} ({'the same origin' if same else 'another origin'})"

def _retry_after(headers: Any) -> float | None:
    """Retry-After (seconds or HTTP date) or retry-after-ms, bounded (`shared_limits.retry_after`)."""
    return retry_after(headers)


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


def _status_failure(status: int, message: str, headers: Mapping[str, str]) -> Failure:
    message = f"HTTP {status}: {_short(message)}"
    if status == 429:
        return Failure("rate limited", message, True, _retry_after(headers), headers=headers)
    if status >= 500 or status in (408, 409):
        return Failure("server error", message, True, _retry_after(headers), headers=headers)
    return Failure("request rejected", message, False, headers=headers)


def _errors(module: str, *names: str) -> tuple[type[BaseException], ...]:
    """Exception classes of a library, if something already imported it (else none can be raised)."""
    loaded = sys.modules.get(module)
    return tuple(getattr(loaded, name) for name in names) if loaded is not None else ()


def classify(exc: BaseException, where: str | None = None) -> Failure:
    """Map an exception from either transport to a Failure (never leaks the request headers). A
    connection failure names `where` (the endpoint's scheme, host and port) when given."""
    chain = _cause_chain(exc)
    too_large = next((e for e in chain if isinstance(e, ResponseTooLarge)), None)
    if too_large is not None:  # the same endpoint would send the same again: not retried
        return Failure("response too large", f"answer over the size cap: {_short(str(too_large))}", False)
    if isinstance(exc, RedirectRefused):
        return Failure("request rejected", str(exc), False)
    tls = next((e for e in reversed(chain) if isinstance(e, ssl.SSLError)), None)  # the innermost: aiohttp's wraps it
    if tls is not None:  # an untrusted certificate or a TLS mismatch is configuration: no retry
        detail = getattr(tls, "verify_message", None) or getattr(tls, "reason", None) or type(tls).__name__
        return Failure("connection error", f"TLS handshake failed ({_short(str(detail))})"
                       + (f" ({where})" if where else ""), False, connection=True)
    transport = "connection" if _refused(chain) else _transport_kind(exc)
    unreachable = Failure("connection error", f"cannot reach {where or 'the endpoint'} ({type(chain[-1]).__name__})",
                          True, connection=True)
    if transport == "connection":
        return unreachable
    if isinstance(exc, HTTPStatusError):
        return _status_failure(exc.status_code, exc.message, exc.headers)
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError, *_errors("openai", "APITimeoutError"),
                        *_errors("aiohttp", "ServerTimeoutError"))) or transport == "timeout":
        return Failure("timeout", "request timed out", True)
    # the answer broke off before its framing said it ended (aiohttp's payload error; the SDK calls
    # the same a connection error), or a proxy would not pass the request on
    if isinstance(exc, _errors("openai", "APIConnectionError") + _errors(
            "aiohttp", "ClientConnectionError", "ClientPayloadError", "ClientHttpProxyError")):
        return unreachable
    if isinstance(exc, _errors("aiohttp", "ClientResponseError")):  # not HTTP, or HTTP framed wrongly
        return Failure("bad response", f"malformed HTTP answer ({type(exc).__name__})", True)
    openai = sys.modules.get("openai")
    if openai is not None and isinstance(exc, openai.APIStatusError):
        if 300 <= exc.status_code < 400:  # the SDK's client is told not to follow redirects
            refused = RedirectRefused(exc.status_code, str(exc.request.url), exc.response.headers.get("location"))
            return Failure("request rejected", str(refused), False)
        return _status_failure(exc.status_code, exc.message, exc.response.headers)
    if isinstance(exc, (BadUsage, BadBody)):
        return Failure("bad response", _short(str(exc)), True)
    if isinstance(exc, (*_errors("openai", "APIResponseValidationError"),
                        json.JSONDecodeError, ValueError, KeyError, IndexError, AttributeError, TypeError)):
        return Failure("bad response", f"unusable HTTP 200 body ({type(exc).__name__})", True)
    return Failure("error", f"{type(exc).__name__}: {_short(str(exc))}", False)


def _short(text: str, limit: int = 300) -> str:
    """Endpoint text for a message: lone surrogates made U+FFFD, secrets masked first, then cut (a
    cut never exposes a key's prefix)."""
    text = redact(safe_text(" ".join(str(text).split())))
    return text if len(text) <= limit else text[: limit - 1] + "…"
