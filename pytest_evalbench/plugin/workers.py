"""What the xdist controller tells its workers and how a worker finds its part: the `workerinput`
keys, the fixed contiguous shares and a worker's index. Imports nothing of the plugin but `_compat`, so the
options (per-worker settings) and the xdist glue both use it without importing each other.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from ._compat import worker_count, worker_number

if TYPE_CHECKING:
    from ..spec import BenchmarkSpec

T = TypeVar("T")

STATS_OUTPUT = "evalbench_stats"
SHARES_INPUT = "evalbench_shares"
"""Set in `workerinput` by the controller when the share scheduler runs this session."""
FILES_INPUT = "evalbench_whole_files"
"""Set in `workerinput` by the controller when xdist sends each data file to one worker (workers
themselves see `--dist no`)."""
SHARED_DISTS = ("load", "worksteal")
BUDGET_INPUT = "evalbench_budget_ledger"
"""Set in `workerinput` by the controller with `--evalbench-max-cost`: the session's ledger file."""
SPEC_INPUT = "evalbench_spec"
"""Set in `workerinput` by the controller that loaded benchmark.yaml before starting workers: the
validated spec (pickled; execnet carries only plain data). A worker then neither imports yaml nor
builds the spec models' validators again (~20 ms CPU per worker, ahead of its first item)."""
SPEC_RUNTIME_INPUT = "evalbench_spec_runtime"
ROWS_INPUT = "evalbench_rows"
"""Set in `workerinput` beside the spec when the controller's preflight loaded the cases of a kind
that hands them over (its `handoff`, `scenarios.load_memo.RowHandoff`): a worker takes them instead
of parsing and validating the data file again (at N = 10,000 about 0.2 s of each worker's start)."""


def _runtime() -> str:
    """What a pickled spec depends on: a worker started with another interpreter (`--tx
    popen//python=...`) or other package versions reads benchmark.yaml itself."""
    from pydantic import VERSION

    from .._version import __version__

    return f"{sys.version}|{VERSION}|{__version__}"


def pack_spec(spec: BenchmarkSpec) -> dict[str, Any]:
    """The `workerinput` entries that hand `spec` to a worker (none when it does not pickle)."""
    try:
        return {SPEC_INPUT: pickle.dumps(spec, protocol=pickle.HIGHEST_PROTOCOL), SPEC_RUNTIME_INPUT: _runtime()}
    except (pickle.PicklingError, TypeError, AttributeError):
        return {}


def _handed(workerinput: Mapping[str, Any], name: str, kind: type[T]) -> T | None:
    """`workerinput[name]` when it is a `kind` and the controller runs this worker's runtime
    (`SPEC_RUNTIME_INPUT`), else None."""
    value = workerinput.get(name)
    return value if isinstance(value, kind) and workerinput.get(SPEC_RUNTIME_INPUT) == _runtime() else None


def handed_rows(workerinput: Mapping[str, Any]) -> str | None:
    """The rows the controller handed over (`ROWS_INPUT`), when it runs this worker's runtime."""
    return _handed(workerinput, ROWS_INPUT, str)


def unpack_spec(workerinput: Mapping[str, Any]) -> BenchmarkSpec | None:
    """The spec the controller validated, or None (it had not loaded one, or runs another runtime: the
    worker loads the file and reports what fails, as before). The bytes come from this run's
    controller, which also sends the worker its code (execnet): nothing from outside the run."""
    packed = _handed(workerinput, SPEC_INPUT, bytes)
    if packed is None:
        return None
    spec: BenchmarkSpec = pickle.loads(packed)
    return spec


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
