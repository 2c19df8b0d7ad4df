"""The response cache: content-addressed record/replay of LLM responses, one JSON file per call, and the
layer in front of the network that uses it.

The key is the sha256 of the canonical JSON of everything that changes the output (endpoint identity,
model, messages, parameters, response format, sample index, re-ask attempt) and never the API key;
`cache_key` is the one function that makes it, for chat completions and recorded tool traffic alike.
Files are written atomically (temp file + os.replace), so concurrent xdist workers never see half an
entry. A replayed entry is verified first: it must be stored under its own key, its request must hash
to that key (an entry copied over another one is caught) and its response must be a usable completion,
and its `digest` (sha256 of the canonical JSON of key, request and response) must match; otherwise
`get` raises `CorruptEntry` (the engine refetches and overwrites it, or names the file in replay mode).
Empty answers are never written.

The digest catches an entry edited by hand (a replayed judgment changed in a pull request, a merge that
mangled a file). It is not a signature: whoever rewrites an entry can recompute it, so an entry without
one (written before digests existed) still replays; dropping the field is no weaker than recomputing it.
Entries are written with ASCII escapes, so any text, even a lone surrogate, is stored and read back as
it was; a file that cannot be read or decoded is a corrupt entry, never a crash.

In front of the network (`CachedCalls`): a verified lookup, the replay-mode miss, single flight
(identical calls in flight share one request), writes of new answers on a writer thread, and the rule
that no secret of the run is ever written to the cache or shown in an answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import hashlib
import json
import math
import os
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

import orjson

from pytest_evalbench.base.errors import CacheMiss, InputError, LLMError, ToolCacheMiss
from pytest_evalbench.base.files import (
    FORMAT_VERSION,
    VERSION_KEY,
    TooLarge,
    atomic_write_text,
    finite_json,
    read_bounded,
    version_problem,
)
from pytest_evalbench.base.json_input import parse_json
from pytest_evalbench.base.numbers import MAX_TOKENS, is_logprob, is_token_count
from pytest_evalbench.base.safe_files import WriteFailed
from pytest_evalbench.base.safe_text import SECRETS
from pytest_evalbench.llm.types import Completion, EngineStats, safe_json

CacheMode = Literal["on", "off", "refresh", "replay"]
CACHE_VERSION = 1


class CorruptEntry(Exception):
    """A cache file that exists but must not be replayed; names the file and what is wrong."""

    def __init__(self, path: Path, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


def usable_response(response: dict[str, Any]) -> bool:
    """Whether an answer is worth keeping: some text or some tool calls; any recorded tool traffic
    (an MCP server's tool list or a tool's result, even an empty one: `kinds/tools.py`)."""
    if TOOL_KEYS.intersection(response):
        return True
    content = response.get("content")
    return bool((isinstance(content, str) and content.strip()) or response.get("tool_calls"))


TOOL_KEYS = frozenset({"tools", "tool_result"})
"""The response keys of recorded tool traffic (`CachedCalls.recorded`), which is not a completion."""


def response_problem(response: Any) -> str | None:
    """Why a stored response cannot be replayed (as a completion, a tool list or a tool result), or None."""
    if not isinstance(response, dict):
        return "its response is not a JSON object"
    if "tool_result" in response:
        ok = isinstance(response["tool_result"], str) and isinstance(response.get("is_error", False), bool)
        return None if ok else "its tool result is not text"
    if "tools" in response:
        tools = response["tools"]
        ok = isinstance(tools, list) and all(isinstance(t, dict) for t in tools)
        return None if ok else "its tool list is not a list of objects"
    for name in ("content", "finish_reason"):
        if response.get(name) is not None and not isinstance(response[name], str):
            return f"its response's {name} is {type(response[name]).__name__}, not text"
    calls = response.get("tool_calls")
    if calls is not None and not (isinstance(calls, list) and all(isinstance(c, dict) for c in calls)):
        return "its response's tool_calls is not a list of objects"
    for name in ("input_tokens", "output_tokens", "cached_tokens", "cache_write_tokens"):
        value = response.get(name, 0)
        if not is_token_count(value):
            return f"its response's {name} is {repr(value)[:30]}, not a token count (0 to {MAX_TOKENS:,})"
    logprobs = response.get("logprobs")
    if logprobs is not None and not (isinstance(logprobs, list) and all(
            isinstance(t, list) and len(t) == 2 and isinstance(t[0], str) and isinstance(t[1], dict)
            and all(v is None or is_logprob(v) for v in t[1].values())
            for t in logprobs)):
        return "its response's logprobs is not a list of [token, {alternative: logprob or null}]"
    content = response.get("content")  # usable: no tool traffic here, so some text or some tool calls
    if not ((isinstance(content, str) and content.strip()) or response.get("tool_calls")):
        return "its response is empty (no text, no tool calls)"
    return None


def entry_problem(key: str, entry: Any) -> str | None:
    """Why a cache file's content must not be replayed for `key`, or None when it is sound."""
    if not isinstance(entry, dict):
        return "not a JSON object"
    if entry.get("key") != key:
        return f"stored under key {str(entry.get('key'))[:12]!r}, not under its file name"
    request = entry.get("request")
    if not isinstance(request, dict):
        return "its stored request does not hash to its key (edited, or copied from another entry)"
    request_json = canonical_json(request)  # encoded once for the key and the digest (the replay hot path)
    if cache_key(request, request_json) != key:
        return "its stored request does not hash to its key (edited, or copied from another entry)"
    response = entry.get("response")
    problem = response_problem(response)
    digest = entry.get("digest")
    if problem is None and digest is not None and digest != _digest(key, request_json, canonical_json(response)):
        problem = "its digest does not match its content (edited after it was recorded)"
    return problem


def entry_digest(key: str, request: Any, response: Any) -> str:
    """sha256 of the canonical JSON of key, request and response: the digest binds the answer to
    the key it is stored under."""
    return _digest(key, canonical_json(request), canonical_json(response))


def _digest(key: str, request_json: str | bytes, response_json: str | bytes) -> str:
    """`entry_digest` from the canonical JSON of the request and of the response, which its callers
    have already: the canonical JSON of {"key", "request", "response"} ("key" < "request" < "response"),
    hashed in its parts (a key of letters and digits, as every key is, is its own JSON between quotes)."""
    key_json = f'"{key}"' if key.isascii() and key.isalnum() else canonical_json(key)
    digest = hashlib.sha256(_utf8(f'{{"key":{key_json},"request":'))
    digest.update(_utf8(request_json))
    digest.update(b',"response":')
    digest.update(_utf8(response_json))
    digest.update(b"}")
    return digest.hexdigest()


def _utf8(text: str | bytes) -> bytes:
    """UTF-8, a lone surrogate kept as its code (hashing must not fail on text a JSON escape made);
    bytes are taken as UTF-8 already."""
    return text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""The definition of the canonical JSON: the standard library's, keys sorted, no spaces, text unescaped.
One encoder for every call (`json.dumps` with options builds a new one per call)."""

_FAST = orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS \
    | orjson.OPT_PASSTHROUGH_DATETIME
"""orjson writes exactly `_CANONICAL`'s text for plain JSON data, except for what it refuses with these
options (a subclass of str, int, dict or list, a dataclass, a date, a non-text key, an integer past 64
bits, a lone surrogate) and for the numbers `canonical_json` checks."""


def canonical_json(data: Any, *, parsed: bool = False) -> str:
    """The canonical JSON of `data` (`canonical_bytes` as text)."""
    return canonical_bytes(data, parsed=parsed).decode("utf-8", "surrogatepass")


def canonical_bytes(data: Any, *, parsed: bool = False) -> bytes:
    """The canonical JSON of `data` as UTF-8 (a lone surrogate kept as its code: what keys and
    digests hash), made by orjson where its text is the standard library's to the byte
    (keys made from it must never change) and by the standard library otherwise. orjson writes a float
    below 1e-4 as `0.00001` or `2.5e-7` where the library writes `1e-05` and `2.5e-07`, and NaN or an
    infinity as `null`: a text with a float written `5e-7` or `0.0000`, or a `null` value where the data
    holds a non-finite float, is made again by the library. (A text that merely reads like one, `5e-7`
    in a message, takes the library's way too: slower, the same bytes.) `parsed`: the data was read by
    `parse_json`, which refuses NaN and the infinities, so its nulls are nulls."""
    try:
        fast = orjson.dumps(data, option=_FAST)
    except TypeError:  # orjson.JSONEncodeError: what orjson refuses with `_FAST`
        return _utf8(_CANONICAL.encode(data))
    if (_SMALL_FLOAT.search(fast) or b"0.0000" in fast
            or (not parsed and (fast == b"null" or _NULL_VALUE.search(fast)) and _holds_non_finite(data))):
        return _utf8(_CANONICAL.encode(data))
    return fast


_SMALL_FLOAT = re.compile(rb"-(?<=[0-9]e-)[0-9]")
"""A float orjson writes with a negative exponent (`2.5e-7`; the library writes `2.5e-07`), found
from its `-` (rarer than an `e`)."""
_NULL_VALUE = re.compile(rb"null(?<=[:,\[]null)")
"""Where a null value may be: a value follows `:`, `,` or `[` (or is the whole text); a text holding
one is walked too, which costs time, never bytes."""


def _holds_non_finite(data: Any) -> bool:
    """Whether JSON data holds NaN or an infinity anywhere (orjson writes them as `null`)."""
    if isinstance(data, float):
        return not math.isfinite(data)
    if isinstance(data, dict):
        return any(_holds_non_finite(value) for value in data.values())
    if isinstance(data, (list, tuple)):
        return any(_holds_non_finite(value) for value in data)
    return False


def completion_material(identity: str, body: dict[str, Any], sample: int, attempt: int) -> dict[str, Any]:
    """What a chat completion's cache entry records of its request, and what its key is made from:
    the endpoint's identity (never its key), the request body, the sample index and the re-ask attempt."""
    return {"endpoint": identity, "body": body, "sample": sample, "attempt": attempt}


def cache_key(material: dict[str, Any], material_json: str | bytes | None = None) -> str:
    """The cache key of every entry (chat completions, MCP tool lists and tool results): the sha256 of
    the canonical JSON of `{"v": CACHE_VERSION, **material}`, the one place a key is made.

    `material_json` is the material's canonical JSON when the caller has it (the entry's digest is made
    from the same text): when every key of the material sorts before "v" (every material the package
    makes), the canonical JSON with "v" is that text with `"v"` appended before its closing brace, so the
    material is not encoded twice on the replay path; otherwise it is encoded anew."""
    if material_json is not None and material and (
            material.keys() <= _MATERIAL_KEYS or all(isinstance(name, str) and name < "v" for name in material)):
        digest = hashlib.sha256(memoryview(_utf8(material_json))[:-1])
        digest.update(_VERSION_TAIL)
        return digest.hexdigest()
    return hashlib.sha256(canonical_bytes({"v": CACHE_VERSION, **material})).hexdigest()


_MATERIAL_KEYS = frozenset(completion_material("", {}, 0, 0))
"""A chat completion's material: its keys all sort before "v"."""
_VERSION_TAIL = f',"v":{CACHE_VERSION}}}'.encode()


def _known_sound(key: str, entry: Any, request: dict[str, Any], request_json: str | bytes) -> bytes | None:
    """The replay hot path's check: the canonical JSON of the response when the entry is stored
    under `key`, records `request` (the caller's own material, whose canonical JSON `request_json`
    hashes to `key`) and carries a digest of exactly that request and its sound response; None
    when anything differs (the full `entry_problem` then names what). No re-encoding of the stored
    request: the digest recomputed over the caller's text binds the answer to this very call."""
    if not isinstance(entry, dict) or entry.get("key") != key or entry.get("request") != request:
        return None
    response, digest = entry.get("response"), entry.get("digest")
    if not isinstance(digest, str) or response_problem(response) is not None:
        return None
    response_json = canonical_bytes(response, parsed=True)
    return response_json if _digest(key, request_json, response_json) == digest else None


_SURROGATE_UTF8 = re.compile(rb"\xed[\xa0-\xbf]")
"""A lone surrogate in `canonical_bytes` (kept as its code: a character's UTF-8 never starts so)."""

MAX_ENTRY_BYTES = 256 << 20
"""Largest cache entry read: a request holds a whole conversation (each answer at most
`MAX_RESPONSE_BYTES`, 4 MiB, escaped), so a real entry stays far below it."""


class ResponseCache:
    """File-per-entry cache honouring `--evalbench-cache` modes."""

    def __init__(self, directory: Path, mode: CacheMode = "on") -> None:
        self.directory = directory
        self.mode = mode
        self._root = os.path.join(directory, "")
        """The directory as text with its separator: an entry's path is built by concatenation."""

    @property
    def reads(self) -> bool:
        return self.mode in ("on", "replay")

    @property
    def writes(self) -> bool:
        return self.mode in ("on", "refresh")

    def path_for(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def entry_file(self, key: str) -> str:
        """`path_for(key)` as text, built without pathlib (the replay hot path)."""
        return f"{self._root}{key[:2]}{os.sep}{key}.json"

    def get(self, key: str, request: tuple[dict[str, Any], str | bytes] | None = None) -> dict[str, Any] | None:
        """The verified response stored for `key`; None when there is none (or this mode does not
        read); `CorruptEntry` when a file is there but must not be replayed. `request` (the
        caller's material and its canonical JSON, which hashes to `key`) makes a sound entry's
        check cheap: its stored request is compared, not re-encoded and re-hashed."""
        if not self.reads:
            return None
        try:
            # at most MAX_ENTRY_BYTES: a huge file in the cache directory (a leftover, or planted) is
            # never loaded into memory, and a FIFO or device planted there is refused, never read
            text = read_bounded(self.entry_file(key), MAX_ENTRY_BYTES)
        except FileNotFoundError:
            return None
        except TooLarge:
            raise CorruptEntry(self.path_for(key), f"larger than {MAX_ENTRY_BYTES:,} bytes: not read") from None
        except (OSError, ValueError) as exc:
            raise CorruptEntry(self.path_for(key), f"unreadable ({type(exc).__name__})") from None
        try:  # its error is raised again naming the entry's file (no path built for a sound entry)
            entry = parse_json(text, self.directory, surrogates=True)
        except InputError as exc:  # not UTF-8 or not JSON, nested too deep, a number no file holds, a key given twice
            where = f"field '{exc.field}': " if exc.field else ""
            refused = ("not valid JSON" if exc.message.startswith("invalid JSON") else
                       "unreadable (not UTF-8)" if exc.message.startswith("not UTF-8") else f"{where}{exc.message}")
            raise CorruptEntry(self.path_for(key), refused) from None
        try:
            problem = version_problem(entry)
            sound = None if problem is not None or request is None else _known_sound(key, entry, *request)
            if sound is not None and not _SURROGATE_UTF8.search(sound):
                clean: dict[str, Any] = entry["response"]
                return clean  # no lone surrogate in it: `safe_json` would return an equal copy
            problem = problem or entry_problem(key, entry)
        except (ValueError, TypeError, RecursionError) as exc:  # nothing in a file may crash the run
            problem = f"unusable ({type(exc).__name__})"
        if problem is not None:
            raise CorruptEntry(self.path_for(key), problem)
        try:
            response: dict[str, Any] = safe_json(entry["response"])
        except RecursionError:
            raise CorruptEntry(self.path_for(key), "its response is nested too deeply") from None
        return response

    def forget(self, keys: list[str]) -> None:
        """Drop entries (an answer chain that ended unusable), unless this mode must not write."""
        if not self.writes:
            return
        for key in keys:
            try:
                self.path_for(key).unlink()
            except OSError:
                pass

    def put(self, key: str, request: dict[str, Any], response: dict[str, Any]) -> None:
        """Store an answer; empty ones never (a transient empty reply must not be replayed forever)."""
        if not self.writes or not usable_response(response):
            return
        entry = {"key": key, "request": request, "response": response,
                 "digest": entry_digest(key, request, response), VERSION_KEY: FORMAT_VERSION}
        path = self.path_for(key)
        atomic_write_text(path, finite_json(entry, path, ensure_ascii=True, indent=1, sort_keys=True), None)


def redacted(completion: Completion) -> Completion:
    """The completion with the run's secrets masked in its text, tool calls and log-probability tokens (an
    endpoint that echoes a key must not get it into transcripts, reports or the cache)."""
    content = SECRETS.redact(completion.content) if completion.content else completion.content
    calls = SECRETS.redact_data(completion.tool_calls) if completion.tool_calls else completion.tool_calls
    logprobs = redacted_logprobs(completion.logprobs)
    if content == completion.content and calls == completion.tool_calls and logprobs == completion.logprobs:
        return completion
    return dataclasses.replace(completion, content=content, tool_calls=calls, logprobs=logprobs)


def redacted_logprobs(logprobs: list[list[Any]] | None) -> list[list[Any]] | None:
    """Log-probability tokens and their alternatives masked one by one; None when a secret is still
    there, spread over several tokens (the answer's probability is then unknown: the sampled judgment
    stands)."""
    if not logprobs or not SECRETS:
        return logprobs
    masked: list[list[Any]] = SECRETS.redact_data(logprobs)
    if SECRETS.leaks("".join(str(token) for token, _ in masked)):
        return None
    return masked


class CachedCalls:
    """Answers from the cache, from an identical call in flight, or from `fetch` (then stored)."""

    def __init__(self, cache: ResponseCache, stats: EngineStats) -> None:
        self.cache = cache
        self.stats = stats
        self._writer: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: dict[str, asyncio.Future[Completion]] = {}

    async def answer(self, key: str, material: dict[str, Any], role: str, model: str,
                     fetch: Callable[[], Awaitable[Completion]], material_text: str | bytes | None = None
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

    async def recorded(self, key: str, material: dict[str, Any], produce: Callable[[], Awaitable[dict[str, Any]]],
                       what: str, *, counted: bool = True) -> dict[str, Any]:
        """Recorded traffic that is not a chat completion (an MCP server's tool list, a tool's result):
        replayed from the cache, or produced (secrets masked) and written before it is returned, so
        another process of the run finds it. `what` names it in errors; `counted` traffic (tool calls,
        not the tool lists every process reads) is counted in `tool_calls` / `tool_replays`."""
        found = self._cached(key, "tool", what, None)
        if found is not None:
            self.stats.tool_replays += counted
            return found
        if self.cache.mode == "replay":
            raise ToolCacheMiss(what, key)
        response: dict[str, Any] = SECRETS.redact_data(await produce())
        self.stats.tool_calls += counted
        if self.cache.writes:
            await asyncio.wrap_future(self.submit(functools.partial(self._put, key, material, response)))
        return response

    def _cached(self, key: str, role: str, model: str, request: tuple[dict[str, Any], str | bytes] | None
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
        """Write the cache entry on the writer thread, off the event loop.

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

    async def store(self, key: str, material: dict[str, Any], completion: Completion) -> None:
        """Write an answer that came by another way than `answer` (a batch's output) and wait until it
        is on disk."""
        if self.cache.writes:
            await asyncio.wrap_future(self.submit(functools.partial(self._put, key, material,
                                                                    redacted(completion).to_json())))

    def _put(self, key: str, material: dict[str, Any], response: dict[str, Any]) -> None:
        """Store an entry unless its request carries a secret of the run (a key pasted into a
        prompt): no credential is ever written to the cache (the response is redacted already)."""
        if SECRETS and SECRETS.leaks(canonical_json(material)):
            self.stats.failures["not cached: the request holds a secret"] += 1
            return
        try:
            self.cache.put(key, material, response)
        except WriteFailed as exc:  # a full disk: counted, and the run ends incomplete saying so
            self.stats.unwritten[f"{self.cache.directory} ({exc.strerror})"] += 1

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
