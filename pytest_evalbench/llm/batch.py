"""The batch tier: a role's calls sent through the provider's Batch API (OpenAI's `/v1/files` and
`/v1/batches`) at half the list price, answered within minutes to hours instead of one request each.

`Batches.fetch` stands where the retrier's fetch stands for a synchronous call (behind the cache layer,
so a cache hit never goes into a batch, and an identical call in flight shares one line). Calls that are
ready at the same time are collected for a short window (`WINDOW`, until `QUIET` passes with no new one)
and sent as one batch per endpoint, key and model (a provider's batch holds one model), within the
provider's per-batch limits (`MAX_LINES`, `MAX_BYTES`); a conversation's next turn is ready only when
its batch is done, so a multi-turn conversation advances one batch round per turn. A line's `custom_id`
is its cache key, and its answer is parsed as a synchronous one is, so it lands in the same cache entry.

Nothing already submitted is lost: before a batch is polled, its id and each line's cache key and
cache material are recorded in `<cache directory>/.batches/<batch id>.json` (written atomically). A
later run that misses one of those keys resumes polling that batch instead of submitting (and paying)
again; every answer of a finished batch is written to the cache, asked for or not, and the record is
removed. Lines the provider failed with a server error or a rate limit, and lines of a batch that
expired, failed or was cancelled, are submitted again alone, up to `max_attempts` submissions per line.

Everything the batch endpoints send is hostile: the batch object is read into a typed model, output
files are capped (`MAX_OUTPUT_BYTES`), each line goes through the project's JSON reader and the
completion parser, and a line that cannot be read makes only its own call an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import re
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pytest_evalbench.base.errors import InputError, LLMError
from pytest_evalbench.base.files import TooLarge, atomic_write_text, read_bounded
from pytest_evalbench.base.json_input import parse_json
from pytest_evalbench.base.safe_files import WriteFailed
from pytest_evalbench.base.safe_text import SECRETS
from pytest_evalbench.llm.batch_api import BatchAPI, checked_id
from pytest_evalbench.llm.cache import cache_key
from pytest_evalbench.llm.transport import parse_completion
from pytest_evalbench.llm.types import Completion, Endpoint, EngineSettings, EngineStats

BATCH_ROLES = ("judge", "target", "user")
"""The roles `--evalbench-batch` names (`all`: every one)."""
MAX_LINES = 50_000
MAX_BYTES = 200 * 1024 * 1024
"""The provider's per-batch limits: lines and bytes of one input file."""
MAX_OUTPUT_BYTES = 512 * 1024 * 1024
"""Cap on one output or error file as read (answers of `MAX_LINES` calls)."""
MAX_RECORD_BYTES = 2 * MAX_BYTES
"""Cap on one record file read back (its lines' cache material: at most one input file's worth twice)."""
WINDOW = 2.0
QUIET = 0.05
"""Calls are collected for at most `WINDOW` seconds after the first one, ending early once `QUIET`
seconds pass with no new one: the calls every pipeline makes at about the same time go together. A
round after the first ends sooner still: as soon as every conversation a batch answered has made its
next batched call (see `Batches._returned`)."""
MIN_POLL = 0.02
RECORDS = ".batches"
DONE = frozenset({"completed", "expired", "failed", "cancelled"})
RETRYABLE_CODES = frozenset({"batch_expired", "batch_cancelled", "batch_failed", "server_error", "rate_limit_exceeded"})
_BATCH_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")
_KEY = re.compile(r"^[0-9a-f]{64}$")


def parse_roles(text: str) -> frozenset[str]:
    """`judge,user` -> the roles; `all` -> every batchable role; ValueError naming what is unknown."""
    names = {part.strip() for part in text.split(",") if part.strip()}
    if "all" in names:
        return frozenset(BATCH_ROLES)
    unknown = sorted(names - set(BATCH_ROLES))
    if unknown or not names:
        raise ValueError(f"unknown role(s) {', '.join(map(repr, unknown)) or '(none)'}: "
                         f"choose from {', '.join(BATCH_ROLES)} or all")
    return frozenset(names)


class _Batch(BaseModel):
    """The part of a batch object the poller reads."""

    model_config = ConfigDict(extra="ignore")
    id: str = Field(max_length=200)
    status: Literal["validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling",
                    "cancelled"]
    output_file_id: str | None = Field(default=None, max_length=200)
    error_file_id: str | None = Field(default=None, max_length=200)


@dataclass
class _Line:
    key: str
    material: dict[str, Any]
    body: dict[str, Any] | None = None
    future: asyncio.Future[Completion] | None = None
    attempts: int = 0


@dataclass
class _Group:
    endpoint: Endpoint
    role: str
    lines: dict[str, _Line] = field(default_factory=dict)
    size: int = 0
    flusher: asyncio.Task[None] | None = None
    last: float = 0.0
    complete: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the round is known to be complete: submit without waiting out the quiet period."""


@dataclass
class BatchCounts:
    """What the progress line shows: batches submitted, in progress and done, and the first submission."""

    submitted: int = 0
    done: int = 0
    lines: int = 0
    resubmitted: int = 0
    resumed: int = 0
    since: float | None = None
    """Monotonic time of this run's first submission (or resumed batch)."""

    @property
    def in_progress(self) -> int:
        return self.submitted + self.resumed - self.done


class Batches:
    """Batched calls of one engine: collected, submitted, recorded, polled and answered."""

    def __init__(self, settings: EngineSettings, stats: EngineStats, directory: Path,
                 write: Callable[[str, dict[str, Any], Completion], Awaitable[None]]) -> None:
        self.settings = settings
        self.stats = stats
        self.directory = directory / RECORDS
        self._write = write
        """Stores one answer in the cache (on the cache's writer thread) and returns once it is on disk."""
        self.counts = BatchCounts()
        self._api = BatchAPI(settings.timeout, MAX_OUTPUT_BYTES)
        self._groups: dict[tuple[str, str | None, str], _Group] = {}
        self._records: dict[str, Path] | None = None
        """Cache key -> the record of a batch submitted earlier (read at the first batched call)."""
        self._resumed: dict[Path, asyncio.Task[None]] = {}
        self._waiting: dict[str, asyncio.Future[Completion]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._storing: set[asyncio.Task[Any]] = set()
        """Polls whose answers are being written to the cache: closing waits for them, never cancels."""
        self._client_loaded: threading.Thread | None = None
        self._callers: dict[str, asyncio.Task[Any]] = {}
        """Cache key -> the task waiting for its answer."""
        self._expected: set[asyncio.Task[Any]] = set()
        """Tasks a batch answered that have not made their next batched call yet."""
        self._uncertain = False
        """One of them ended instead (its next call may come from another task): wait for quiet."""

    def prepare(self) -> None:
        """Import the HTTP client library in a thread now: the first batch need not wait for it, nor the
        event loop stall on it."""
        if self._client_loaded is None:
            self._client_loaded = threading.Thread(target=importlib.import_module, args=("aiohttp",),
                                                   name="evalbench-batch-import", daemon=True)
            self._client_loaded.start()

    def progress(self) -> tuple[int, int, int, float] | None:
        """(submitted or resumed, in progress, done, seconds since the first submission) for the
        progress line; None before any batch."""
        counts = self.counts
        if counts.since is None:
            return None
        return (counts.submitted + counts.resumed, counts.in_progress, counts.done,
                time.monotonic() - counts.since)

    async def fetch(self, endpoint: Endpoint, body: dict[str, Any], role: str, key: str,
                    material: dict[str, Any]) -> Completion:
        """The answer of one call, from a batch submitted earlier (resumed) or from a new one."""
        if not endpoint.api_key and endpoint.base_url is None:
            raise LLMError("no API key", f"set {endpoint.key_source} (or api_key_env in benchmark.yaml), "
                           "or use --evalbench-cache=replay with a recorded cache", role=role, model=endpoint.model)
        future: asyncio.Future[Completion] = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        task = asyncio.current_task()
        try:
            self.prepare()
            assert self._client_loaded is not None
            if self._client_loaded.is_alive():
                await asyncio.to_thread(self._client_loaded.join)
            record = self._record_of(key)
            if record is None or not self._resume(record, endpoint, role):
                self._add(endpoint, role, _Line(key, material, body, future))
            if task is not None:
                self._callers[key] = task
                self._returned(task)
            return await future
        finally:
            self._waiting.pop(key, None)
            self._callers.pop(key, None)

    # ------------------------------------------------------------------ knowing when a round is complete
    def _answered(self, keys: list[str]) -> None:
        """A batch's answers went to the tasks waiting for them: expect each back with its next call."""
        if not self._expected:
            self._uncertain = False
        for key in keys:
            task = self._callers.get(key)
            if task is not None and task not in self._expected:
                self._expected.add(task)
                task.add_done_callback(self._ended)

    def _returned(self, task: asyncio.Task[Any]) -> None:
        """`task` made its next batched call. Once every task the last batches answered has (each is now
        waiting for an answer: no more calls can come from them), the round is complete, and the calls
        collected so far are submitted at once instead of after the quiet period."""
        if task not in self._expected:
            return
        self._expected.discard(task)
        task.remove_done_callback(self._ended)
        if not self._expected and not self._uncertain:
            for group in self._groups.values():
                group.complete.set()

    def _ended(self, task: asyncio.Task[Any]) -> None:
        if task in self._expected:
            self._expected.discard(task)
            self._uncertain = True

    # ------------------------------------------------------------------ collecting and submitting
    def _add(self, endpoint: Endpoint, role: str, line: _Line) -> None:
        slot = (endpoint.identity, endpoint.api_key, endpoint.model)
        group = self._groups.get(slot)
        if group is None:
            group = self._groups[slot] = _Group(endpoint, role)
        group.lines[line.key] = line
        group.size += len(json.dumps(line.body)) + 200
        group.last = time.monotonic()
        if group.flusher is None:
            group.flusher = self._spawn(self._flush(slot, group))

    async def _flush(self, slot: tuple[str, str | None, str], group: _Group) -> None:
        """Wait out the window, then submit what was collected in batches within the per-batch limits."""
        started = time.monotonic()
        while len(group.lines) < MAX_LINES and group.size < MAX_BYTES and not group.complete.is_set():
            now = time.monotonic()
            if now - group.last >= QUIET or now - started >= WINDOW:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(group.complete.wait(), min(QUIET, WINDOW - (now - started)))
        del self._groups[slot]
        chunk: list[_Line] = []
        size = 0
        for line in group.lines.values():
            line_size = len(json.dumps(line.body)) + 200
            if chunk and (len(chunk) >= MAX_LINES or size + line_size > MAX_BYTES):
                self._spawn(self._submit(group.endpoint, group.role, chunk))
                chunk, size = [], 0
            chunk.append(line)
            size += line_size
        if chunk:
            await self._submit(group.endpoint, group.role, chunk)

    async def _submit(self, endpoint: Endpoint, role: str, lines: list[_Line]) -> None:
        """Upload one input file, create the batch, record it, then poll it to the end."""
        try:
            data = "".join(json.dumps({"custom_id": line.key, "method": "POST", "url": "/v1/chat/completions",
                                       "body": line.body}) + "\n" for line in lines).encode()
            uploaded = await self._api.upload(endpoint, data)
            batch_id = checked_id(_Batch.model_validate(await self._api.create(endpoint, uploaded)).id, "batch")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(lines, role, endpoint, exc, retry=True)
            return
        for line in lines:
            line.attempts += 1
        self.stats.batch_lines += len(lines)
        self.counts.submitted += 1
        self.counts.lines += len(lines)
        if self.counts.since is None:
            self.counts.since = time.monotonic()
        record = self._record(batch_id, endpoint, lines)
        await self._poll(batch_id, endpoint, role, {line.key: line for line in lines}, record)

    def _record(self, batch_id: str, endpoint: Endpoint, lines: list[_Line]) -> Path | None:
        """The batch written down before it is polled: a run killed now resumes it instead of paying again."""
        if not _BATCH_ID.match(batch_id):
            return None
        path = self.directory / f"{batch_id}.json"
        record = {"id": batch_id, "endpoint": endpoint.identity, "model": endpoint.model,
                  "lines": {line.key: line.material for line in lines}}
        text = json.dumps(record, ensure_ascii=True)
        if SECRETS and SECRETS.leaks(text):
            return None  # a request holding a secret of the run is never written (nor cached)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, text, None)
        except (OSError, WriteFailed):
            return None
        if self._records is not None:
            for line in lines:
                self._records[line.key] = path
        return path

    # ------------------------------------------------------------------ resuming
    def _record_of(self, key: str) -> Path | None:
        if self._records is None:
            self._records = {}
            with contextlib.suppress(OSError):
                for path in sorted(self.directory.glob("*.json")):
                    for line_key in (_read_record(path) or {}).get("lines", {}):
                        self._records[line_key] = path
        return self._records.get(key)

    def _resume(self, path: Path, endpoint: Endpoint, role: str) -> bool:
        """Poll a batch a run before this one submitted (once, whoever asks first); False when its
        record cannot be used (the call then goes into a new batch)."""
        if path in self._resumed:
            return True
        record = _read_record(path)
        if record is None:
            self._forget_record(path)
            return False
        lines = {key: _Line(key, material, _body(material), attempts=1) for key, material in record["lines"].items()}
        self.counts.resumed += 1
        if self.counts.since is None:
            self.counts.since = time.monotonic()
        self._resumed[path] = self._spawn(self._poll(record["id"], endpoint, role, lines, path))
        return True

    def _forget_record(self, path: Path | None) -> None:
        if path is None:
            return
        with contextlib.suppress(OSError):
            path.unlink()
        if self._records is not None:
            for key in [key for key, where in self._records.items() if where == path]:
                del self._records[key]

    # ------------------------------------------------------------------ polling and answering
    async def _poll(self, batch_id: str, endpoint: Endpoint, role: str, lines: dict[str, _Line],
                    record: Path | None) -> None:
        started = time.monotonic()
        failures = 0
        while True:
            try:
                batch = _Batch.model_validate(await self._api.retrieve(endpoint, batch_id))
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1  # a poll that failed is asked again; the batch is not lost
                if failures >= self.settings.max_attempts:
                    self._fail(list(lines.values()), role, endpoint, exc, retry=False)
                    self.counts.done += 1
                    return
                await asyncio.sleep(self._poll_wait(started))
                continue
            if batch.status in DONE:
                break
            await asyncio.sleep(self._poll_wait(started))
        answers: dict[str, Completion] = {}
        failed: dict[str, str] = {}
        retry: set[str] = set()
        for file_id in (batch.output_file_id, batch.error_file_id):
            if file_id:
                await self._read_output(endpoint, file_id, lines, answers, failed, retry)
        # stored on the writer thread while the answered calls go on (their next round is collected
        # meanwhile); the record goes only once every answer is on disk
        writes = asyncio.gather(*(self._write(key, lines[key].material, completion)
                                  for key, completion in answers.items()))
        self.counts.done += 1
        self._answered([key for key in answers if key in self._waiting])
        for key, line in lines.items():
            waiting = self._waiting.get(key)
            if key in answers:
                _settle(waiting, answers[key])
            elif waiting is None:
                continue  # nobody in this run asked for it: a later run asks again
            elif key in failed and key not in retry:
                _settle(waiting, LLMError("bad response", failed[key], role=role, model=endpoint.model))
            elif key not in failed and batch.status == "completed":
                # a completed batch answers every line: one that is missing was a line that could not be read
                _settle(waiting, LLMError("bad response", f"its line of batch {batch_id}'s output could not be read",
                                          role=role, model=endpoint.model))
            elif line.attempts < self.settings.max_attempts and line.body is not None:
                self.counts.resubmitted += 1
                line.future = waiting
                self._add(endpoint, role, line)
            else:
                reason = failed.get(key) or f"no answer in batch {batch_id} ({batch.status})"
                _settle(waiting, LLMError("batch failed", f"{reason} (after {line.attempts} submissions)",
                                          role=role, model=endpoint.model))
        task = asyncio.current_task()
        if task is not None:
            self._storing.add(task)
        await writes
        self._forget_record(record)
        self._storing.discard(task)

    def _poll_wait(self, started: float) -> float:
        """The wait before the next poll: a hundredth of the time the batch has taken so far (a batch is
        seen done at most about 1% after it is), at least `MIN_POLL`, at most `--evalbench-batch-poll`.
        So a batch done after T seconds is polled about T / `MIN_POLL` times up to 2 s, then about
        100 x ln(T / 2 s) times more while a hundredth of T is under the cap (about 830 in all when the
        30 s default is reached, at 50 minutes), then once per cap: about 3,600 over 24 hours."""
        return min(self.settings.batch_poll, max(MIN_POLL, (time.monotonic() - started) / 100))

    async def _read_output(self, endpoint: Endpoint, file_id: str, lines: dict[str, _Line],
                           answers: dict[str, Completion], failed: dict[str, str], retry: set[str]) -> None:
        """Read one output or error file: each line an answer, or why its call failed."""
        try:
            text = (await self._api.content(endpoint, file_id)).decode("utf-8", "replace")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            for key in lines:
                if key not in answers:
                    failed.setdefault(key, f"its batch's output file could not be read ({type(exc).__name__})")
                    retry.add(key)
            return
        for number, raw in enumerate(text.splitlines(), 1):
            if not raw.strip():
                continue
            try:
                data = parse_json(raw, Path("the batch's output"), number, surrogates=True)
            except InputError:
                continue  # its call has no answer: reported below as missing
            custom_id = data.get("custom_id") if isinstance(data, dict) else None
            if not isinstance(custom_id, str) or custom_id not in lines or custom_id in answers:
                continue
            key = custom_id
            problem, retryable = _line_problem(data)
            if problem is None:
                try:
                    answers[key] = parse_completion(data["response"]["body"])
                    failed.pop(key, None)
                    retry.discard(key)
                    continue
                except Exception as exc:  # a body that is no chat completion: this call is an error
                    problem, retryable = f"line {number} of the output is not a chat completion ({type(exc).__name__})", False
            failed[key] = SECRETS.redact(problem)
            if retryable:
                retry.add(key)

    # ------------------------------------------------------------------ helpers
    def _fail(self, lines: list[_Line], role: str, endpoint: Endpoint, exc: Exception, *, retry: bool) -> None:
        """A submission or poll that failed: its lines resubmitted within the attempts, else errors."""
        self.stats.failures["batch error"] += 1
        message = SECRETS.redact(f"{type(exc).__name__}: {str(exc)[:300]}")
        for line in lines:
            line.attempts += 1
            waiting = line.future or self._waiting.get(line.key)
            if retry and line.attempts < self.settings.max_attempts and line.body is not None:
                self.counts.resubmitted += 1
                self._add(endpoint, role, line)
            else:
                _settle(waiting, LLMError("batch error", message, role=role, model=endpoint.model))

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def aclose(self) -> None:
        """Stop polling; answers already received are written to the cache (and their record removed)
        first: they are paid for."""
        await asyncio.gather(*self._storing, return_exceptions=True)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._api.aclose()


def _settle(future: asyncio.Future[Completion] | None, outcome: Completion | BaseException) -> None:
    if future is None or future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def _line_problem(data: dict[str, Any]) -> tuple[str | None, bool]:
    """(None, _) for a line holding an answer; else (why its call failed, whether to submit it again)."""
    error = data.get("error")
    response = data.get("response")
    status = response.get("status_code") if isinstance(response, dict) else None
    if isinstance(error, dict):
        code = str(error.get("code") or "")[:100]
        message = str(error.get("message") or "")
        return f"{code or 'error'}: {message[:300]}", code in RETRYABLE_CODES or (isinstance(status, int) and (
            status >= 500 or status == 429))
    if not isinstance(status, int) or isinstance(status, bool):
        return "a line of the output has no status", False
    if status != 200:
        body = response.get("body") if isinstance(response, dict) else None
        err = body.get("error") if isinstance(body, dict) else None
        message = str(err.get("message") or "") if isinstance(err, dict) else ""
        return f"HTTP {status}: {message[:300]}", status >= 500 or status in (408, 409, 429)
    return None, False


def _body(material: dict[str, Any]) -> dict[str, Any] | None:
    body = material.get("body")
    return body if isinstance(body, dict) else None


def _read_record(path: Path) -> dict[str, Any] | None:
    """A batch record read back within bounds and checked; None when it cannot be used."""
    try:
        data = parse_json(read_bounded(path, MAX_RECORD_BYTES).decode("utf-8"), path)
    except (OSError, ValueError, TooLarge, InputError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not _BATCH_ID.match(data["id"]):
        return None
    lines = data.get("lines")
    if not isinstance(lines, dict):
        return None
    # a line whose material does not hash to its key (an edited record) is never written to the cache
    data["lines"] = {key: material for key, material in lines.items()
                     if _KEY.match(key) and isinstance(material, dict) and cache_key(material) == key}
    return data
