"""The keep-alive connections of the HTTP/1.1 client (http1.py), per origin, and their warm-up.

A request takes an idle connection (the most recent first), else one that `warm` is still opening
(no other request gets it), else opens its own. `warm(count)` opens connections before the requests
that will use them: a run that starts its items opens them before the burst of work that prepares
their first calls, instead of in the middle of it (on loopback, 128 connects made inside that burst
delay every first request by ~40 ms; made before it, each request leaves as soon as it is ready).
A failed warm-up connect is dropped silently: the request that would have used it connects itself
and fails as it always did.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Generic, Protocol, TypeVar

Slot = tuple[str, str, int]
"""(scheme, host, port): where a connection goes."""


class Pooled(Protocol):
    """A connection (http1's): `closed` once lost or retired (bytes nobody asked for arrived)."""

    closed: bool
    transport: asyncio.Transport | None

    def abort(self) -> None: ...


C = TypeVar("C", bound=Pooled)


class Pool(Generic[C]):
    """Idle connections and connections being opened ahead of their requests, per slot."""

    def __init__(self) -> None:
        self._idle: dict[Slot, list[C]] = {}
        self._opening: dict[Slot, list[asyncio.Task[C]]] = {}

    def checkout(self, slot: Slot) -> C | None:
        """An idle connection still usable, most recently used first."""
        idle = self._idle.get(slot)
        while idle:
            connection = idle.pop()
            if not connection.closed and connection.transport is not None and not connection.transport.is_closing():
                return connection
        return None

    def checkin(self, slot: Slot, connection: C) -> None:
        """A connection whose answer was read completely, for the next request."""
        self._idle.setdefault(slot, []).append(connection)

    async def claim(self, slot: Slot, connect: Callable[[], Coroutine[object, object, C]]) -> C:
        """A connection for one request that found none idle: one `warm` is opening, or a new one."""
        opening = self._opening.get(slot)
        task = opening.pop() if opening else None
        if task is None:
            return await connect()
        try:
            connection = await task
        except asyncio.CancelledError:
            if task.done() and not task.cancelled() and task.exception() is None:
                task.result().abort()  # opened as this request was cancelled: nobody else holds it
            raise
        except Exception:  # the warm-up's connect failed: connect as without it (and fail as before)
            return await connect()
        return connection

    async def warm(self, slot: Slot, count: int, connect: Callable[[], Coroutine[object, object, C]], wait: float) -> None:
        """Open connections until `count` are idle or being opened; wait at most `wait` seconds for them
        (those not open by then go on opening, for the requests to claim or to be idle; 0: no wait)."""
        missing = count - len(self._idle.get(slot, ())) - len(self._opening.get(slot, ()))
        if missing <= 0:
            return
        loop = asyncio.get_running_loop()
        tasks: list[asyncio.Task[C]] = [loop.create_task(connect()) for _ in range(missing)]
        self._opening.setdefault(slot, []).extend(tasks)
        for task in tasks:
            task.add_done_callback(functools.partial(self._opened, slot))
        if wait > 0:
            await asyncio.wait(tasks, timeout=wait)

    def _opened(self, slot: Slot, task: asyncio.Task[C]) -> None:
        """A warm-up connect ended: its connection is idle unless a request claimed it (and awaits it)."""
        opening = self._opening.get(slot, [])
        if task not in opening:
            return
        opening.remove(task)
        if not task.cancelled() and task.exception() is None:
            self.checkin(slot, task.result())

    def close(self) -> None:
        """Stop the warm-up connects and drop every idle connection."""
        for tasks in self._opening.values():
            for task in tasks:
                task.cancel()
        for connections in self._idle.values():
            for connection in connections:
                connection.abort()
        self._opening.clear()
        self._idle.clear()
