"""Every log record of a benchmark session is made safe whatever logger made it: pytest prints the
captured log of a failing item, and a library logs what outside parties sent it (an SSE event name, a
header), so escapes, CI workflow commands and secrets must be gone before any handler sees the record."""

from __future__ import annotations

import logging
import re

import pytest
from helpers import scenario, script, write_benchmark

from pytest_evalbench.base import safe_text
from pytest_evalbench.testing import FakeLLMServer

HOSTILE_LOGGING = r'''
import logging, os, pytest

@pytest.fixture(autouse=True)
def library_logs():
    log = logging.getLogger("mcp.client.streamable_http")
    event = "\x1b]0;pwned\x07\x1b[2J\n::error::from an event\n##[error]mid-line ##vso[task.setvariable]x"
    log.warning("Unknown SSE event: %s", event)
    try:
        raise ValueError("boom \x1b[31mred\x07 key " + os.environ["OPENAI_API_KEY"] + "\n::warning::in a traceback")
    except ValueError:
        log.exception("the stream broke")
    yield
'''
KEY = "QZlogs-4f9a8b7c6d5e4f3a2b1c0d9e"


def test_a_library_loggers_hostile_text_reaches_no_terminal_of_a_failing_item(
        pytester: pytest.Pytester, bench_env: FakeLLMServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    write_benchmark(pytester.path, scenarios=[scenario("m01_s001_v01", "m01")])
    pytester.makeconftest(HOSTILE_LOGGING)
    bench_env.set_responder(script(False))
    result = pytester.runpytest("--benchmark=demo", "-p", "no:randomly", "-rA")
    result.assert_outcomes(failed=1)
    output = result.stdout.str() + result.stderr.str()
    assert "Captured log setup" in output and "Unknown SSE event" in output and "the stream broke" in output
    assert "\x1b" not in output and "\x07" not in output
    assert "\\x1b]0;pwned\\x07" in output and "boom \\x1b[31mred" in output  # shown as escapes
    lines = output.splitlines()
    assert [line for line in lines if re.match(r"\s*::", line) or "##[" in line or "##vso[" in line.lower()] == []
    assert "> ::error::from an event" in output and "> ::warning::in a traceback" in output
    assert KEY[:6] not in output


def test_the_factory_is_put_back_and_chains_the_previous_one() -> None:
    before = logging.getLogRecordFactory()
    uninstall = safe_text.install()
    try:
        record = logging.getLogger("lib").makeRecord("lib", logging.ERROR, "f.py", 1, "got %r", ("\x1b[2J",), None)
        assert record.getMessage() == "got '\\x1b[2J'" and record.args is None
    finally:
        uninstall()
    assert logging.getLogRecordFactory() is before
