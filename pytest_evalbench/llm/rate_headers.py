"""What a provider's answer says about its rate limits: `Retry-After` (seconds or an HTTP date),
`retry-after-ms`, and OpenAI's `x-ratelimit-{limit,remaining,reset}-{requests,tokens}` (the reset
in Go's duration format: "1s", "6m0s", "20ms", "1h2m3.5s").

Every value is hostile: a header longer than `MAX_HEADER_CHARS` is ignored, numbers must be
finite and not negative, and every wait is capped (`MAX_WAIT`), so a server cannot park a run for
a day or crash it with "nan" or "1e999".
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

MAX_WAIT = 120.0
"""Longest wait any header can ask for (seconds)."""
MAX_DURATION = 86_400.0
"""Longest reset believed (a day); waits derived from it are still capped at `MAX_WAIT`."""
MAX_HEADER_CHARS = 64
MAX_LIMIT = 1e12
"""Largest limit or remaining count believed (a bigger one is as good as none)."""

_DURATION = re.compile(r"(\d{1,9}(?:\.\d{1,9})?)(ms|h|m|s)", re.ASCII)
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _text(headers: Mapping[str, str] | None, name: str) -> str | None:
    if not headers:
        return None
    try:
        value = headers.get(name)
    except (AttributeError, TypeError):
        return None
    if not isinstance(value, str) or len(value) > MAX_HEADER_CHARS:
        return None
    return value.strip() or None


def _number(text: str | None, upper: float) -> float | None:
    """A finite, non-negative number up to `upper`, else None."""
    if text is None or not text.isascii():  # float() takes other scripts' digits and "1_000"
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and 0 <= value <= upper else None


def parse_duration(text: str | None) -> float | None:
    """OpenAI's reset durations ("1s", "6m0s", "20ms", "1h2m3.5s") or plain seconds -> seconds, capped
    at `MAX_DURATION`; None for anything else."""
    if text is None or len(text) > MAX_HEADER_CHARS or not text.isascii():
        return None
    text = text.strip()
    plain = _number(text, float("inf"))
    if plain is not None:
        return min(plain, MAX_DURATION)
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return min(sum(float(n) * _UNITS[u] for n, u in parts), MAX_DURATION)


def retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds the server asks to wait: `retry-after-ms`, else `Retry-After` as seconds or as an HTTP
    date (relative to `now`, wall clock); capped at `MAX_WAIT`, None when absent or invalid."""
    millis = _number(_text(headers, "retry-after-ms"), float("inf"))
    if millis is not None:
        return min(millis / 1000, MAX_WAIT)
    text = _text(headers, "retry-after")
    if text is None:
        return None
    seconds = _number(text, float("inf"))
    if seconds is not None:
        return min(seconds, MAX_WAIT)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT
        return None
    return min(max(0.0, when.timestamp() - (time.time() if now is None else now)), MAX_WAIT)


@dataclass(frozen=True)
class Window:
    """One kind of limit (requests or tokens) as an answer reported it; None where not said."""

    limit: float | None = None
    """Per minute (OpenAI's RPM / TPM)."""
    remaining: float | None = None
    reset: float | None = None
    """Seconds until the limit is back to its initial state."""

    @property
    def known(self) -> bool:
        return self.limit is not None or self.remaining is not None


@dataclass(frozen=True)
class RateHeaders:
    requests: Window
    tokens: Window
    retry_after: float | None

    @property
    def empty(self) -> bool:
        return not (self.requests.known or self.tokens.known or self.retry_after is not None)


def window(headers: Mapping[str, str] | None, kind: str) -> Window:
    limit = _number(_text(headers, f"x-ratelimit-limit-{kind}"), MAX_LIMIT)
    return Window(limit if limit else None, _number(_text(headers, f"x-ratelimit-remaining-{kind}"), MAX_LIMIT),
                  parse_duration(_text(headers, f"x-ratelimit-reset-{kind}")))


def parse(headers: Mapping[str, str] | None) -> RateHeaders:
    """Everything the headers of one answer say about the endpoint's limits."""
    return RateHeaders(window(headers, "requests"), window(headers, "tokens"), retry_after(headers))
