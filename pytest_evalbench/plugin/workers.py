"""What the xdist controller tells its workers and how a worker finds its part: the `workerinput`
keys, the fixed contiguous shares and a worker's index. Imports nothing of the plugin but `_compat`, so the
options (per-worker settings) and the xdist glue both use it without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pytest_evalbench.plugin._compat import worker_count, worker_number

STATS_OUTPUT = "evalbench_stats"
SHARES_INPUT = "evalbench_shares"
"""Set in `workerinput` by the controller when the share scheduler runs this session."""
FILES_INPUT = "evalbench_whole_files"
"""Set in `workerinput` by the controller when xdist sends each data file to one worker (workers
themselves see `--dist no`)."""
SHARED_DISTS = ("load", "worksteal")
BUDGET_INPUT = "evalbench_budget_ledger"
"""Set in `workerinput` by the controller with `--evalbench-max-cost`: the session's ledger file."""


def share_bounds(count: int, workers: int, index: int) -> tuple[int, int]:
    """The contiguous slice [start, stop) of `count` items that worker `index` of `workers` runs.

    The first `count % workers` shares hold one item more; the controller and every worker
    compute the same bounds from the same collection.
    """
    size, extra = divmod(count, workers)
    start = index * size + min(index, extra)
    return start, start + size + (1 if index < extra else 0)


def worker_index(workerinput: Mapping[str, Any]) -> int | None:
    """This worker's position among the workers xdist started (`gw3` -> 3); None for a replacement
    of a crashed worker (xdist numbers those past the initial count), which owns no share."""
    index = worker_number(workerinput)
    return index if index is not None and 0 <= index < worker_count(workerinput) else None


def worker_share(workerinput: Mapping[str, Any], concurrency: int) -> int:
    """This worker's part of the requests in flight (at least one). The budget is not split: all
    workers reserve against one ledger (`BudgetController`)."""
    workers = worker_count(workerinput)
    index = worker_index(workerinput)
    start, stop = share_bounds(concurrency, workers, index if index is not None else workers - 1)
    return max(1, stop - start)
