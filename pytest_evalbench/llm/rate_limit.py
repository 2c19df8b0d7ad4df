"""Rate limits the user sets: requests per minute shared by every process on the machine (xdist
workers included), tokens per minute per process; and concurrency that adapts to 429s per endpoint.
What the provider says about its own limits is in shared_limits.py (headers: rate_headers.py).

Each request reserves the next free slot in a tiny state file under an exclusive `filelock` (fcntl on
POSIX, msvcrt on Windows), then sleeps until its slot: the spacing holds across workers without a
coordinator, and a crashed worker leaves nothing locked (the OS drops the lock with the process).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import os
import time
from pathlib import Path


class SharedRateLimit:
    """At most `per_minute` request starts per minute across all processes using `path`."""

    def __init__(self, path: Path, per_minute: float) -> None:
        from filelock import FileLock  # only a process with --evalbench-rate-limit pays its import

        self.path = path
        self.interval = 60.0 / per_minute
        self._lock = FileLock(str(path) + ".lock")
        """Held for a read-change-write of `path` (per thread: `wait` reserves on worker threads)."""

    def reserve(self) -> float:
        """Claim the next slot; return the wall-clock time it starts."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock.acquire(poll_interval=0.001):  # a holder keeps it for microseconds
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)  # never a link
            try:
                raw = os.read(fd, 64)
                try:
                    next_free = float(raw.decode() or 0)
                except ValueError:
                    next_free = 0.0
                slot = max(time.time(), next_free)
                os.lseek(fd, 0, os.SEEK_SET)
                os.ftruncate(fd, 0)
                os.write(fd, repr(slot + self.interval).encode())
                return slot
            finally:
                os.close(fd)

    async def wait(self) -> None:
        slot = await asyncio.to_thread(self.reserve)
        delay = slot - time.time()
        if delay > 0:
            await asyncio.sleep(delay)


class AdaptiveConcurrency:
    """Requests in flight to one endpoint, adapted to what the provider accepts (AIMD).

    A 429 halves the limit (once per round: answers to requests sent before the last cut do not
    cut again); every success adds 1/limit, so the limit grows back by about one per round of
    successful requests, up to the configured concurrency. Waiters are served lowest priority
    value first, like the engine's semaphore, so a throttled endpoint still finishes early items first.
    """

    def __init__(self, ceiling: int) -> None:
        self.ceiling = float(max(1, ceiling))
        self.limit = self.ceiling
        self.in_flight = 0
        self.round = 0
        self.cuts = 0
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    async def acquire(self, priority: int = 0) -> int:
        """Wait for a slot; return the round the request starts in (hand it back to `release`)."""
        if self.in_flight < int(self.limit) and not self._waiters:
            self.in_flight += 1
            return self.round
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (priority, next(self._order), future))
        self._wake(int(self.limit) - self.in_flight)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():  # granted, then cancelled: give the slot back
                self.in_flight -= 1
                self._wake(int(self.limit) - self.in_flight)
            raise
        return self.round

    def release(self, started_round: int, limited: bool) -> None:
        self.in_flight -= 1
        if limited:
            if started_round == self.round:
                self.limit = max(1.0, self.limit / 2)
                self.round += 1
                self.cuts += 1
        else:
            self.limit = min(self.ceiling, self.limit + 1 / self.limit)
        self._wake(int(self.limit) - self.in_flight)

    def _wake(self, slots: int) -> None:
        while slots > 0 and self._waiters:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():
                self.in_flight += 1
                future.set_result(None)
                slots -= 1


class TokenRate:
    """At most `per_minute` tokens per minute in this process, by a virtual schedule (GCRA).

    A request reserves its estimated tokens before it starts and waits until the schedule lets it
    go (one second of burst); the true count from the response corrects the schedule afterwards.
    """

    BURST_SECONDS = 1.0

    def __init__(self, per_minute: float) -> None:
        self.per_second = per_minute / 60.0
        self._due = 0.0

    async def wait(self, tokens: int) -> None:
        now = time.monotonic()
        due = max(self._due, now)
        self._due = due + tokens / self.per_second
        delay = due - now - self.BURST_SECONDS
        if delay > 0:
            await asyncio.sleep(delay)

    def correct(self, estimated: int, actual: int) -> None:
        self._due += (actual - estimated) / self.per_second
