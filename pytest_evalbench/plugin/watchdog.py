"""Orphan watchdog: an xdist worker whose controller died stops at once."""

from __future__ import annotations

import os
import sys
import threading

ORPHAN_EXIT = 3
"""Exit status of a worker that stopped because its controller is gone."""


def controller_alive(pid: int) -> bool:
    """Whether the process that started this worker still runs (POSIX: we were not re-parented)."""
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
        import ctypes

        kernel32 = ctypes.windll.kernel32
        handle = kernel32.OpenProcess(0x00100000, False, pid)  # SYNCHRONIZE
        if not handle:
            return False
        try:
            return bool(kernel32.WaitForSingleObject(handle, 0) == 0x102)  # WAIT_TIMEOUT: still running
        finally:
            kernel32.CloseHandle(handle)
    return os.getppid() == pid


class OrphanWatchdog:
    """Registered on xdist workers: a worker whose controller died (kill -9, OOM) exits at once
    instead of paying for LLM calls whose results nobody can receive."""

    def __init__(self, interval: float = 0.5) -> None:
        self.parent = os.getppid()
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="evalbench-orphan-watchdog", daemon=True)

    def start(self) -> OrphanWatchdog:
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            if not controller_alive(self.parent):
                sys.stderr.write(f"evalbench: xdist controller (pid {self.parent}) is gone; worker stops\n")
                sys.stderr.flush()
                os._exit(ORPHAN_EXIT)

    def pytest_unconfigure(self) -> None:
        self._stop.set()
