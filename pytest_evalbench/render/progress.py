"""The progress line: items done of total, in flight, requests, tokens, cost so far and ETA.

On a terminal it is redrawn in place after every item; in CI logs (no TTY) a plain line is
written at most every `every` seconds, so a long run shows it is alive without flooding the log.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol


def _duration(value: float) -> str:
    seconds = max(0, round(value))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


@dataclass
class Counts:
    """A snapshot of the run's counters (engine figures are None when this process has no engine,
    e.g. on the xdist controller)."""

    done: int
    total: int
    failed: int = 0
    errored: int = 0
    in_flight: int | None = None
    requests: int | None = None
    cache_hits: int | None = None
    tokens: int | None = None
    cost: float | None = None
    batches: tuple[int, int, int, float] | None = None
    """Provider batches (submitted or resumed, in progress, done, seconds since the first submission)."""


def progress_line(c: Counts, elapsed: float) -> str:
    """`evalbench: 120/500 done (3 failed, 0 errors), 16 in flight, 260 requests, 1.2M tokens, $0.41, ETA 3m10s`
    (with `batches 2 submitted, 1 in progress, 1 done (4m02s since submission)` after the cost when the
    run sends provider batches)."""
    parts = [f"evalbench: {c.done}/{c.total} done ({c.failed} failed, {c.errored} errors)"]
    if c.in_flight is not None:
        parts.append(f"{c.in_flight} in flight")
    if c.requests is not None:
        parts.append(f"{c.requests} requests" + (f" + {c.cache_hits} cached" if c.cache_hits else ""))
    if c.tokens is not None:
        parts.append(f"{c.tokens / 1e6:.1f}M tokens" if c.tokens >= 100_000 else f"{c.tokens} tokens")
    if c.cost is not None:
        parts.append(f"${c.cost:.4f}")
    if c.batches is not None:
        submitted, running, done, since = c.batches
        parts.append(f"batches {submitted} submitted, {running} in progress, {done} done "
                     f"({_duration(since)} since submission)")
    if 0 < c.done < c.total:
        parts.append(f"ETA {_duration(elapsed / c.done * (c.total - c.done))}")
    elif c.done >= c.total:
        parts.append(f"took {_duration(elapsed)}")
    return ", ".join(parts)


class LineWriter(Protocol):
    """What the progress line needs of the terminal (pytest's TerminalReporter provides it;
    `plugin._compat.terminal_writer` hands it over)."""

    def rewrite(self, line: str, *, erase: bool = ...) -> None: ...

    def ensure_newline(self) -> None: ...

    def write_line(self, line: str, **_markup: bool) -> None: ...

    def write(self, content: str) -> None: ...


@dataclass
class ProgressReporter:
    """Writes the progress line through pytest's terminal reporter (`live`: redraw in place)."""

    writer: LineWriter
    live: bool
    every: float
    started: float = field(default_factory=time.monotonic)
    _last: float = 0.0
    _drawn: bool = False

    def due(self, done: int, total: int) -> bool:
        """Whether a line is due now (callers skip gathering the counts when it is not)."""
        return done >= total or time.monotonic() - self._last >= (0.2 if self.live else self.every)

    def update(self, counts: Counts, force: bool = False) -> None:
        if not force and not self.due(counts.done, counts.total):
            return
        now = time.monotonic()
        self._last = now
        line = progress_line(counts, now - self.started)
        if self.live:
            self.writer.rewrite(line, erase=True)
            self._drawn = True
        else:
            self.writer.ensure_newline()
            self.writer.write_line(line)

    def finish(self) -> None:
        """Leave the live line on screen and move below it."""
        if self.live and self._drawn:
            self.writer.write("\n")
            self._drawn = False
