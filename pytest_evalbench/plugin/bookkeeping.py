"""Each item's outcome (a role of the session; `session.py` keeps the hooks).

`Bookkeeping`: each item's record, status and error, from the fixture that waits for its pipeline
(`scheduler.py`) to the report the controller consumes. Every selected item ends scored or counted
(`gate/completeness.py`); a configuration problem that hits every item is shown in full once.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_evalbench.base.errors import EvalbenchError, LLMError, TargetError
from pytest_evalbench.base.safe_files import WriteFailed
from pytest_evalbench.base.safe_text import redact, terminal
from pytest_evalbench.base.spool import Spool
from pytest_evalbench.gate.completeness import NOT_DRAWN, WORKER_DIED, Completeness, crash_reason
from pytest_evalbench.gate.decision import Failures
from pytest_evalbench.kinds.protocol import JSONRecord
from pytest_evalbench.plugin._compat import attach, junit_requested, read, xfail_reason
from pytest_evalbench.plugin.nodes import CASE_DECIDED, CaseItem, Decided
from pytest_evalbench.plugin.scheduler import Scheduler
from pytest_evalbench.plugin.selection import Selection
from pytest_evalbench.render.terminal import transcript_text
from pytest_evalbench.render.views import ERROR, NOT_RUN, UNSCORED, case_status, error_group, error_line

if TYPE_CHECKING:
    from pytest_evalbench.render.summary import CaseStatus

RECORD_ATTR, ERROR_ATTR, STATUS_ATTR, DECIDED_ATTR = ("evalbench", "evalbench_error", "evalbench_status",
                                                     "evalbench_decided_by")
"""What a report carries (`_compat.attach`): the item's record (teardown), why it errored, the kind's status
and who decided the verdict (`check` or `judge`)."""
PYTEST_OUTCOMES = (pytest.fail.Exception, pytest.skip.Exception, pytest.xfail.Exception, pytest.exit.Exception)


class Unscored(EvalbenchError):
    """The judge could not be parsed: the row is recorded with nulls and the item is an ERROR."""


class Bookkeeping:
    """Per-item outcomes and error accounting of this session."""

    def __init__(self, config: pytest.Config, selection: Selection, scheduler: Scheduler, bench_dir: Path) -> None:
        self.config = config
        self.selection = selection
        self.scheduler = scheduler
        self.records: Spool[str] = Spool(bench_dir)
        """Node id -> record (JSON), spooled to disk as reports arrive (controller and single process)."""
        self.write_failure: WriteFailed | None = None
        """The spool's first write the disk refused: the run's records are incomplete from there on."""
        self.tally = Completeness()
        self.errors = self.tally.errors
        self.messages: dict[str, str] = {}
        """Node id -> the one-line error of an item that ERRORed (collapsed in the summary)."""
        self._first_with: dict[str, str] = {}
        """Error (its whole message, variable parts normalised) -> the first item that had it (a dict:
        10,000 failing items stay linear)."""
        self.failed: set[str] = set()
        self.unreliable: set[str] = set()
        """Items whose failure rests on an unreliable judge (reported as xfailed)."""
        self.reasons: dict[str, str] = {}
        """Node id -> the first line of a failed (or judge-unreliable) item's message."""
        self.deciders: dict[str, str] = {}
        """Node id -> who decided a failed (or judge-unreliable) item's verdict: `check` or `judge`."""
        self.junit = junit_requested(config)
        """Whether items carry JUnit properties: pytest copies `item.user_properties` onto each of an
        item's three reports, which its terminal reporter keeps for the whole session, so they are
        filled only for the one sink that reads them (`--junitxml`)."""

    def selected(self, ids: list[str]) -> None:
        """Controller side: these items must each end scored or counted."""
        self.tally.select([i for i in ids if self.selection.is_case(i)])

    def worker_died(self, report: pytest.TestReport) -> None:
        """xdist lost the worker running this item: it is counted, never silently dropped."""
        attach(report, ERROR_ATTR, WORKER_DIED)

    def record_for(self, item: pytest.Item) -> JSONRecord:
        """Wait for the item's pipeline; let the kind decide its outcome; raise for rows that must ERROR.
        The typed record becomes JSON here, once: the fixture's value and the teardown report's payload."""
        assert isinstance(item, CaseItem)
        record = self.scheduler.wait(item)

        hook = self.config.hook.pytest_evalbench_judged_row

        def judged_row(row: dict[str, Any], rec: JSONRecord) -> None:
            hook(config=self.config, row=row, record=rec)

        kind = self.selection.kind
        outcome = kind.outcome(record, judged_row if hook.get_hookimpls() else None)
        if outcome.status == NOT_DRAWN:  # no row, no record: a skip by design, accounted for by its status
            item.stash[CASE_DECIDED] = Decided(outcome, None)
            if self.junit:
                item.user_properties.append(("evalbench_status", NOT_DRAWN))
            pytest.skip(outcome.message)
        data = kind.record_to_json(record)
        if self.junit:
            item.user_properties.extend((name, redact(value) if isinstance(value, str) else value)
                                        for name, value in outcome.properties)  # JUnit XML
            item.user_properties.append(("evalbench_status", case_status(outcome.status, outcome.convicts)))
        item.stash[CASE_DECIDED] = Decided(outcome, data)
        if outcome.status == "unscored":
            raise Unscored(outcome.message or "unscored")
        return data

    def make_report(self, item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport) -> None:
        """Short one-line reprs for our errors; attach the item's record to its teardown report."""
        exc = call.excinfo.value if call.excinfo else None
        if isinstance(exc, EvalbenchError):
            kind = "unscored" if isinstance(exc, Unscored) else (
                "target error" if isinstance(exc, TargetError) else
                exc.category if isinstance(exc, LLMError) else "error")
            report.longrepr = terminal(f"evalbench {kind}: {exc}")
            attach(report, ERROR_ATTR, kind)
        elif exc is not None and isinstance(item, CaseItem) and not isinstance(exc, PYTEST_OUTCOMES):
            attach(report, ERROR_ATTR, crash_reason(exc))
            report.longrepr = terminal(str(report.longrepr))  # its message may quote model or endpoint text
        if self.junit and read(report, ERROR_ATTR) and not any(k == "evalbench_status" for k, _ in item.user_properties):
            item.user_properties.append(("evalbench_status", ERROR))  # JUnit: the documented status
        if not isinstance(item, CaseItem):
            return
        outcome, record = item.stash.get(CASE_DECIDED, None) or (None, None)
        if outcome is not None:
            attach(report, STATUS_ATTR, outcome.status)
            if call.when == "call" and outcome.status == "failed" and outcome.decided_by is not None:
                attach(report, DECIDED_ATTR, outcome.decided_by)  # read only for a failed case's call
        if call.when == "call" and report.failed and record is not None and self.config.getoption("verbose") > 0:
            full = transcript_text(record)
            if full:
                report.longrepr = f"{report.longrepr}\n{terminal(full)}"
        if call.when == "teardown":
            self._release(item, report)

    def _release(self, item: CaseItem, report: pytest.TestReport) -> None:
        """The item is done: its record moves to the teardown report (which the controller, or xdist
        on the way there, consumes) and nothing of it stays on the item or in the engine."""
        decided = item.stash.get(CASE_DECIDED, None)
        if decided is not None:
            if decided.record is not None:
                attach(report, RECORD_ATTR, decided.record)
            del item.stash[CASE_DECIDED]
        self.scheduler.release(item.nodeid)

    def consume(self, report: pytest.TestReport) -> None:
        """Controller side (and no-xdist runs): keep every item's record, status and first error;
        any failure other than the kind's own `failed` verdict, and any skip, is an error."""
        nodeid = report.nodeid
        status = read(report, STATUS_ATTR)
        error = read(report, ERROR_ATTR)
        xfailed = xfail_reason(report)
        if error is None and report.failed and not (report.when == "call" and status == "failed"):
            error = "crashed"
        if error is None and report.skipped and status != NOT_DRAWN and not (
                report.when == "call" and status == "failed" and xfailed is not None):
            error = "skipped"  # an xfailed verdict (judge unreliable: cannot convict) is still a scored row
        if error:
            self.tally.error(nodeid, error)
            self._collapse_repeated(report, error)
        if status is not None and report.when == "teardown":
            self.tally.status(nodeid, status)
        if report.when == "call" and status == "failed" and (report.failed or xfailed is not None):
            if xfailed is not None:
                self.unreliable.add(nodeid)
            self.deciders[nodeid] = read(report, DECIDED_ATTR) or "judge"
            text = str(xfailed or report.longrepr or "")
            self.reasons[nodeid] = text.removeprefix("reason: ").splitlines()[0] if text.strip() else ""
        record = read(report, RECORD_ATTR)
        if record is not None and self.write_failure is None:  # the one place a record arriving on the controller is stored
            try:
                self.records.add(nodeid, record)
            except WriteFailed as exc:  # a full disk: the finish says so and writes no result file
                self.write_failure = exc
        if report.failed and report.when == "call":
            self.failed.add(report.nodeid)

    def failures(self) -> Failures:
        """This session's failed items counted by who decided them, and the judge-unreliable ones."""
        failed = [self.deciders.get(nodeid, "judge") for nodeid in self.failed]
        return Failures(check=failed.count("check"), judge=len(failed) - failed.count("check"),
                        unreliable=len(self.unreliable))

    def _collapse_repeated(self, report: pytest.TestReport, kind: str) -> None:
        """A configuration problem that hits every item is shown in full once: later items whose whole
        message is the same (but for its variable parts, `error_group`) point at the first one; the
        summary counts them by their one line ("500 items: <message>"). Different errors are each shown."""
        message = str(report.longrepr) if report.longrepr else kind
        first = self._first_with.setdefault(error_group(message), report.nodeid)
        self.messages[report.nodeid] = error_line(message)
        if first != report.nodeid:
            report.longrepr = f"evalbench {kind}: same error as {first} (see the evalbench summary)"

    def case_statuses(self) -> list[CaseStatus]:
        """Every selected item of this session with its documented status (`render.summary.CASE_STATUSES`)."""
        from pytest_evalbench.render.summary import CaseStatus

        tally = self.tally
        out = []
        for nodeid in sorted(set().union(tally.selected, tally.scored, tally.errors)):  # one set, not three
            if nodeid in tally.errors:
                status = UNSCORED if tally.errors[nodeid] == UNSCORED else ERROR
                reason = self.messages.get(nodeid, tally.errors[nodeid])
            elif nodeid in tally.scored:
                status = case_status(tally.scored[nodeid], nodeid not in self.unreliable)
                reason = self.reasons.get(nodeid, "") if status != UNSCORED else ""
            else:
                status, reason = NOT_RUN, "never reported"
            out.append(CaseStatus(nodeid, status, reason))
        return out
