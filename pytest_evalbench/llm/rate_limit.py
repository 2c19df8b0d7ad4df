"""A requests-per-minute limit shared by every process on the machine (xdist workers included).

Each request reserves the next free slot in a tiny state file under an exclusive `fcntl` lock,
then sleeps until its slot: the spacing holds across workers without a coordinator, and a
crashed worker leaves nothing locked (the kernel drops the lock with the process).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from pathlib import Path


class SharedRateLimit:
    """At most `per_minute` request starts per minute across all processes using `path`."""

    def __init__(self, path: Path, per_minute: float) -> None:
        self.path = path
        self.interval = 60.0 / per_minute

    def reserve(self) -> float:
        """Claim the next slot; return the wall-clock time it starts."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
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
            os.close(fd)  # closing releases the lock

    async def wait(self) -> None:
        slot = await asyncio.to_thread(self.reserve)
        delay = slot - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
