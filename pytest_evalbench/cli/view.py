"""`evalbench view`: serve the run store's pages (store/view.py) on 127.0.0.1 with uvicorn until Ctrl-C.

starlette, uvicorn and jinja2 (the `[view]` extra) are imported only when the command runs."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path
from typing import Any

DEFAULT_PORT = 8765
HOST = "127.0.0.1"
"""The only address the view listens on: its pages show transcripts and its API writes files."""


def add_view_parser(sub: Any) -> None:
    view = sub.add_parser("view", help="Serve the run store as local web pages on 127.0.0.1: runs, a run's cases, "
                                       "two runs side by side, and labels for judge calibration")
    view.add_argument("--store", metavar="URL", default=None,
                      help="the run store's SQLAlchemy URL (default: $EVALBENCH_STORE, else .evalbench/runs.sqlite "
                           "under --root)")
    view.add_argument("--port", type=int, default=DEFAULT_PORT, metavar="P",
                      help=f"port on 127.0.0.1 (default: {DEFAULT_PORT}; 0 picks a free one)")
    view.add_argument("--root", type=Path, default=None, metavar="DIR",
                      help="project root that holds benchmarks/ and .evalbench/ (default: the current directory); "
                           "labels are written to its benchmarks/NAME/calibration.jsonl")


def bind(port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:`port` (0: a free port), listening before uvicorn starts, so the
    address printed is served from the moment it is printed."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
        sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    except OSError:
        sock.close()
        raise
    return sock


def run_view(args: argparse.Namespace) -> int:
    """Serve until interrupted: 0; 2 when the extra is missing, the store cannot be opened or the port is taken."""
    from pytest_evalbench.base.safe_text import terminal

    def fail(message: str) -> int:
        print(terminal(f"evalbench view: {message}"), file=sys.stderr)
        return 2

    try:
        import uvicorn

        from pytest_evalbench.store.view import create_app
    except ImportError as exc:
        return fail(f"needs the [view] extra ({exc.name} is not installed): pip install 'pytest-evalbench[view]'")
    from pytest_evalbench.store.db import StoreError, masked_url, open_store
    from pytest_evalbench.store.record import STORE_DIR, STORE_FILE, is_default, store_url

    if not 0 <= args.port <= 65535:
        return fail(f"--port {args.port} is not a port (0-65535)")
    root = (args.root or Path.cwd()).resolve()
    url = store_url(root, args.store, os.environ)
    if url is None:
        return fail("the run store is switched off (EVALBENCH_STORE=none): give --store URL")
    if is_default(url, root) and not (root / STORE_DIR / STORE_FILE).is_file():
        return fail(f"no run store at {root / STORE_DIR / STORE_FILE}: every `pytest --benchmark=NAME` run records "
                    "one there (or name one with --store URL)")
    try:
        store = open_store(url)
    except StoreError as exc:
        return fail(str(exc))
    try:
        sock = bind(args.port)
    except OSError as exc:
        store.close()
        return fail(f"cannot listen on {HOST}:{args.port} ({exc.strerror}); choose another with --port")
    port = sock.getsockname()[1]
    app = create_app(store.engine.connect, root, store=store.url)
    print(f"evalbench view: http://{HOST}:{port}/ (store {masked_url(url)}); Ctrl-C stops it", flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
        store.close()
    return 0
