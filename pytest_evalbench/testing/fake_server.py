"""A scripted, OpenAI-compatible chat server for tests and the performance script.

Why a home-grown server: the plugin talks to models over real HTTP (aiohttp or the official `openai`
client), so the only faithful way to exercise retries, timeouts, rate limits, TLS, proxies and broken
answers is to speak real HTTP to it. This module does that with the standard library only, binds to 127.0.0.1 exclusively
and stops promptly even while handlers are sleeping in a scripted delay.

Typical use::

    with FakeLLMServer(sequence("first", Reply(status=429, headers={"Retry-After": "0"}))) as srv:
        client = OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
"""

from __future__ import annotations

import argparse
import importlib
import signal
import socket
import ssl
import sys
import threading

from pytest_evalbench.testing._handler import Handler, QuietHTTPServer, RateWindow, ServerState
from pytest_evalbench.testing.scripts import Reply, Responder, by_model, schema_answer, sequence

__all__ = ["FakeLLMServer", "RateWindow", "Reply", "Responder", "by_model", "main", "schema_answer", "sequence"]

_LOOPBACK = "127.0.0.1"


class FakeLLMServer(ServerState):
    """A scripted OpenAI-compatible endpoint on 127.0.0.1, run in a background thread (the knobs and
    counters it shares with its request handler are in `ServerState`)."""

    def __init__(self, responder: Responder | None = None, *, latency: float = 0.0,
                 host: str = _LOOPBACK, port: int = 0, tls: ssl.SSLContext | None = None) -> None:
        """`tls`: serve HTTPS with this server-side context (its certificate must name 127.0.0.1)."""
        if host not in (_LOOPBACK, "localhost"):
            raise ValueError(f"FakeLLMServer binds to {_LOOPBACK} only, not {host!r}")
        super().__init__(responder, latency)
        self._port = port
        self._tls = tls
        self._httpd: QuietHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> FakeLLMServer:
        """Bind and serve in a daemon thread; returns self so `FakeLLMServer().start()` chains."""
        if self._httpd is not None:
            raise RuntimeError("FakeLLMServer is already running")
        self._stopping = threading.Event()
        httpd = QuietHTTPServer((_LOOPBACK, self._port), Handler)
        if self._tls is not None:  # each handshake in its handler's thread, never in the accepting one
            httpd.socket = self._tls.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.005},
                                        name=f"FakeLLMServer:{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop promptly: wake sleeping handlers, close keep-alive sockets, release the port."""
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._stopping.set()
        httpd.shutdown()
        with self._lock:
            sockets = list(self._sockets)
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        httpd.server_close()
        if thread is not None:
            thread.join(timeout=2.0)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- public knobs -----------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port (useful when constructed with port=0)."""
        if self._httpd is None:
            raise RuntimeError("FakeLLMServer is not running; call start() first")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """What to pass as `base_url` to the OpenAI client."""
        return f"{'https' if self._tls else 'http'}://{_LOOPBACK}:{self.port}/v1"


# -- command line ---------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Serve "ok" until SIGTERM/SIGINT: lets the performance script run the server out of process."""
    parser = argparse.ArgumentParser(prog="python -m pytest_evalbench.testing.fake_server",
                                     description="Scripted OpenAI-compatible server on 127.0.0.1.")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds every chat response waits")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 = any free port)")
    parser.add_argument("--reply", default="ok", help="assistant content of every answer")
    parser.add_argument("--rate-limit", type=float, default=None, metavar="RPM",
                        help="enforce RPM requests per minute (one second's worth at once; 429 beyond)")
    parser.add_argument("--responder", metavar="MODULE:NAME", help="import this Responder instead of --reply")
    args = parser.parse_args(argv)

    done = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        done.set()

    signal.signal(signal.SIGINT, on_signal)
    if hasattr(signal, "SIGTERM"):
        signal.signal(signal.SIGTERM, on_signal)
    text: str = args.reply
    responder: Responder = lambda request: Reply(content=text)  # noqa: E731
    if args.responder:
        module, _, name = args.responder.partition(":")
        responder = getattr(importlib.import_module(module), name)
    with FakeLLMServer(responder, latency=args.latency, port=args.port) as server:
        if args.rate_limit:
            server.rate_window = RateWindow(args.rate_limit)
        print(server.base_url, flush=True)
        while not done.wait(0.2):  # short waits keep signal handling responsive on every platform
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
