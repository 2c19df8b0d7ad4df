"""Recording a large run: its cases are built and written a batch at a time, all of them, in order."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pytest_evalbench.store.db import INSERT_ROWS, RunData, open_store, sqlite_url
from pytest_evalbench.store.record import ItemRows, cases_of

ROWS = 2 * INSERT_ROWS + 7


class CountingRecords(Mapping[str, Mapping[str, Any]]):
    """Records as the session's spool hands them out, counting the reads."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.reads = 0

    def __getitem__(self, node_id: str) -> Mapping[str, Any]:
        i = int(node_id.rsplit("s", 1)[1])
        if i % 3 == 2:  # an item with no record: it errored
            raise KeyError(node_id)
        self.reads += 1
        return {"target_id": "tgt", "score": {"metric_id": "m01", "id": f"row{i}", "sample": 0, "passed": i % 2 == 0,
                                              "present": True, "justification": "because", "decided_by": "judge"},
                "conversation": {"transcript": [{"role": "user", "content": f"hello {i}"}]}}

    def __iter__(self) -> Iterator[str]:
        return iter(f"n::s{i}" for i in range(self.n) if i % 3 != 2)

    def __len__(self) -> int:
        return self.n - self.n // 3


def statuses() -> list[tuple[str, str, str]]:
    return [(f"n::s{i}", "error" if i % 3 == 2 else "passed" if i % 2 == 0 else "failed",
             "the endpoint failed" if i % 3 == 2 else "") for i in range(ROWS)]


def empty_run() -> RunData:
    return RunData(benchmark="demo", kind="scenarios", created="2026-12-07T06:00:00Z", commit=None, branch=None,
                   base_branch=None, plugin_version="0.1.0", targets={"tgt": "sim-target"}, judge="sim-judge",
                   verdict="failed", exit_status=1, reason="cases failed", cost=0.0, scope="full")


def test_case_rows_build_only_the_cases_read() -> None:
    records = CountingRecords(ROWS)
    rows = ItemRows(records, statuses())
    assert len(rows) == ROWS and records.reads == 0
    batch = rows[:INSERT_ROWS]
    assert len(batch) == INSERT_ROWS and records.reads == len([i for i in range(INSERT_ROWS) if i % 3 != 2])
    assert rows[2].status == "error" and rows[2].justification == "the endpoint failed" and rows[2].target == ""
    assert rows[4].unit == "row4" and rows[4].passed is True and rows[4].transcript == [{"role": "user", "content": "hello 4"}]
    assert list(rows) == cases_of(records, statuses())


def test_a_run_larger_than_one_insert_is_recorded_whole_and_in_order(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "runs.sqlite")
    records = CountingRecords(ROWS)
    with open_store(url) as store:
        run_id = store.record(empty_run(), ItemRows(records, statuses()))
    with open_store(url) as store:
        stored = store.run(run_id)
    assert stored is not None and stored.case_count == ROWS and len(stored.cases) == ROWS
    assert [c.node_id for c in stored.cases] == [s[0] for s in statuses()]
    assert [c.status for c in stored.cases] == [s[1] for s in statuses()]
    assert stored.cases[ROWS - 1].transcript == [{"role": "user", "content": f"hello {ROWS - 1}"}]
