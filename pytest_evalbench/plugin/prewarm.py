"""The xdist controller imports what its finish needs while the workers run the items.

The controller runs no item: during the test loop it only waits for the workers' reports. Its
finish (result files, gate, summary, HTML, history) imports ~20 modules that nothing needs before;
imported there, they add to the run's wall time after the last item (~20 ms). A background thread
imports them during the loop instead. Imports are idempotent and the import graph has no cycle
(tests/unit/test_layers.py), so the finish's own import of a module the thread is importing waits
for it, and a module that fails to import fails again where the finish imports it, as before.
"""

from __future__ import annotations

import importlib
import threading

THREAD_NAME = "evalbench-prewarm"
FINISH_MODULES = (
    "pytest_evalbench.gate.outcome",
    "pytest_evalbench.gate.verdict",
    "pytest_evalbench.commands",
    "pytest_evalbench.render.summary",
    "pytest_evalbench.render.history",
    "pytest_evalbench.render.html",
)
"""What `Results.finish` and `Reporting.write_reports` import (with what those import)."""


def _import_all(names: tuple[str, ...]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # the finish imports it again and reports what fails there
            return


def start(names: tuple[str, ...] = FINISH_MODULES) -> threading.Thread:
    """Import `names` in a daemon thread; nobody joins it (the finish's imports wait for a module
    the thread is importing)."""
    thread = threading.Thread(target=_import_all, args=(names,), name=THREAD_NAME, daemon=True)
    thread.start()
    return thread
