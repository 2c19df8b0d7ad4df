"""`evalbench view`: the run store as local web pages (a Starlette app, Jinja2 templates with autoescape),
and the labelling API. Imported only by the view command: starlette and jinja2 come with the `[view]` extra.

Pages: `/` the runs and each metric's rate over runs; `/runs/<id>` a run's cases with transcripts,
filtered and paged, the cases most worth a label first; `/compare/<a>/<b>` two runs side by side, flipped
cases first. Everything a run recorded is hostile text: it reaches a page only through the templates'
autoescape, with control and direction-changing characters written as escapes.

`POST /api/labels` writes: only with the header `X-Evalbench-Token` equal to the token of this server's
pages (a random one per start), a JSON content type, a body within `MAX_LABEL_BODY` of the documented shape,
and a Host (and Origin, when sent) of this server; so another page open in the same browser, a cross-site
form or a DNS-rebound name cannot write a label.
"""

from __future__ import annotations

import html
import json
import secrets
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlencode, urlsplit

from jinja2 import Environment, PackageLoader, select_autoescape
from sqlalchemy.engine import Connection, Row
from sqlalchemy.exc import SQLAlchemyError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from pytest_evalbench.base.errors import EvalbenchError
from pytest_evalbench.base.safe_text import control_visible, redact, terminal
from pytest_evalbench.formats.spec import resolve_benchmark_dir
from pytest_evalbench.store import query as q
from pytest_evalbench.store.db import StoreError, check_cases, checked_case, checked_run, newest_runs, run_row
from pytest_evalbench.store.labelling import (
    MAX_LABEL_BODY,
    append_label,
    label_problem,
    labelled_lines,
    parse_label_request,
    read_thresholds,
)

TOKEN_HEADER = "X-Evalbench-Token"
VIEW_RUNS = 500
"""The newest runs the runs page lists."""
HOSTS = ("127.0.0.1", "localhost")
"""The Host names a request may carry: the server listens on 127.0.0.1 only."""
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
"""Every response's headers: no inline script or outside resource, no framing, pages never cached (they
carry the token)."""


def visible(value: object) -> str:
    """Recorded text as a page shows it: secrets the process knows masked, control and direction-changing
    characters as escapes (newlines and tabs kept); the template's autoescape then escapes the markup."""
    return control_visible(redact("" if value is None else str(value)))


@dataclass(frozen=True)
class ViewConfig:
    """What one server serves: the store's connections, the project root that holds benchmarks/ (labels are
    written there) and the token its pages carry."""

    connect: Callable[[], Connection]
    root: Path
    token: str
    store: str = "of this view"
    """The store as its errors name it (its masked URL)."""


def _templates() -> Environment:
    env = Environment(loader=PackageLoader("pytest_evalbench.store", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True), trim_blocks=True,
                      lstrip_blocks=True)
    env.filters["visible"] = visible
    env.filters["json"] = lambda v: json.dumps(v, ensure_ascii=False, sort_keys=True, indent=1, default=str)
    env.filters["pct"] = lambda v: "–" if v is None else f"{100 * v:.0f}%"
    env.filters["prob"] = lambda v: "–" if v is None else f"{v:.2f}"
    return env


def _int(value: Optional[str], default: int = 1) -> int:
    """A page or run number from the URL (a number past any real one reads as the largest)."""
    if value is None or not value.isascii() or not value.isdigit():
        return default
    return int(value) if len(value) < 10 else 10**9


def _text(request: Request, name: str, limit: int = q.MAX_QUERY) -> str:
    return request.query_params.get(name, "")[:limit]


class ViewApp:
    """The routes of one server (kept as methods so every handler shares the config and templates)."""

    def __init__(self, config: ViewConfig) -> None:
        self.config = config
        self.env = _templates()

    def page(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        html = self.env.get_template(name).render(token=self.config.token, **context)
        return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)

    def missing(self, what: str) -> HTMLResponse:
        return self.page("missing.html", status=404, title="not found", what=what)

    def runs(self, request: Request) -> HTMLResponse:
        with self.config.connect() as conn:
            all_runs = [checked_run(run, self.config.store) for run in newest_runs(conn, limit=VIEW_RUNS)]
            trends = q.rates_over_runs(conn, all_runs)
            check_cases(conn, [run.id for chosen, _ in trends.values() for run in chosen], self.config.store)
            previous: dict[int, int] = {}  # run id -> the same benchmark's run before it
            last: dict[str, int] = {}
            for run in reversed(all_runs):
                if run.benchmark in last:
                    previous[run.id] = last[run.benchmark]
                last[run.benchmark] = run.id
            return self.page("runs.html", title="runs", runs=all_runs, trends=trends, previous=previous)

    def run(self, request: Request) -> HTMLResponse:
        run_id = _int(request.path_params["run_id"], 0)
        flt = q.PageFilter(_text(request, "metric"), _text(request, "target"), _text(request, "status"),
                           _text(request, "q"), request.query_params.get("order", "label"))
        if flt.order not in q.ORDERS:
            flt = q.PageFilter(flt.metric, flt.target, flt.status, flt.query, "label")
        with self.config.connect() as conn:
            run = run_row(conn, run_id)
            if run is None:
                return self.missing(f"run {run_id}")
            checked_run(run, self.config.store)
            check_cases(conn, [run.id], self.config.store)
            bench_dir = self._bench_dir(run)
            thresholds = read_thresholds(bench_dir) if bench_dir is not None else {}
            page = q.case_page(conn, run.id, flt, _int(request.query_params.get("page")), thresholds)
            for shown in page.cases:
                checked_case(shown, self.config.store)
            query = {k: v for k, v in (("metric", flt.metric), ("target", flt.target), ("status", flt.status),
                                       ("q", flt.query), ("order", flt.order)) if v}

            def page_url(n: int) -> str:
                return f"/runs/{run.id}?" + urlencode({**query, "page": n})

            return self.page("run.html", title=f"run {run.id}", run=run, page=page, flt=flt, orders=q.ORDERS,
                             page_url=page_url, labellable=_labels_metrics(run.kind))

    def compare(self, request: Request) -> HTMLResponse:
        a, b = _int(request.path_params["a"], 0), _int(request.path_params["b"], 0)
        with self.config.connect() as conn:
            run_a, run_b = run_row(conn, a), run_row(conn, b)
            if run_a is None or run_b is None:
                return self.missing(f"run {a if run_a is None else b}")
            checked_run(run_a, self.config.store)
            checked_run(run_b, self.config.store)
            check_cases(conn, [a, b], self.config.store)
            pairs, total, flips, pages = q.compare_pairs(conn, a, b, _int(request.query_params.get("page")))
            for shown in [side for pair in pairs for side in (pair.a, pair.b) if side is not None]:
                checked_case(shown, self.config.store)
            page = min(max(1, _int(request.query_params.get("page"))), pages)
            return self.page("compare.html", title=f"run {a} vs {b}", a=run_a, b=run_b, pairs=pairs, total=total,
                             flips=flips, page=page, pages=pages, rates=q.rate_table(conn, [a, b]))

    def _bench_dir(self, run: Row[Any]) -> Optional[Path]:
        """benchmarks/NAME of the project root for the run's benchmark (None: no such benchmark here; the name
        comes from the store and is checked like `--benchmark`'s, so it never names a path)."""
        try:
            return resolve_benchmark_dir(self.config.root / "benchmarks", run.benchmark, option="")
        except EvalbenchError:
            return None

    def _refused(self, request: Request) -> Optional[JSONResponse]:
        """Why a write is refused before its body is read (None: it may proceed)."""
        sent = request.headers.get(TOKEN_HEADER, "")
        if not secrets.compare_digest(sent.encode("utf-8", "replace"), self.config.token.encode()):
            return _error(403, f"missing or wrong {TOKEN_HEADER} header (it is in the page's evalbench-token meta tag)")
        origin = request.headers.get("origin")
        if origin is not None and urlsplit(origin).netloc != request.headers.get("host"):
            return _error(403, "a request from another origin cannot write labels")
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            return _error(415, "the body must be JSON (Content-Type: application/json)")
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_LABEL_BODY):
            return _error(413, f"the body is larger than {MAX_LABEL_BODY} bytes")
        return None

    async def label(self, request: Request) -> JSONResponse:
        refused = self._refused(request)
        if refused is not None:
            return refused
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_LABEL_BODY:
                return _error(413, f"the body is larger than {MAX_LABEL_BODY} bytes")
        try:
            label = parse_label_request(body)
        except ValueError as exc:
            return _error(422, str(exc))
        return await run_in_threadpool(self._write_label, label.run, label.case, label.metric, label.present, label.note)

    def _write_label(self, run_id: int | str, node_id: str, metric: str, present: bool, note: str) -> JSONResponse:
        if not isinstance(run_id, int) and not (run_id.isdigit() and len(run_id) < 10):
            return _error(404, f"no run {run_id!r}"[:200])
        with self.config.connect() as conn:
            run = run_row(conn, int(run_id))
            if run is None:
                return _error(404, f"no run {run_id}")
            checked_run(run, self.config.store)
            case = q.find_case(conn, run.id, node_id, metric)
            if case is None:
                return _error(404, f"run {run.id} has no case {node_id!r} with metric {metric!r}"[:500])
            check_cases(conn, [run.id], self.config.store)
            checked_case(case, self.config.store)
            if not _labels_metrics(run.kind) or not case.transcript:
                return _error(422, "only a scenario case with a transcript can be labelled")
            bench_dir = self._bench_dir(run)
            if bench_dir is None:
                return _error(422, f"benchmark {run.benchmark!r} is not in {self.config.root / 'benchmarks'}"[:500])
            try:
                line = append_label(bench_dir, metric, case.transcript, present, note)
            except (ValueError, EvalbenchError, OSError) as exc:
                return _error(422, label_problem(exc))
        return JSONResponse({"file": f"benchmarks/{run.benchmark}/calibration.jsonl", "line": line,
                             "labels": labelled_lines(bench_dir)}, status_code=201, headers=SECURITY_HEADERS)


async def _store_failed(request: Request, exc: Exception) -> Response:
    """A store that fails mid-request (gone, locked past its wait, a newer schema): one line, never the SQL
    or its parameters (they may hold transcripts)."""
    cause = getattr(exc, "orig", None) or exc
    line = (str(cause).strip().splitlines() or [type(cause).__name__])[0][:300]
    print(terminal(f"evalbench view: the run store could not be read: {line}"), file=sys.stderr)
    message = f"the run store could not be read ({type(cause).__name__}); the terminal running evalbench view says why"
    if request.url.path.startswith("/api/"):
        return _error(503, message)
    return HTMLResponse(f"<!doctype html><title>evalbench view</title><p>{html.escape(message)}</p>", status_code=503,
                        headers=SECURITY_HEADERS)


async def _unreadable_row(request: Request, exc: Exception) -> Response:
    """A row of the store that does not cross the boundary (tampered with, or written by something else):
    one line naming the store, the run and the case, on the page and on the terminal running the view."""
    line = " ".join(str(exc).split())
    print(terminal(f"evalbench view: {line}"), file=sys.stderr)
    if request.url.path.startswith("/api/"):
        return _error(422, line)
    return HTMLResponse(f"<!doctype html><title>evalbench view</title><p>{html.escape(visible(line))}</p>",
                        status_code=422, headers=SECURITY_HEADERS)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": visible(message)}, status_code=status, headers=SECURITY_HEADERS)


def create_app(connect: Callable[[], Connection], root: Path, token: Optional[str] = None,
               store: str = "of this view") -> Starlette:
    """The view's Starlette app over a store (`connect` opens one SQLAlchemy Core connection; `store` names it in
    errors: its masked URL); `token` defaults to a new random one (`secrets.token_urlsafe`)."""
    app = ViewApp(ViewConfig(connect, root, token or secrets.token_urlsafe(32), store))
    routes = [
        Route("/", app.runs),
        Route("/runs/{run_id}", app.run),
        Route("/compare/{a}/{b}", app.compare),
        Route("/api/labels", app.label, methods=["POST"]),
        Mount("/static", StaticFiles(packages=[("pytest_evalbench.store", "static")]), name="static"),
    ]
    starlette = Starlette(routes=routes, middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=list(HOSTS))],
                          exception_handlers={SQLAlchemyError: _store_failed, StoreError: _unreadable_row})
    starlette.state.token = app.config.token
    return starlette


def _labels_metrics(kind: str) -> bool:
    """Whether a run of this benchmark kind judges metrics present or absent: the label a person can
    give here and calibration.jsonl holds."""
    from pytest_evalbench.kinds.protocol import SPEC_KINDS

    load = SPEC_KINDS.get(kind)
    return load is not None and load().judged == "metrics"
