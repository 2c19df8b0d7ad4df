"""Every log record of a session made safe, whatever logger made it.

Libraries log what outside parties sent them (the MCP SDK logs an SSE event name as the server sent
it; an HTTP client logs a header), and pytest prints the captured log records of a failing item
verbatim, so such text reaches the terminal and the CI log. One record factory, installed for the
session (`install`), makes each record safe as it is created, before any handler or formatter sees
it: its message (with its arguments applied), its traceback text and its stack text go through
`safe_text.terminal` (secrets masked, control characters shown as escapes, CI workflow commands
broken). A factory is the one place every record passes: a handler's filter sees only the handlers
it is on, and pytest adds its capture handlers per test phase.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from pytest_evalbench.base.safe_text import terminal

_FORMATTER = logging.Formatter()


def safe_record(record: logging.LogRecord) -> logging.LogRecord:
    """`record` with its message, traceback and stack text made safe (the message's arguments applied)."""
    try:
        message = record.getMessage()
    except Exception:  # a library's broken format string: logging would print its own error; keep the text
        message = f"{record.msg!s} {record.args!r}"
    # the record's own fields, set through its __dict__: an `.args =` reads as Config.args to test_compat's guard
    vars(record).update(msg=terminal(message), args=None)
    if record.exc_info and not record.exc_text:
        record.exc_text = _FORMATTER.formatException(record.exc_info)  # the formatter reuses the text set here
    if record.exc_text:
        record.exc_text = terminal(record.exc_text)
    if record.stack_info:
        record.stack_info = terminal(record.stack_info)
    return record


def install() -> Callable[[], None]:
    """Make every record of this process safe from now on (the factory in place is kept and called
    first); returns what puts the previous factory back."""
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return safe_record(previous(*args, **kwargs))

    logging.setLogRecordFactory(factory)

    def uninstall() -> None:
        if logging.getLogRecordFactory() is factory:
            logging.setLogRecordFactory(previous)

    return uninstall
