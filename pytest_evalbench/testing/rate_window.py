"""A provider's request limit for the fake server: R requests per minute, enforced as a token bucket
that holds `burst` seconds' worth (the short-period enforcement real providers apply to a
per-minute limit), with OpenAI's headers on every answer and a 429 beyond it."""

from __future__ import annotations

import math
import threading
import time


def duration(seconds: float) -> str:
    """Seconds in OpenAI's reset format: "20ms", "1s", "6m0s", "1h2m3.5s"."""
    if seconds < 1:
        return f"{max(0, round(seconds * 1000))}ms"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{secs:.3f}".rstrip("0").rstrip(".") + "s"
    if minutes or hours:
        text = f"{int(minutes)}m{text}"
    return f"{int(hours)}h{text}" if hours else text


class RateWindow:
    """At most `per_minute` requests a minute, `burst` seconds' worth at once; thread-safe."""

    def __init__(self, per_minute: float, burst: float = 1.0) -> None:
        self.per_minute = per_minute
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate * burst)
        self._tokens = self.capacity
        self._at = time.monotonic()
        self._lock = threading.Lock()
        self.limited = 0
        """Requests answered 429."""

    def take(self) -> tuple[bool, dict[str, str]]:
        """Admit one request (True) or refuse it; the x-ratelimit-* headers (and Retry-After on a refusal)."""
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.rate)
            self._at = now
            admitted = self._tokens >= 1
            if admitted:
                self._tokens -= 1
            else:
                self.limited += 1
            tokens = self._tokens
        headers = {"x-ratelimit-limit-requests": f"{self.per_minute:g}",
                   "x-ratelimit-remaining-requests": str(int(tokens)),
                   "x-ratelimit-reset-requests": duration((self.capacity - tokens) / self.rate)}
        if not admitted:
            wait = (1 - tokens) / self.rate
            headers["retry-after-ms"] = str(max(1, math.ceil(wait * 1000)))
            headers["Retry-After"] = str(max(1, math.ceil(wait)))
        return admitted, headers
