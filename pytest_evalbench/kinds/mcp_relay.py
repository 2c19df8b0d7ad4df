"""The pipe between an MCP server's stdout and the MCP SDK, bounding each message as it arrives.

Run as a script (standard library only, so it starts in milliseconds and imports nothing of the
package): `python -I -S mcp_relay.py MAX_BYTES COMMAND [ARGS...]`. It starts the server with this
process's stdin and stderr and relays its stdout line by line (one line is one JSON-RPC message). A line
longer than MAX_BYTES is never held: from its first byte over the bound it is discarded as it arrives,
and the request it answered (its `id`, read from the line's first or last bytes) gets a JSON-RPC error
naming the bound instead. The SDK's stdio client reads a whole line into memory before it parses it, so
without this a server answering 300 MB would cost the run 300 MB (and more while it is joined), before
`tools.max_result_chars` could cut it. The SDK stops this process and the server together (one process
group on POSIX, one job on Windows); the server's exit status is this process's.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from typing import IO

REFUSED = -32001
"""The JSON-RPC error code of a refused message (a server-defined code)."""
EDGE = 4096
"""Bytes kept of each end of a refused line: where its `id` is."""
_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,200}")')


def refusal(head: bytes, tail: bytes, size: int, limit: int) -> bytes:
    """The JSON-RPC error line answering the request of a refused message, or b"" when no id is found."""
    found = _ID.search(head) or next(reversed(list(_ID.finditer(tail))), None)
    if found is None:
        return b""
    try:
        ident = json.loads(found.group(1))
    except ValueError:
        return b""
    message = (f"evalbench: the server's answer was more than {limit:,} bytes (at least {size:,}); "
               "it was refused as it arrived")
    return (json.dumps({"jsonrpc": "2.0", "id": ident, "error": {"code": REFUSED, "message": message}}) + "\n").encode()


def relay(source: IO[bytes], sink: IO[bytes], limit: int) -> None:
    """Copy `source` to `sink` line by line, each line at most `limit` bytes (see the module docstring)."""
    line = bytearray()
    size = 0
    head, tail = b"", b""
    while chunk := source.read1(65_536):  # type: ignore[attr-defined]
        start = 0
        while start < len(chunk):
            newline = chunk.find(b"\n", start)
            end = len(chunk) if newline == -1 else newline + 1
            piece = chunk[start:end]
            size += len(piece)
            if size <= limit:
                line += piece
            else:
                if not head:
                    head = bytes((line + piece)[:EDGE])
                    line.clear()
                tail = (tail + piece)[-EDGE:]
            if newline != -1:
                sink.write(bytes(line) if size <= limit else refusal(head, tail, size, limit))
                sink.flush()
                line.clear()
                size, head, tail = 0, b"", b""
            start = end


def main(argv: list[str]) -> int:
    limit, command = int(argv[1]), argv[2:]
    try:
        server = subprocess.Popen([shutil.which(command[0]) or command[0], *command[1:]], stdout=subprocess.PIPE)
    except OSError as exc:
        sys.stderr.write(f"{command[0]}: {exc}\n")
        return 127
    assert server.stdout is not None
    try:
        relay(server.stdout, sys.stdout.buffer, limit)
    except (BrokenPipeError, KeyboardInterrupt):
        server.kill()
    return server.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
