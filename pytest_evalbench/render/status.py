"""The one set of case statuses every surface shows (docs/reference/case-statuses.md).

A case (one test item) is `passed`, `failed`, `unscored` (the judge's answer could not be used),
`judge unreliable` (a failure whose verdict rests on a judge calibration found unreliable; pytest
reports it as xfailed and it cannot fail the build), `error` (an LLM, app or plugin error, a crash
or a skip) or `not run` (selected but never reported). Terminal, Markdown, report.html, JUnit
(`evalbench_status` property), results and history use these words and no others.
"""

from __future__ import annotations

import re

PASSED, FAILED, UNSCORED, JUDGE_UNRELIABLE, ERROR, NOT_RUN = (
    "passed", "failed", "unscored", "judge unreliable", "error", "not run")
CASE_STATUSES = (PASSED, FAILED, UNSCORED, JUDGE_UNRELIABLE, ERROR, NOT_RUN)


def case_status(status: str, convicts: bool = True) -> str:
    """The documented status of a scored row from the kind's verdict (passed/failed/unscored) and
    whether its failure may convict the build."""
    return JUDGE_UNRELIABLE if status == FAILED and not convicts else status


_VARIABLE_PARTS = [
    (re.compile(r"0x[0-9a-fA-F]+"), "0x…"),
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<id>"),
    (re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{12,}\b"), "<id>"),
    (re.compile(r"\b((?:req|request|chatcmpl|run|call|msg|id)[-_])[A-Za-z0-9]{6,}\b"), r"\1<id>"),
    (re.compile(r"((?:localhost|\d{1,3}(?:\.\d{1,3}){3}|\]|[A-Za-z0-9-]\.[A-Za-z]{2,}):)\d{2,5}\b"), r"\1<port>"),
    (re.compile(r"\b(port)[ =]\d{2,5}\b", re.IGNORECASE), r"\1 <port>"),
    (re.compile(r"\b\d+(?:\.\d+)?\s?(ms|s|sec|seconds)\b"), r"<n>\1"),
]
"""Variable parts of error messages (addresses, ids, ports, elapsed times) so one cause is one group."""


def error_group(message: str) -> str:
    """The message with its variable parts replaced by placeholders (`0x…`, `<id>`, `<port>`, `<n>s`)."""
    for pattern, replacement in _VARIABLE_PARTS:
        message = pattern.sub(replacement, message)
    return message
