"""Property tests of the built-in client's response parsing (llhttp through httptools), driven
without a socket: bytes are fed to one connection in arbitrary pieces, then the peer closes.

- a valid answer, however it is framed and wherever it is split, parses to the same body;
- any bytes at all (random, or a valid answer mutated) end the exchange once the peer has closed
  (never a hang), as a Response or one of the documented exceptions (never anything else, and
  never an exception out of the protocol callbacks into the event loop).
"""

from __future__ import annotations

import asyncio
import gzip
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_evalbench.llm.http1 import ProtocolError, Response, ResponseTooLarge, ServerDisconnected, _Connection

CAP = 1 << 16


class FakeTransport(asyncio.Transport):
    """What `_Connection` needs of an asyncio transport."""

    def __init__(self) -> None:
        super().__init__()
        self.aborted = False
        self.written = b""

    def write(self, data: bytes) -> None:
        self.written += data

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.aborted


def exchange(pieces: list[bytes], max_bytes: int = CAP) -> Response | BaseException:
    """Feed `pieces` to a fresh connection, then close it; the answer or the exception it ended with."""

    async def go() -> Response | BaseException:
        connection = _Connection(max_bytes)
        connection.connection_made(FakeTransport())  # type: ignore[arg-type]
        waiter = connection.send(b"POST / HTTP/1.1\r\n\r\n")
        for piece in pieces:
            connection.data_received(piece)  # must never raise
            if waiter.done():
                break
        if not waiter.done():
            connection.connection_lost(None)
        assert waiter.done(), "the exchange did not end after the peer closed"
        exc = waiter.exception()
        return exc if exc is not None else waiter.result()

    return asyncio.run(go())


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)]) if b > a] or [b""]


@st.composite
def answers(draw: st.DrawFn) -> tuple[bytes, int, bytes]:
    """(bytes on the wire, status, body the caller must get) of a valid answer."""
    status = draw(st.sampled_from([200, 201, 400, 429, 500]))
    body = draw(st.binary(max_size=3000))
    encoding = draw(st.sampled_from(["identity", "gzip", "deflate"]))
    wire_body = {"identity": body, "gzip": gzip.compress(body), "deflate": zlib.compress(body)}[encoding] if body else b""
    framing = draw(st.sampled_from(["length", "chunked", "close"]))
    head = [f"HTTP/1.1 {status} Some Reason", "Content-Type: application/json",
            *(f"X-Extra-{i}: {v}" for i, v in enumerate(draw(st.lists(st.text("abc xyz;=", max_size=20), max_size=4))))]
    if encoding != "identity" and body:
        head.append(f"Content-Encoding: {encoding}")
    if framing == "length":
        head.append(f"Content-Length: {len(wire_body)}")
        payload = wire_body
    elif framing == "chunked":
        head.append("Transfer-Encoding: chunked")
        cuts = sorted(draw(st.lists(st.integers(0, max(0, len(wire_body))), max_size=6)))
        parts = [wire_body[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire_body)]) if b > a]
        ext = draw(st.sampled_from(["", ";name=value"]))
        payload = b"".join(b"%x%s\r\n%s\r\n" % (len(p), ext.encode(), p) for p in parts)
        payload += b"0\r\n" + (b"X-Trailer: t\r\n" if draw(st.booleans()) else b"") + b"\r\n"
    else:
        head.append("Connection: close")
        payload = wire_body
    interim = b"HTTP/1.1 100 Continue\r\n\r\n" if draw(st.booleans()) else b""
    return interim + ("\r\n".join(head) + "\r\n\r\n").encode() + payload, status, body


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(answers(), st.lists(st.integers(min_value=0), max_size=12))
def test_a_valid_answer_split_anywhere_parses_to_the_same_body(answer: tuple[bytes, int, bytes], cuts: list[int]) -> None:
    wire, status, body = answer
    whole = exchange([wire])
    pieces = exchange(split(wire, cuts))
    byte_by_byte = exchange([wire[i:i + 1] for i in range(len(wire))]) if len(wire) < 600 else whole
    for result in (whole, pieces, byte_by_byte):
        assert isinstance(result, Response), result
        assert (result.status, result.body) == (status, body)


DOCUMENTED = (ProtocolError, ServerDisconnected)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid answer with a few bytes replaced, inserted or deleted."""
    wire = bytearray(draw(answers())[0])
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, max(0, len(wire) - 1)))
        action = draw(st.sampled_from(["replace", "insert", "delete"]))
        byte = draw(st.sampled_from([b"\r", b"\n", b":", b" ", b"0", b"f", b"x", b"-", b"\x00", b"\xff", b";"]))
        if action == "replace" and wire:
            wire[at:at + 1] = byte
        elif action == "insert":
            wire[at:at] = byte
        elif wire:
            del wire[at]
    return bytes(wire)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=400), mutated(),
                 st.builds(lambda b: b"HTTP/1.1 200 OK\r\n" + b, st.binary(max_size=300))),
       st.lists(st.integers(min_value=0), max_size=8))
def test_any_bytes_end_the_exchange_with_an_answer_or_a_documented_error(data: bytes, cuts: list[int]) -> None:
    result = exchange(split(data, cuts))
    assert isinstance(result, (Response, *DOCUMENTED)), repr(result)
    if isinstance(result, Response):
        assert len(result.body) <= CAP


@pytest.mark.parametrize("size_line", [b"0x1f", b"1_0", b"+10", b"-10", b" 10", b"1f 1", b"10000000000000000000"])
def test_chunk_sizes_are_hex_digits_only(size_line: bytes) -> None:
    # the hand-written parser took int(..., 16), which reads "0x1f" as 31 and "1_0" as 16
    wire = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + size_line + b"\r\n"
            + b"a" * 31 + b"\r\n0\r\n\r\n")
    assert isinstance(exchange([wire]), ProtocolError)


@pytest.mark.parametrize(("wire", "message"), [
    (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (CAP + 1), "Content-Length"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + (b"1000\r\n" + b"a" * 4096 + b"\r\n") * 20, "cap"),
    # mtime=0: the gzip header holds a timestamp, and a parameter's bytes are in its node id, which
    # every xdist worker must collect identically (workers collecting a second apart differed)
    (b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n\r\n" + gzip.compress(b"a" * (CAP * 4), mtime=0), "inflates"),
    (b"HTTP/1.1 200 OK\r\n" + b"X: " + b"y" * 70_000, "head too large"),
], ids=["content-length", "chunked", "gzip", "head"])
def test_answers_over_the_caps(wire: bytes, message: str) -> None:
    result = exchange(split(wire, list(range(0, len(wire), 4096))), max_bytes=CAP)
    assert isinstance(result, ProtocolError) and message in str(result), result
    if message != "head too large":
        assert isinstance(result, ResponseTooLarge)
