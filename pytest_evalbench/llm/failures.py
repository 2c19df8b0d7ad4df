"""Transport failures, classified: what failed (rate limited, server error, timeout, connection,
bad response, rejected, too large), whether asking again can help, and how long the server asked
to wait. Both transports (raw aiohttp and the SDK) raise into `classify`, so the retry policy sees
one vocabulary; messages never carry request headers, and endpoint text in them is sanitised and
redacted."""

from __future__ import annotations

import asyncio
import json
import ssl
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from pytest_evalbench.llm.rate_headers import retry_after
from pytest_evalbench.llm.types import safe_text
from pytest_evalbench.redaction import redact


@dataclass(frozen=True)
class Failure:
    """A classified transport failure: whether to retry and how long the server asked to wait."""

    kind: str
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
    """Retry-After (seconds or HTTP date) or retry-after-ms, bounded (rate_headers.py)."""
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


def classify(exc: BaseException) -> Failure:
    """Map an exception from either transport to a Failure (never leaks the request headers)."""
    chain = _cause_chain(exc)
    too_large = next((e for e in chain if isinstance(e, ResponseTooLarge)), None)
    if too_large is not None:  # the same endpoint would send the same again: not retried
        return Failure("response too large", f"answer over the size cap: {_short(str(too_large))}", False)
    if isinstance(exc, RedirectRefused):
        return Failure("request rejected", str(exc), False)
    tls = next((e for e in reversed(chain) if isinstance(e, ssl.SSLError)), None)  # the innermost: aiohttp's wraps it
    if tls is not None:  # an untrusted certificate or a TLS mismatch is configuration: no retry
        detail = getattr(tls, "verify_message", None) or getattr(tls, "reason", None) or type(tls).__name__
        return Failure("connection error", f"TLS handshake failed ({_short(str(detail))})", False, connection=True)
    transport = "connection" if _refused(chain) else _transport_kind(exc)
    unreachable = Failure("connection error", f"cannot reach the endpoint ({type(chain[-1]).__name__})",
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
    if isinstance(exc, (*_errors("openai", "APIResponseValidationError"),
                        json.JSONDecodeError, ValueError, KeyError, IndexError, AttributeError, TypeError)):
        return Failure("bad response", f"unusable HTTP 200 body ({type(exc).__name__})", True)
    return Failure("error", f"{type(exc).__name__}: {_short(str(exc))}", False)


def _short(text: str, limit: int = 300) -> str:
    """Endpoint text for a message: lone surrogates made U+FFFD, secrets masked first, then cut (a
    cut never exposes a key's prefix)."""
    text = redact(safe_text(" ".join(str(text).split())))
    return text if len(text) <= limit else text[: limit - 1] + "…"


