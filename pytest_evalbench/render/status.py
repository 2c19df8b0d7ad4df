"""The one set of case statuses every surface shows (README "Case statuses").

A case (one test item) is `passed`, `failed`, `unscored` (the judge's answer could not be used),
`judge unreliable` (a failure whose verdict rests on a judge calibration found unreliable; pytest
reports it as xfailed and it cannot fail the build), `error` (an LLM, app or plugin error, a crash
or a skip) or `not run` (selected but never reported). Terminal, Markdown, report.html, JUnit
(`evalbench_status` property), results and history use these words and no others.
"""

from __future__ import annotations

PASSED, FAILED, UNSCORED, JUDGE_UNRELIABLE, ERROR, NOT_RUN = (
    "passed", "failed", "unscored", "judge unreliable", "error", "not run")
CASE_STATUSES = (PASSED, FAILED, UNSCORED, JUDGE_UNRELIABLE, ERROR, NOT_RUN)


def case_status(status: str, convicts: bool = True) -> str:
    """The documented status of a scored row from the kind's verdict (passed/failed/unscored) and
    whether its failure may convict the build."""
    return JUDGE_UNRELIABLE if status == FAILED and not convicts else status
