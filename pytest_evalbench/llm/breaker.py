"""Circuit breaker per endpoint: an endpoint that keeps failing fails the rest of the run at once.

Without it every call to a dead endpoint pays its whole retry backoff (500 items answered HTTP 500
took ~22 s, against ~2 s for 500 answered items). The rule:

- a failed attempt counts when it is a connection failure, or a server error (HTTP 5xx, 408, 409)
  answered to a retry: the endpoint still failed after a backoff (a call's first attempt answered
  5xx neither counts nor resets, so a burst of concurrent first attempts refused by an overloaded
  server proves nothing alone); any answer resets the count (a 429, a timeout or a 4xx neither
  counts nor resets it);
- connection failures are counted per endpoint (base URL), server errors per endpoint and model (one
  broken model does not stop the others served by the same URL);
- the circuit opens at K counted failures in a row, K = 2 x max_attempts (10 by default);
- an open circuit stays open for the rest of the process: every later call to that endpoint fails
  without sending anything, and calls sleeping in a retry backoff for it wake at once (`pause`), so
  failing items cost no more than answered ones. A circuit opened by refused connections raises exactly the refusal that
  opened it (so a dead endpoint is one error group in the summary, however many calls were in
  flight); one opened by server errors raises `LLMError("endpoint down: <the failure>")`. Its rows
  are errors, the run exits 7 and last_run.json names the reason.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pytest_evalbench.errors import LLMError


@dataclass
class _Streak:
    failures: int = 0
    kind: str = ""
    reason: str = ""
    open: bool = False


class Breaker:
    """Consecutive server/connection failures per endpoint identity, and the circuits they opened."""

    def __init__(self, threshold: int) -> None:
        self.threshold = max(1, threshold)
        self._streaks: dict[str, _Streak] = {}
        self._sleepers: dict[str, set[asyncio.Future[None]]] = {}
        """Circuit key -> the backoffs sleeping on it (woken when it opens)."""

    def check(self, ident: str, role: str, model: str) -> None:
        """Raise the endpoint-down error when the circuit of this endpoint (or of this model on it) is open."""
        for key in (ident, f"{ident} {model}"):
            streak = self._streaks.get(key)
            if streak is not None and streak.open and key == ident:  # refused connections: the same error
                raise LLMError(streak.kind, streak.reason, role=role, model=model)
            if streak is not None and streak.open:
                raise LLMError(f"endpoint down: {streak.reason}",
                               f"circuit open after {self.threshold} failures in a row: later calls send no request",
                               role=role, model=model)

    def answered(self, ident: str, model: str) -> None:
        """The endpoint answered: a closed circuit's count starts again (an open one stays open)."""
        for key in (ident, f"{ident} {model}"):
            streak = self._streaks.get(key)
            if streak is not None and not streak.open:
                del self._streaks[key]

    def failed(self, ident: str, model: str, reason: str, *, connection: bool, retry: bool,
               kind: str = "connection error") -> None:
        """A server error or connection failure (`retry`: the attempt was not the call's first);
        opens the circuit at K counted ones in a row."""
        if not (connection or retry):
            return
        streak = self._streaks.setdefault(ident if connection else f"{ident} {model}", _Streak())
        if streak.open:
            return
        streak.failures += 1
        streak.kind, streak.reason = kind, reason
        if streak.failures >= self.threshold:
            streak.open = True
            for sleeper in self._sleepers.pop(ident if connection else f"{ident} {model}", ()):
                if not sleeper.done():
                    sleeper.set_result(None)

    async def pause(self, ident: str, model: str, delay: float) -> None:
        """Sleep a retry's backoff, cut short when a circuit of this endpoint (or model) opens meanwhile:
        the caller's next `check` then fails at once instead of after the rest of the backoff.
        Called on the engine's one event loop, like `failed`."""
        keys = (ident, f"{ident} {model}")
        sleeper: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for key in keys:
            self._sleepers.setdefault(key, set()).add(sleeper)
        try:
            await asyncio.wait({sleeper}, timeout=delay)
        finally:
            sleeper.cancel()
            for key in keys:
                waiting = self._sleepers.get(key)
                if waiting is not None:
                    waiting.discard(sleeper)
                    if not waiting:
                        del self._sleepers[key]

    def is_open(self, ident: str, model: str) -> bool:
        return any(s.open for s in (self._streaks.get(ident), self._streaks.get(f"{ident} {model}")) if s)
