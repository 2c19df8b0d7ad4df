"""A run store with runs in it, and `evalbench view` served from it on 127.0.0.1 by uvicorn in a thread: the
view's tests and its timing script (tests/perf/view_page.py) talk to it over real HTTP."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_evalbench.cli.view import bind
from pytest_evalbench.store.db import ItemData, RunData, Store, open_store, sqlite_url

HOSTILE = "</details><script>alert(1)</script><img src=x onerror=alert(2)> \x1b[31mred\x1b[0m \u202eevil & \"q\" 'a'"
"""A transcript's text that would act if a page did not escape it: markup, a terminal escape, a bidi override."""


def transcript(i: int, text: str = "") -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"Plan trip {i}? {text}"},
            {"role": "assistant", "content": f"Where to, traveller {i}? {text}"}]


def case(i: int, *, target: str = "tgt", metric: str = "m01", passed: bool | None = True,
         probability: float | None = None, text: str = "") -> ItemData:
    status = "unscored" if passed is None else "passed" if passed else "failed"
    present = None if passed is None else passed if metric == "m01" else not passed
    return ItemData(node_id=f"benchmarks/demo/scenarios.json::s{i:05d}_{metric}[{target}-0]", target=target,
                    metric=metric, unit=f"s{i:05d}_{metric}", sample=0, status=status, passed=passed, present=present,
                    probability=probability, decided_by="judge", justification=f"The judge on case {i}. {text}",
                    transcript=transcript(i, text))


def run_of(cases: list[ItemData], *, created: str = "2026-12-07T06:00:00Z", benchmark: str = "demo",
           branch: str = "main") -> RunData:
    return RunData(benchmark=benchmark, kind="scenarios", created=created, commit="abc1234def", branch=branch,
                   base_branch=None, plugin_version="0.1.0", targets={"tgt": "sim-target"}, judge="sim-judge",
                   verdict="passed", exit_status=0, reason="every rule holds", cost=0.0123, scope="full", cases=cases)


def new_store(path: Path) -> Store:
    return open_store(sqlite_url(path))


@dataclass
class Served:
    url: str
    token: str
    store: Store

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
        return request(self.url + path, headers=headers)

    def post_label(self, body: Any, *, token: str | None = None, content_type: str = "application/json",
                   headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        sent = {"Content-Type": content_type, **({"X-Evalbench-Token": token} if token is not None else {}),
                **(headers or {})}
        status, text = request(self.url + "/api/labels", data=data, headers=sent)
        try:
            return status, json.loads(text)
        except ValueError:
            return status, {"text": text}


def request(url: str, *, data: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, data=data, headers=headers or {}, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@contextmanager
def serve(store: Store, root: Path) -> Iterator[Served]:
    """The view app over `store` served by uvicorn on a free port of 127.0.0.1, stopped on exit."""
    import uvicorn

    from pytest_evalbench.store.view import create_app

    class QuickStop(uvicorn.Server):
        """uvicorn's server, looking for its stop every 10 ms rather than every 100 ms (its `main_loop`
        with a shorter sleep) and shutting down in uvicorn's steps without its fixed 100 ms pause for
        open connections (it waits for them every 10 ms until they are closed): every test that serves
        waits for one stop."""

        async def main_loop(self) -> None:
            counter = 0
            while not await self.on_tick(counter):
                counter = (counter + 1) % 864000
                await asyncio.sleep(0.01)

        async def shutdown(self, sockets: list[Any] | None = None) -> None:
            for listening in self.servers:
                listening.close()
            for connection in list(self.server_state.connections):
                connection.shutdown()
            deadline = time.monotonic() + 30
            while (self.server_state.connections or self.server_state.tasks) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            for listening in self.servers:
                await listening.wait_closed()
            await self.lifespan.shutdown()

    app = create_app(store.engine.connect, root, store=store.url)
    sock = bind(0)
    server = QuickStop(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        yield Served(f"http://127.0.0.1:{sock.getsockname()[1]}", app.state.token, store)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
