"""What an MCP server sends is bounded while it arrives and masked before it is cut: its stderr, its
tool list and schemas, its tool results."""

from __future__ import annotations

import asyncio
import sys
import tracemalloc
from pathlib import Path

import pytest

from pytest_evalbench.base.safe_text import SECRETS
from pytest_evalbench.formats.spec import McpServer
from pytest_evalbench.kinds.tools import STDERR_CHARS, McpConnection, ToolServerError

pytest.importorskip("mcp", reason="the [agents] extra is not installed")

KEY = "sk-tail-Q7vR2mX9pL4kW8nB3cF6hJ1dS5gT0yZe"  # 40 characters


def failed_start(tmp_path: Path, script: str) -> str:
    server = McpServer(name="loud", command=[sys.executable, "-c", script], timeout=30)
    connection = McpConnection(server, tmp_path, {})

    async def start() -> str:
        try:
            await connection.client()
        except ToolServerError as exc:
            return str(exc)
        raise AssertionError("the server started")

    return asyncio.run(start())


def test_a_server_writing_200_mb_of_stderr_is_quoted_from_a_bounded_tail(tmp_path: Path) -> None:
    script = ("import sys\nline = 'x' * 1023 + '\\n'\nfor _ in range(200 * 1024):\n    sys.stderr.write(line)\n"
              "sys.stderr.write('the end of it\\n')\nsys.exit(3)\n")
    tracemalloc.start()
    try:
        message = failed_start(tmp_path, script)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 5_000_000, peak
    assert message.endswith("the end of it") and "its stderr ends: …" in message
    assert len(message) < STDERR_CHARS + 500


@pytest.mark.parametrize("before_end", [STDERR_CHARS - 2, STDERR_CHARS + 4, STDERR_CHARS + 20, STDERR_CHARS + 38])
def test_a_key_across_the_stderr_cut_is_masked_before_the_cut(tmp_path: Path, before_end: int) -> None:
    """The key starts `before_end` characters before the end of stderr: the 600-character cut goes
    through it, or just misses it; no 4 characters of it are ever quoted."""
    SECRETS.add(KEY)
    text = "y" * 5000 + " " + KEY + " " + "z" * 100
    start = len(text) - before_end
    text = text[:start - len(KEY) - 1] + " " + KEY + " " + "z" * (before_end - len(KEY) - 1)
    message = failed_start(tmp_path, f"import sys\nsys.stderr.write({text!r})\nsys.exit(3)\n")
    assert "its stderr ends:" in message
    leaked = [KEY[i:i + 4] for i in range(len(KEY) - 3) if KEY[i:i + 4] in message]
    assert leaked == []
