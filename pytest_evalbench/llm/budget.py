"""`--evalbench-max-cost` kept: every call reserves its worst-case price before it is sent and
settles with its priced usage after, so the calls on the network can never together spend more
than is left.

Worst case of one request (`worst_case_tokens`): one input token per byte of the JSON body sent
(a byte-level tokenizer's token covers at least one byte; the JSON quoting around each message
outweighs the few template tokens a chat format adds) and its `max_completion_tokens` or
`max_tokens` times `n` output tokens, or `DEFAULT_OUTPUT_CAP` when the request sets none.

A call whose reservation does not fit next to what is spent and reserved waits for the calls in
flight to settle (they usually cost far less than their worst case); once it cannot fit even with
nothing in flight, the budget is reached: that call and every later one is refused with
`BudgetExhausted` (the row is an error, the run exit 7). The total can then exceed the limit only
by what servers report beyond the worst case of their request (more output than `max_tokens`).

Under xdist all workers keep one ledger: a small JSON file under an exclusive `filelock`, made by
the controller for the session (`FileLedger`); a single process keeps it in memory. A model with
no price reserves and costs $0, so the budget cannot limit it (the summary names it).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pytest_evalbench.store import atomic_write_text

DEFAULT_OUTPUT_CAP = 4096
"""Output tokens reserved for a request that sets neither `max_tokens` nor `max_completion_tokens`
(every role sets one by default, see `spec.DEFAULT_MAX_TOKENS`; `params` can remove it)."""
POLL_SECONDS = 0.05
"""How often a waiting call re-reads a shared ledger (other processes settle there)."""

Verdict = Literal["ok", "wait", "stop"]


def worst_case_tokens(body: dict[str, Any], data: bytes) -> tuple[int, int]:
    """(input, output) tokens the request can at most be billed for (see the module docstring)."""
    cap = body.get("max_completion_tokens") or body.get("max_tokens")
    try:
        output = int(cap) if cap else DEFAULT_OUTPUT_CAP
        choices = max(1, int(body.get("n") or 1))
    except (TypeError, ValueError):
        output, choices = DEFAULT_OUTPUT_CAP, 1
    return len(data), max(0, output) * choices


@dataclass
class LedgerState:
    spent: float = 0.0
    """Settled cost of every call of the session (all processes)."""
    reserved: float = 0.0
    """Worst-case cost of the calls on the network now."""
    stopped: bool = False
    """The budget was reached: no call starts any more."""

    def decide(self, amount: float, limit: float) -> Verdict:
        if self.stopped:
            return "stop"
        if self.spent + amount > limit:
            self.stopped = True
            return "stop"
        if self.reserved > 0 and self.spent + self.reserved + amount > limit:
            return "wait"
        self.reserved += amount
        return "ok"

    def settle(self, reserved: float, actual: float) -> None:
        self.reserved = max(0.0, self.reserved - reserved)
        self.spent += actual


class Ledger(Protocol):
    def try_reserve(self, amount: float, limit: float) -> Verdict: ...

    def settle(self, reserved: float, actual: float) -> None: ...

    def state(self) -> LedgerState: ...


class LocalLedger:
    """One process's ledger (no xdist)."""

    def __init__(self) -> None:
        self._state = LedgerState()

    def try_reserve(self, amount: float, limit: float) -> Verdict:
        return self._state.decide(amount, limit)

    def settle(self, reserved: float, actual: float) -> None:
        self._state.settle(reserved, actual)

    def state(self) -> LedgerState:
        return self._state


class FileLedger:
    """The session's ledger shared by xdist workers: read, change and write under one file lock
    (released by the OS if a holder dies)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        from filelock import FileLock  # only a ledger's process pays its import (~10 ms CPU)

        self._lock = FileLock(str(path) + ".lock")

    def _read(self) -> LedgerState:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return LedgerState(float(data["spent"]), float(data["reserved"]), bool(data["stopped"]))
        except (OSError, ValueError, KeyError, TypeError):
            return LedgerState()

    def _write(self, state: LedgerState) -> None:
        atomic_write_text(self.path, json.dumps({"spent": state.spent, "reserved": state.reserved,
                                                 "stopped": state.stopped}), None)

    def try_reserve(self, amount: float, limit: float) -> Verdict:
        with self._lock:
            state = self._read()
            verdict = state.decide(amount, limit)
            if verdict != "wait":
                self._write(state)
            return verdict

    def settle(self, reserved: float, actual: float) -> None:
        with self._lock:
            state = self._read()
            state.settle(reserved, actual)
            self._write(state)

    def state(self) -> LedgerState:
        with self._lock:
            return self._read()


class Budget:
    """Reservations against `limit` dollars in `ledger`, for one process's engine."""

    def __init__(self, limit: float, ledger: Ledger, wait_limit: float = 600.0) -> None:
        self.limit = limit
        self.ledger = ledger
        self.wait_limit = wait_limit
        """A reservation that cannot be placed for this long (a worker died holding reservations)
        counts as the budget reached."""
        self._settled: asyncio.Event | None = None

    @classmethod
    def open(cls, limit: float, shared: str | None, request_timeout: float) -> Budget:
        ledger: Ledger = FileLedger(Path(shared)) if shared else LocalLedger()
        return cls(limit, ledger, wait_limit=2 * request_timeout + 10 if request_timeout > 0 else 600.0)

    async def reserve(self, amount: float) -> bool:
        """Place a reservation of `amount` dollars (True), waiting while calls in flight hold what it
        needs; False once the budget is reached."""
        deadline = time.monotonic() + self.wait_limit
        while True:
            verdict = self.ledger.try_reserve(amount, self.limit)
            if verdict != "wait":
                return verdict == "ok"
            if time.monotonic() > deadline:
                return False
            if self._settled is None:
                self._settled = asyncio.Event()
            self._settled.clear()
            try:
                await asyncio.wait_for(self._settled.wait(), POLL_SECONDS)
            except asyncio.TimeoutError:
                pass

    def settle(self, reserved: float, actual: float) -> None:
        """The call is over: its reservation becomes what it really cost (0 when it failed)."""
        self.ledger.settle(reserved, actual)
        if self._settled is not None:
            self._settled.set()

    def spent(self) -> float:
        return self.ledger.state().spent
