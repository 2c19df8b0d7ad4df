"""The pipes between an MCP server and the MCP SDK, bounded as they are read: the stdio relay and the
HTTP client.

`StderrTail` drains a server's stderr, keeping only its last bytes.

The relay is this module run as a script, so it starts in milliseconds and imports nothing of the
package: `python -I -S mcp_relay.py MAX_BYTES COMMAND [ARGS...]`. It starts the server with this
process's stdin and stderr and relays its stdout line by line (one line is one JSON-RPC message). A line
longer than MAX_BYTES is never held: from its first byte over the bound it is discarded as it arrives,
and the request it answered (its `id`, read from the line's first or last bytes) gets a JSON-RPC error
naming the bound instead; so does a line nested deeper than MAX_DEPTH. The SDK's stdio client reads
a whole line into memory before it parses it, so without this a server answering 300 MB would cost
the run 300 MB (and more while it is joined), before `tools.max_result_chars` could cut it. The SDK
stops this process and the server together (one process group on POSIX, one job on Windows); the
server's exit status is this process's.

`bounded_client` is the HTTP side: an `httpx2.AsyncClient` for a streamable-HTTP server whose JSON bodies
are bounded alike. The SDK reads a JSON body whole (`response.aread()`) before it parses it; this client
reads such a body itself, chunk by chunk (decoded: a compressed body is bounded by what it expands to),
and from the first byte over the bound drops it: the request it answered gets the relay's JSON-RPC error
(`refusal`); so does a body nested deeper than MAX_DEPTH. Server-sent events are bounded by the SDK's own
`max_sse_event_size`, which the connection sets to the same bound. It needs the [agents] extra
(`httpx2`), imported only when a benchmark has an MCP server with a `url`: the relay, run as a script,
imports only the standard library.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from typing import IO, Any

STDERR_KEEP = 64 * 1024
"""How many bytes of a server's stderr are kept while it runs (the last ones): far more than an error
quotes, so that cut goes through text that is already masked."""
REFUSED = -32001
"""The JSON-RPC error code of a refused message (a server-defined code)."""
EDGE = 4096
"""Bytes kept of each end of a refused line: where its `id` is."""
_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,18}|"(?:[^"\\]|\\.){0,200}")')


class StderrTail:
    """A server's stderr: a pipe drained by a thread that keeps only its last `keep` bytes, so a server
    that writes gigabytes costs neither memory nor disk."""

    def __init__(self, keep: int = STDERR_KEEP) -> None:
        read_fd, write_fd = os.pipe()
        self.writer = os.fdopen(write_fd, "w", encoding="utf-8", errors="replace")
        """The server's stderr (our copy of the pipe's write end is closed in `close`)."""
        self._keep = keep
        self._kept = bytearray()
        self._cut = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, args=(read_fd,), name="evalbench-mcp-stderr", daemon=True)
        self._thread.start()

    def _drain(self, read_fd: int) -> None:
        try:
            while chunk := os.read(read_fd, 65_536):
                with self._lock:
                    self._kept += chunk
                    if len(self._kept) > self._keep:
                        del self._kept[:len(self._kept) - self._keep]
                        self._cut = True
        except OSError:
            pass
        finally:
            os.close(read_fd)

    def close(self, wait: float = 2.0) -> None:
        """Close our write end and wait (bounded: a grandchild may hold the pipe) for the rest."""
        if not self.writer.closed:
            self.writer.close()
        self._thread.join(wait)

    def kept(self) -> tuple[str, bool]:
        """The kept stderr as text, and whether earlier bytes were dropped (it then starts mid-stream,
        never inside a character)."""
        with self._lock:
            data, cut_before = bytes(self._kept), self._cut
        if cut_before:
            data = data.lstrip(bytes(range(0x80, 0xC0)))
        return data.decode("utf-8", "replace"), cut_before


MAX_DEPTH = 64
"""Deepest nesting of a message's lists and objects (the package's `json_input.MAX_DEPTH`: this
module imports nothing of the package). The SDK's parser stops at its own recursion limit with an
error that leaves the request unanswered until its timeout; a message nested deeper is refused."""
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(rb"[^\[\]{}]+")


def too_deep(message: bytes | bytearray) -> bool:
    """Whether a JSON message nests its lists and objects deeper than MAX_DEPTH (strings skipped). Only
    a message with more than MAX_DEPTH brackets is scanned, and then only its brackets."""
    if message.count(b"[") + message.count(b"{") <= MAX_DEPTH:
        return False
    depth = 0
    for byte in _NOT_BRACKET.sub(b"", _STRING.sub(b"", message)):
        depth += 1 if byte in b"[{" else -1
        if depth > MAX_DEPTH:
            return True
    return False


def refusal(head: bytes, tail: bytes, size: int, limit: int, problem: str = "") -> bytes:
    """The JSON-RPC error line answering the request of a refused message, or b"" when no id is found;
    `problem` says why when it is not the size."""
    found = _ID.search(head) or next(reversed(list(_ID.finditer(tail))), None)
    if found is None:
        return b""
    try:
        ident = json.loads(found.group(1))
    except ValueError:
        return b""
    message = f"evalbench: the server's answer {problem}; it was refused" if problem else (
        f"evalbench: the server's answer was more than {limit:,} bytes (at least {size:,}); it was refused as it arrived")
    return (json.dumps({"jsonrpc": "2.0", "id": ident, "error": {"code": REFUSED, "message": message}}) + "\n").encode()


DEEP = f"nests deeper than {MAX_DEPTH} levels"


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
                if size > limit:
                    sink.write(refusal(head, tail, size, limit))
                elif too_deep(line):
                    sink.write(refusal(bytes(line[:EDGE]), bytes(line[-EDGE:]), size, limit, DEEP))
                else:
                    sink.write(bytes(line))
                sink.flush()
                line.clear()
                size, head, tail = 0, b"", b""
            start = end


def bounded_client(max_message: int, **kwargs: Any) -> Any:
    """An `httpx2.AsyncClient` (built with `kwargs`) whose JSON bodies are at most `max_message` bytes (see
    the module docstring)."""
    return _bounded_client_class()(max_message, **kwargs)


@functools.cache
def _bounded_client_class() -> type:
    import httpx2  # here, not at the top: the relay script runs without the package's dependencies

    class BoundedClient(httpx2.AsyncClient):
        """An `httpx2.AsyncClient` whose JSON bodies are at most `max_message` bytes (see the module docstring)."""

        def __init__(self, max_message: int, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.max_message = max_message

        async def send(self, request: httpx2.Request, *args: Any, **kwargs: Any) -> httpx2.Response:
            stream = kwargs.pop("stream", False)
            response = await super().send(request, *args, stream=True, **kwargs)
            if not response.headers.get("content-type", "").lower().startswith("application/json"):
                if not stream:  # what `send` without streaming does
                    try:
                        await response.aread()
                    except BaseException:
                        await response.aclose()
                        raise
                return response
            limit = self.max_message
            body = bytearray()
            size = _declared(response)
            if size <= limit:
                try:
                    async for chunk in response.aiter_bytes():
                        size = len(body) + len(chunk)
                        if size > limit:
                            break
                        body += chunk
                finally:
                    await response.aclose()
            else:
                await response.aclose()
            if size > limit:
                return httpx2.Response(200, headers={"content-type": "application/json"}, request=request,
                                       content=refusal(request.content[:EDGE], b"", size, limit))
            if too_deep(body):
                return httpx2.Response(200, headers={"content-type": "application/json"}, request=request,
                                       content=refusal(request.content[:EDGE], b"", size, limit, DEEP))
            headers = [(name, value) for name, value in response.headers.multi_items()
                       if name.lower() not in ("content-encoding", "content-length", "transfer-encoding")]
            return httpx2.Response(response.status_code, headers=headers, content=bytes(body), request=request,
                                   extensions=response.extensions)

    return BoundedClient


def _declared(response: Any) -> int:
    """The body's length as its Content-Length header declares it (0 when it declares none or nonsense)."""
    text = response.headers.get("content-length", "")
    return int(text) if text.isdigit() and len(text) < 20 else 0


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
