"""The cache layer in front of the network: a verified lookup, the replay-mode miss, single flight
(identical calls in flight share one request), write-behind of new answers on a writer thread, and
the rule that no secret of the run is ever written to the cache or shown in an answer."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from pytest_evalbench.errors import CacheMiss, LLMError
from pytest_evalbench.llm.cache import CorruptEntry, ResponseCache, canonical_json
from pytest_evalbench.llm.types import Completion, EngineStats
from pytest_evalbench.redaction import SECRETS


def redacted(completion: Completion) -> Completion:
    """The completion with the run's secrets masked in its text and tool calls (an endpoint that
    echoes a key must not get it into transcripts, reports or the cache)."""
    content = SECRETS.redact(completion.content) if completion.content else completion.content
    calls = SECRETS.redact_data(completion.tool_calls) if completion.tool_calls else completion.tool_calls
    if content == completion.content and calls == completion.tool_calls:
        return completion
    return dataclasses.replace(completion, content=content, tool_calls=calls)


class Memo:
    """Answers from the cache, from an identical call in flight, or from `fetch` (then stored)."""

    def __init__(self, cache: ResponseCache, stats: EngineStats) -> None:
        self.cache = cache
        self.stats = stats
        self._writer: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: dict[str, asyncio.Future[Completion]] = {}

    async def answer(self, key: str, material: dict[str, Any], role: str, model: str,
                     fetch: Callable[[], Awaitable[Completion]], material_text: str | None = None
                     ) -> Completion:
        """The completion for `key`; `material` is what the cache entry records of the request
        (`material_text`, its canonical JSON if the caller has it, makes the cache's check cheap)."""
        cached = self._cached(key, role, model, None if material_text is None else (material, material_text))
        if cached is not None:
            self.stats.cache_hits += 1
            completion = redacted(Completion.from_json(cached, cached=True, key=key))
        elif self.cache.mode == "replay":
            raise CacheMiss(role, model, key)
        elif key in self._pending:
            # single flight: an identical call is already under way; share its answer, pay once
            self.stats.cache_hits += 1
            completion = dataclasses.replace(await asyncio.shield(self._pending[key]), cached=True)
        else:
            pending: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
            self._pending[key] = pending
            try:
                completion = dataclasses.replace(redacted(await fetch()), key=key)
            except BaseException as exc:
                pending.set_exception(exc)
                pending.exception()  # retrieved: waiters re-raise it, nobody logs it as lost
                del self._pending[key]
                raise
            pending.set_result(completion)
            self._write_behind(key, material, completion)
        return completion

    def _cached(self, key: str, role: str, model: str, request: tuple[dict[str, Any], str] | None
                ) -> dict[str, Any] | None:
        """A verified cache entry; a corrupt one is a miss that the fetch repairs, or in replay
        mode an error naming the file."""
        try:
            return self.cache.get(key, request)
        except CorruptEntry as exc:
            self.stats.failures["corrupt cache entry"] += 1
            if self.cache.mode == "replay":
                raise LLMError("corrupt cache entry", f"{exc}; re-record it with --evalbench-cache=on",
                               role=role, model=model) from None
            return None

    def _write_behind(self, key: str, material: dict[str, Any], completion: Completion) -> None:
        """Write the cache entry on the writer thread, off the event loop (one file write is ~0.5 ms).

        The answer stays in `_pending` until it is on disk, so an identical call meanwhile is
        served from memory exactly as it would be from the file (same counts, no second request).
        """
        if not self.cache.reads:
            del self._pending[key]  # `refresh` asks again for an identical later call, as before
        if not self.cache.writes:
            return
        written = self.submit(functools.partial(self._put, key, material, completion.to_json()))
        if not self.cache.reads:
            return
        loop = asyncio.get_running_loop()

        def done(_: object) -> None:
            try:
                loop.call_soon_threadsafe(self._pending.pop, key, None)
            except RuntimeError:  # the loop is closed: the run is over, nobody asks any more
                pass

        written.add_done_callback(done)

    def _put(self, key: str, material: dict[str, Any], response: dict[str, Any]) -> None:
        """Store an entry unless its request carries a secret of the run (a key pasted into a
        prompt): no credential is ever written to the cache (the response is redacted already)."""
        if SECRETS and SECRETS.leaks(canonical_json(material)):
            self.stats.failures["not cached: the request holds a secret"] += 1
            return
        self.cache.put(key, material, response)

    def submit(self, write: Callable[[], None]) -> concurrent.futures.Future[None]:
        """Run `write` on the writer thread, after the writes queued so far (FIFO)."""
        if self._writer is None:
            self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="evalbench-cache")
        return self._writer.submit(write)

    async def forget(self, keys: list[str]) -> None:
        """Drop cache entries, after any of their writes still queued (same writer thread, FIFO)."""
        if self._writer is None:
            self.cache.forget(keys)
            return
        await asyncio.wrap_future(self._writer.submit(self.cache.forget, keys))

    def close(self) -> None:
        """Wait for the writes still queued: every answer received is on disk before the run ends."""
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None
