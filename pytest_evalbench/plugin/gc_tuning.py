"""Garbage-collector settings for a benchmark run (pytest-free; applied by the session).

A benchmark run keeps every item, report and record alive until the results are written, so
the heap grows with N, and CPython's full collections, which walk the whole heap each time it
has grown by a quarter, cost more and more while holding the GIL the engine thread needs. At
N = 2,000 (one turn + judge, C = 64) the collector ran for 1.8 s of the loop; with what exists
when the loop starts frozen (modules, collected items: never garbage during the run) and a
larger young generation, 0.26 s. At exit the interpreter's final collections walk everything
again (0.4 to 1.0 s at N = 2,000, 3.6 s at N = 10,000): freezing the heap at exit skips them;
memory is returned to the system with the process either way.

Everything is undone at the very end of the run (`restore`, pytest's last cleanup), so an
in-process `pytest.main()` (pytester's inline runs) leaves the collector as it found it and nothing
frozen stays uncollectable; pytest's own full collections at the end (its unraisable-exception
check) run before that and skip the frozen heap.
"""

from __future__ import annotations

import atexit
import gc

YOUNG_THRESHOLD = 10_000
"""Allocations between young collections during the run (CPython's default is 700)."""


class _State:
    saved: tuple[int, int, int] | None = None
    """The thresholds from before `freeze_startup` or `tune_for_run`, while either is in effect."""
    tuned = False
    """Whether `tune_for_run` ran (undone by `restore`)."""
    exit_hook = False
    startup_frozen = False
    """Whether `freeze_startup` froze the heap (undone by `restore`)."""


def _enlarge_young_generation() -> None:
    if _State.saved is None:
        saved = _State.saved = gc.get_threshold()
        gc.set_threshold(max(YOUNG_THRESHOLD, saved[0]), saved[1], saved[2])


def freeze_startup() -> None:
    """Freeze what exists when `--benchmark` is configured (pytest and everything imported so far),
    so the collections that the plugin's imports and collection trigger skip it: at N = 200 a
    process spent ~55 ms of its ~0.45 s start in them (3 x per `-n 2` run). The young generation is
    enlarged from here too: the imports of a run's configure allocate steadily (59 young collections,
    7 ms at N = 200 with CPython's default; 5, 4.5 ms enlarged). `tune_for_run` freezes again at the
    loop; `restore` undoes both."""
    if not _State.tuned and not _State.startup_frozen:
        gc.freeze()
        _State.startup_frozen = True
        _enlarge_young_generation()


def tune_for_run() -> None:
    """Freeze what exists now and enlarge the young generation until `restore`."""
    if not _State.tuned:
        _State.tuned = True
        gc.freeze()
        _enlarge_young_generation()


def freeze_at_exit() -> None:
    """At process exit, move every object to the permanent generation so the interpreter's final
    collections skip the heap (under xdist the controller waits for every worker to exit). Exit
    handlers registered earlier (coverage saves its data in one) still run after it."""
    if not _State.exit_hook:
        atexit.register(gc.freeze)
        _State.exit_hook = True


def restore() -> None:
    """Back to the collector's settings from before `freeze_startup` and `tune_for_run`; frozen objects
    are collectable again."""
    if _State.saved is not None:
        gc.set_threshold(*_State.saved)
        _State.saved = None
    if _State.tuned or _State.startup_frozen:
        gc.unfreeze()
        _State.tuned = _State.startup_frozen = False
