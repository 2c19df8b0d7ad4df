"""One view of each endpoint's rate limits for every process on the machine (xdist workers, and other runs
against the same endpoint, included): what one process learns from an answer paces all.

What an answer says: `Retry-After` (seconds or an HTTP date), `retry-after-ms`, and OpenAI's
`x-ratelimit-{limit,remaining,reset}-{requests,tokens}` (the reset in Go's duration format: "1s",
"6m0s", "20ms", "1h2m3.5s"). Every value is hostile: a header longer than `MAX_HEADER_CHARS` is ignored,
numbers must be finite and not negative, and every wait is capped (`MAX_WAIT`).

The view is a small JSON file (`.endpoint-limits` in the cache directory) changed under an exclusive
`filelock` and replaced atomically, so a reader without the lock never sees half of it. Per endpoint
(scheme://host:port/path, credentials stripped) it keeps:

- `next`: when the starts claimed so far would have left the provider's allowance whole again (a
  token bucket's theoretical arrival time); a request claims the slot max(now, `next` - `burst`, `hold`)
  and moves `next` to max(`next`, slot) + `interval`, so starts are spaced by `interval` across all
  processes once the burst is used. An answer whose window says the provider's bucket is fuller than
  `next` accounts for (requests of other clients, or sent before the limit was known) moves it later;
- `burst`: how far `next` may run ahead of now: the provider's burst (its capacity, the remaining
  requests plus what refills until the reset) less a reserve (10% of it, at most a second of the
  sustained rate), in seconds of that rate; none after a 429 no window accounts for, until the next
  answer reports the window again;
- `interval` = the largest of: `req_gap` (60 / x-ratelimit-limit-requests, a 0.5% margin: the sustained
  rate the provider grants), `tok_gap` (60 x tokens per request / x-ratelimit-limit-tokens, once no
  more than 10% of the limit remains), `spread` (the remaining requests or tokens spread over the time
  to their reset, until then) and `backoff`, learned from 429s whose headers report no window used up
  (AIMD: such a 429 stretches it 1.4-fold, at most once per round; each success shortens it by 0.3%);
- `hold`: no start before then (Retry-After of a 429, or a window reported used up).

A process claims a few consecutive slots under one lock (as many as fit in `BATCH_SECONDS`, at most
`MAX_BATCH`) and hands them to its next requests, dropping those a hold learned since overtakes; a slot
used later than claimed is still within the limit (the bucket only fills meanwhile).

An endpoint nobody learned anything about is "quiet": its requests cost one `stat` of the file, no lock;
once it is paced, a process counts the starts it made in the last second while it was quiet, and
not answered yet, against the burst (the first answers' windows may not include them).
Entries not updated for `STALE_SECONDS` are forgotten (a limit learned by an earlier run).
"""

from __future__ import annotations

import collections
import json
import math
import os
import re
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from email.utils import parsedate_to_datetime
from pathlib import Path
from urllib.parse import urlsplit

from filelock import AcquireReturnProxy, FileLock

from pytest_evalbench.base.errors import EvalbenchWarning, InputError
from pytest_evalbench.base.files import atomic_write_text, read_bounded
from pytest_evalbench.base.json_input import parse_json
from pytest_evalbench.base.safe_files import WriteFailed
from pytest_evalbench.base.safe_text import strip_credentials

STALE_SECONDS = 600.0
CLOCK_SKEW = 60.0
"""How far ahead of this clock a time in the file may be (another machine's clock, sharing the cache)."""
MAX_FILE_BYTES = 1 << 20
"""Largest `.endpoint-limits` file read (64 endpoints take a few kilobytes)."""
MARGIN = 1.005
"""Pace 0.5% under the sustained rate the headers grant: clocks drift (the windows the answers report
correct the rest, and the burst reserve absorbs the jitter of the network)."""
BURST_RESERVE = 0.1
"""Share of the provider's burst kept in reserve (other clients, the network's jitter) before pacing."""
RESERVE_SECONDS = 1.0
"""At most this long of the sustained rate is kept in reserve (rebuilt once others used it)."""
BATCH_SECONDS = 0.05
"""A process claims the slots of this long at once (one lock, read and write for all of them)."""
MAX_BATCH = 8
QUIET_HORIZON = 1.0
"""How long a request may take to reach the endpoint (its start counted against the burst until then)."""
MAX_QUIET_STARTS = 4096
MAX_ENDPOINTS = 64
GROW, SHRINK = 1.4, 0.997


def endpoint_key(url: str) -> str:
    """scheme://host:port/path of an endpoint URL, credentials and query stripped (the limits are
    the provider's, whatever the key in the URL)."""
    try:
        parts = urlsplit(strip_credentials(url))
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return strip_credentials(url)[:200]
    host = parts.hostname or ""
    shown = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{shown}:{port}{parts.path.rstrip('/')}"[:200]


_GAPS = ("req_gap", "tok_gap", "spread", "backoff", "burst")
"""Fields that are durations (bounded by MAX_WAIT when read from the file); the others are times."""


@dataclass
class EndpointState:
    next: float = 0.0
    hold: float = 0.0
    req_gap: float = 0.0
    burst: float = 0.0
    tok_gap: float = 0.0
    spread: float = 0.0
    spread_until: float = 0.0
    backoff: float = 0.0
    cut_after: float = 0.0
    tokens: float = 0.0
    """Tokens per request (moving average), for the token limit's gap."""
    updated: float = 0.0

    def interval(self, now: float) -> float:
        spread = self.spread if now < self.spread_until else 0.0
        return max(self.req_gap, self.tok_gap, spread, self.backoff)

    def plausible(self, now: float) -> bool:
        """Whether an entry read from the file could have been written by a run on this clock: no
        time in the future beyond `CLOCK_SKEW` (updated), no slot or hold beyond `MAX_WAIT` from now."""
        ahead = now + CLOCK_SKEW
        return (self.updated <= ahead and self.next <= ahead + MAX_WAIT and self.hold <= ahead + MAX_WAIT
                and self.spread_until <= ahead + MAX_DURATION and self.cut_after <= ahead + MAX_DURATION)

    def quiet(self, now: float) -> bool:
        return self.interval(now) == 0.0 and self.hold <= now

    @classmethod
    def of(cls, data: object) -> EndpointState:
        if not isinstance(data, dict):
            return cls()
        values = {}
        for f in fields(cls):
            value = data.get(f.name, 0.0)
            number = float(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0.0
            values[f.name] = min(max(0.0, number), MAX_WAIT) if f.name in _GAPS else max(0.0, number)
        return cls(**values)

    def learn(self, now: float, info: RateHeaders, limited: bool, tokens: int) -> None:
        """Update from one answer: a 429 (`limited`), its headers and the tokens it used."""
        if tokens > 0:
            self.tokens = tokens if not self.tokens else 0.9 * self.tokens + 0.1 * tokens
        if info.requests.limit:
            self._bucket(now, info.requests)
        if info.tokens.limit and self.tokens:
            self.tok_gap = _gap(info.tokens, self.tokens)
        for kind, per_request in ((info.requests, 1.0), (info.tokens, self.tokens)):
            self._spread(now, kind, per_request)
        if info.retry_after is not None and limited:
            self.hold = max(self.hold, now + min(info.retry_after, MAX_WAIT))
        explained = any(kind.remaining is not None and kind.remaining < per_request
                        for kind, per_request in ((info.requests, 1.0), (info.tokens, max(1.0, self.tokens))))
        if limited and not explained:  # a refusal no window accounts for: its pace is found by trial
            self.burst = 0.0
            if now >= self.cut_after:  # one cut per round: answers to requests sent before it do not cut again
                self.backoff = min(MAX_WAIT, max(self.backoff * GROW, self.interval(now) * GROW, 0.001))
                self.cut_after = now + max(0.25, 4 * self.interval(now))
        elif self.backoff and not limited:
            self.backoff = self.backoff * SHRINK if self.backoff * SHRINK > max(0.001, self.req_gap) else 0.0
        self.updated = now

    def _bucket(self, now: float, requests: Window) -> None:
        """The sustained rate, the burst and the provider's own account of the requests it took (a
        token bucket of `capacity`: the remaining ones plus what refills until its reset)."""
        assert requests.limit
        exact = 60.0 / requests.limit
        self.req_gap = min(MAX_WAIT, exact * MARGIN)
        if requests.remaining is None:
            return
        refill = requests.reset / exact if requests.reset is not None else math.inf
        capacity = min(requests.limit, requests.remaining + refill)
        reserve = min(BURST_RESERVE * capacity, RESERVE_SECONDS / exact)
        self.burst = min(MAX_WAIT, max(0.0, capacity - reserve - 1) * exact)
        self.next = max(self.next, now + min(MAX_WAIT, (capacity - requests.remaining) * exact))

    def _spread(self, now: float, kind: Window, per_request: float) -> None:
        """Spread what remains of a window over the time to its reset (`per_request` units each)."""
        if kind.remaining is None or kind.reset is None or per_request <= 0:
            return
        if kind.remaining < per_request:  # used up: no start until it resets (or, with a known
            # sustained limit, until it grants the next one; a 429's Retry-After holds longer)
            grant = 60.0 * per_request / kind.limit if kind.limit else kind.reset
            self.hold = max(self.hold, now + min(kind.reset, grant, MAX_WAIT))
            return
        if kind.limit and kind.remaining > BURST_RESERVE * kind.limit:
            return  # a burst the provider grants: used (see `_gap`)
        # requests possible until the reset: what remains, plus what refills meanwhile at the sustained rate
        possible = (kind.remaining + (kind.reset * kind.limit / 60.0 if kind.limit else 0.0)) / per_request
        spread = min(MAX_WAIT, kind.reset / possible) if kind.reset > 0 else 0.0
        if spread > max(self.req_gap, self.tok_gap):  # else the sustained rate is the slower pace
            self.spread, self.spread_until = spread, now + kind.reset

    def same_pace(self, other: EndpointState, now: float) -> bool:
        """Whether this state (`other` after an answer) paces like `other`: gaps and bursts within 5%,
        the same holds, and `next` moved less than two intervals, or not where it delays a start
        (the provider's bucket still holds more than the reserve): nothing worth writing."""
        def close(a: float, b: float) -> bool:
            return abs(a - b) <= 0.05 * max(a, b)

        moved = self.next - other.next
        return (close(self.req_gap, other.req_gap) and close(self.tok_gap, other.tok_gap)
                and close(self.spread, other.spread) and close(self.burst, other.burst)
                and self.backoff == other.backoff and self.hold == other.hold and self.cut_after == other.cut_after
                and (moved <= 2 * self.interval(now) or self.next - self.burst <= now))


def _gap(kind: Window, per_request: float) -> float:
    """Seconds between starts at the sustained rate a per-minute limit grants (`MARGIN` under); none while
    more than `BURST_RESERVE` of the limit remains (a provider that grants bursts is not paced
    until its burst is nearly used)."""
    assert kind.limit
    if kind.remaining is not None and kind.remaining > BURST_RESERVE * kind.limit:
        return 0.0
    return min(MAX_WAIT, 60.0 * per_request / kind.limit * MARGIN)


class SharedLimits:
    """The machine-wide view in `path` (see the module docstring), for one process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock: FileLock | None = None
        """Made at the first write: a process that learns no limit never takes the lock."""
        self._seen: int | None = None
        """Modification time (ns) of the file when this process last read it."""
        self._view: dict[str, EndpointState] = {}
        self._local = False
        """The file could not be used: this process keeps its view in memory only."""
        self._warned = False
        self._quiet: dict[str, collections.deque[float]] = {}
        """When this process started requests to each quiet endpoint not answered yet (the last
        `QUIET_HORIZON`)."""
        self._slots: dict[str, collections.deque[float]] = {}
        """Start slots this process claimed and has not used yet, per endpoint (see `reserve`)."""

    # -------------------------------------------------------------- file
    def _locked(self) -> AcquireReturnProxy:
        """The lock, polled every half millisecond when another process holds it (filelock's default
        50 ms would stall this process's event loop that long; a holder keeps it for microseconds)."""
        if self._lock is None:
            self._lock = FileLock(str(self.path) + ".lock")
        return self._lock.acquire(poll_interval=0.0005)

    def _mtime(self) -> int | None:
        if self._local:
            return self._seen
        try:
            return os.stat(self.path).st_mtime_ns
        except OSError:
            return None

    def _read(self) -> dict[str, EndpointState]:
        if self._local:
            return self._view
        self._seen = self._mtime()
        try:
            data = (parse_json(read_bounded(self.path, MAX_FILE_BYTES).decode("utf-8"), self.path)
                    if self._seen is not None else {})
        except (OSError, ValueError, InputError) as exc:
            if self._seen is not None and not isinstance(exc, FileNotFoundError):
                self._ignored(f"unreadable ({exc.message if isinstance(exc, InputError) else type(exc).__name__})")
            data = {}
        now = time.time()
        states = {str(k)[:200]: EndpointState.of(v) for k, v in data.items()} if isinstance(data, dict) else {}
        believed = {k: s for k, s in states.items() if s.plausible(now)}
        if len(believed) < len(states):
            self._ignored(f"an entry claims times more than {CLOCK_SKEW:g}s ahead of this clock, or holds "
                          f"beyond {MAX_WAIT:g}s")
        self._view = {k: s for k, s in believed.items() if now - s.updated < STALE_SECONDS}
        return self._view

    def _ignored(self, why: str) -> None:
        """One warning per process for a state file this run does not believe."""
        self._warn(f"{self.path}: {why}; ignored (it is learned again from the endpoint's answers)")

    def _warn(self, message: str) -> None:
        """One warning per process about the state file."""
        if not self._warned:
            self._warned = True
            warnings.warn(EvalbenchWarning(message), stacklevel=4)

    def _write(self) -> None:
        newest = sorted(self._view.items(), key=lambda item: item[1].updated)[-MAX_ENDPOINTS:]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, json.dumps({k: asdict(s) for k, s in newest}), None)
        self._seen = self._mtime()

    # -------------------------------------------------------------- requests
    def _change(self, change: Callable[[dict[str, EndpointState], float], tuple[float, bool]]) -> float:
        """`change(view, now)` -> (result, changed) under the lock, the view written back if changed.
        Once the file cannot be used (a read-only cache directory), this process paces alone, in memory."""
        if not self._local:
            try:
                with self._locked():
                    result, changed = change(self._read(), time.time())
                    if changed:
                        self._write()
                    return result
            except OSError as exc:
                self._local = True
                if isinstance(exc, WriteFailed):  # a full disk: said once; a read-only cache directory is expected
                    self._warn(f"{exc}; this process paces its requests alone, in memory (the file only "
                               "shares pacing between processes)")
        return change(self._view, time.time())[0]

    def reserve(self, key: str) -> float:
        """Claim the endpoint's next start slot; return its wall-clock time (now when unpaced)."""
        now = time.time()
        if self._mtime() != self._seen:
            self._read()  # without the lock: the file is only ever replaced whole
        state = self._view.get(key)
        if state is None or state.quiet(now):
            starts = self._quiet.setdefault(key, collections.deque(maxlen=MAX_QUIET_STARTS))
            while starts and starts[0] <= now - QUIET_HORIZON:
                starts.popleft()
            starts.append(now)
            return now
        claimed = self._slots.get(key)
        if claimed:
            hold = min(state.hold, now + MAX_WAIT)
            while claimed and claimed[0] < hold:
                claimed.popleft()  # a hold learned since they were claimed overtakes them
            if claimed:
                return claimed.popleft()

        def claim(view: dict[str, EndpointState], now: float) -> tuple[float, bool]:
            state = view.get(key)
            if state is None or state.quiet(now):
                return now, False
            self._count_quiet(key, state, now)
            interval = state.interval(now)
            # a slot or hold past MAX_WAIT (a clock jump, a corrupt file) is not waited for
            earliest = max(now, min(state.hold, now + MAX_WAIT))
            count = max(1, min(MAX_BATCH, round(BATCH_SECONDS / interval))) if interval > 0 else 1
            slots = collections.deque[float]()
            for _ in range(count):
                slot = max(earliest, min(state.next, now + MAX_WAIT) - state.burst)
                state.next = max(state.next, slot) + interval
                slots.append(slot)
            first = slots.popleft()
            self._slots[key] = slots
            return first, True

        return self._change(claim)

    def learn(self, key: str, info: RateHeaders, *, limited: bool, tokens: int = 0) -> None:
        """What one answer taught about the endpoint, for every process."""
        now = time.time()
        quiet = self._quiet.get(key)
        if quiet:
            quiet.popleft()  # answered: its window includes it (the first sent are answered first)
        if not limited:  # a success that changes nothing is not written
            if self._mtime() != self._seen:
                self._read()  # without the lock: the file is only ever replaced whole
            current = self._view.get(key)
            if current is None and info.empty:  # a quiet endpoint's answer that says nothing: no pace to learn
                return
            trial = replace(current) if current is not None else EndpointState()
            trial.learn(now, info, limited, tokens)
            if (trial.same_pace(current or EndpointState(), now) and now - (current.updated if current else now) < 5.0
                    and (trial.quiet(now) or key not in self._quiet)):
                if current is not None:
                    current.tokens = trial.tokens
                return

        if limited:
            self._slots.pop(key, None)  # claimed before the refusal: the pace it asks for is learned anew

        def update(view: dict[str, EndpointState], now: float) -> tuple[float, bool]:
            state = view.setdefault(key, EndpointState())
            state.learn(now, info, limited, tokens)
            self._count_quiet(key, state, now)
            return now, True

        self._change(update)

    def _count_quiet(self, key: str, state: EndpointState, now: float) -> None:
        """Once the endpoint is paced, the starts this process made while it was quiet, in the last
        `QUIET_HORIZON` and not answered yet, are counted as claimed now: the window an answer
        reported may not include them (they were still on their way), and the burst must not be
        granted twice."""
        if state.quiet(now) or key not in self._quiet:
            return
        recent = sum(1 for start in self._quiet.pop(key) if start > now - QUIET_HORIZON)
        state.next = min(max(state.next, now) + recent * state.interval(now), now + MAX_WAIT)

    def state(self, key: str) -> EndpointState | None:
        """The endpoint's entry as this process sees it now (for tests and reports)."""
        return self._read().get(key)


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


_NOTHING = RateHeaders(Window(), Window(), None)
"""What an answer without headers says (most answers of an endpoint that reports no limits)."""


def parse(headers: Mapping[str, str] | None) -> RateHeaders:
    """Everything the headers of one answer say about the endpoint's limits."""
    if not headers:
        return _NOTHING
    return RateHeaders(window(headers, "requests"), window(headers, "tokens"), retry_after(headers))
