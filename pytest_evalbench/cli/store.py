"""`evalbench runs`, `evalbench compare` and `evalbench comment`: the run store read back.

`runs` prints one line per run (id first, newest first) and nothing else on stdout; `compare` prints two
runs side by side with the paired test on the cases both scored (exit 6 with `--fail-on-regression` on a
significant drop); `comment` posts the newest run of this branch, compared with the base branch's newest,
as one pull-request comment on GitHub Actions and updates that same comment on later calls.
Problems are one line on stderr, exit 2; a store URL's credentials and the GitHub token are never shown.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_evalbench.base.errors import EvalbenchError, InputError
from pytest_evalbench.base.inputs import read_input_json
from pytest_evalbench.base.json_input import parse_json
from pytest_evalbench.base.safe_text import SECRETS, redact, terminal
from pytest_evalbench.gate.decision import EXIT_REGRESSION
from pytest_evalbench.store.db import RunData, Store, open_store
from pytest_evalbench.store.query import MARKER, comment_markdown, compare_runs, run_line
from pytest_evalbench.store.record import STORE_DIR, STORE_FILE, branches, is_default, store_url

USAGE = 2
GITHUB_TIMEOUT_S = 30.0
MAX_COMMENT_PAGES = 20
MAX_GITHUB_BYTES = 32 << 20
"""The most of one GitHub API answer read (a page holds at most 100 comments of 65,536 characters)."""


class CommandError(EvalbenchError):
    """A store command cannot do what was asked: one line, exit 2."""


def _open(root: Path, given: str | None) -> Store:
    url = store_url(root, given, os.environ)
    if url is None:
        raise CommandError("the run store is switched off (EVALBENCH_STORE=none): give --store URL")
    default = root / STORE_DIR / STORE_FILE
    if is_default(url, root) and not default.is_file():  # reading must not make an empty store
        raise CommandError(f"no run is recorded under {root}: {default} does not exist (a `pytest --benchmark=NAME` "
                           "run makes it; --store URL reads another store)")
    return open_store(url)


def _benchmark(store: Store, name: str | None) -> str:
    """The benchmark asked for, or the store's only one."""
    if name:
        return name
    names = store.benchmarks()
    if len(names) != 1:
        raise CommandError("the store holds runs of " + (", ".join(names) if names else "no benchmark")
                           + ": name one")
    return names[0]


def _fail(command: str, exc: Exception) -> int:
    print(terminal(f"evalbench {command}: {' '.join(str(exc).split())}"), file=sys.stderr)
    return USAGE


def runs(root: Path, name: str | None, url: str | None) -> int:
    try:
        with _open(root, url) as store:
            found = store.runs(name)
    except EvalbenchError as exc:
        return _fail("runs", exc)
    for run in found:
        print(terminal(run_line(run)))
    return 0


def _run(store: Store, text: str) -> RunData:
    try:
        run_id = int(text)
    except ValueError:
        raise CommandError(f"{text!r} is not a run id (`evalbench runs` lists them)") from None
    run = store.run(run_id)
    if run is None:
        raise CommandError(f"the store has no run {run_id} (`evalbench runs` lists them)")
    return run


def compare(root: Path, ids: list[str], benchmark: str | None, url: str | None, fail_on_regression: bool) -> int:
    """Two runs by id (older first), or the benchmark's newest two."""
    try:
        with _open(root, url) as store:
            if len(ids) > 2:
                raise CommandError("compare takes at most two run ids")
            if len(ids) == 2:
                old, new = _run(store, ids[0]), _run(store, ids[1])
            else:
                name = benchmark or (None if ids else _benchmark(store, None))
                if ids:
                    new = _run(store, ids[0])
                    name = new.benchmark
                listed = [r for r in store.runs(name) if not ids or (r.id or 0) < (new.id or 0)]
                wanted = 1 if ids else 2
                if len(listed) < wanted:
                    raise CommandError(f"the store holds fewer than two runs of {name} to compare")
                old = _run(store, str(listed[0].id if ids else listed[1].id))
                if not ids:
                    new = _run(store, str(listed[0].id))
            if old.benchmark != new.benchmark:
                raise CommandError(f"run {old.id} is of {old.benchmark}, run {new.id} of {new.benchmark}: "
                                   "compare takes two runs of one benchmark")
    except EvalbenchError as exc:
        return _fail("compare", exc)
    result = compare_runs(old, new)
    for line in result.lines():
        print(terminal(line))
    return EXIT_REGRESSION if fail_on_regression and result.regression else 0


def _event_pull_request(env: Mapping[str, str]) -> int:
    path = env.get("GITHUB_EVENT_PATH")
    if not path:
        raise CommandError("GITHUB_EVENT_PATH is not set: `evalbench comment` runs in a GitHub Actions job "
                           "of a pull request")
    try:
        event = read_input_json(Path(path))
    except EvalbenchError as exc:
        raise CommandError(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise CommandError(f"{path}: the GitHub event cannot be read ({type(exc).__name__})") from None
    number = event.get("pull_request", {}).get("number") if isinstance(event, dict) else None
    if not isinstance(number, int) or isinstance(number, bool) or number <= 0:
        raise CommandError(f"{path}: field 'pull_request.number': no pull request (the workflow must run on "
                           "pull_request events)")
    return number


def _github(env: Mapping[str, str]) -> tuple[str, str, str, int]:
    missing = [k for k in ("GITHUB_API_URL", "GITHUB_REPOSITORY", "GITHUB_TOKEN") if not env.get(k)]
    if missing:
        raise CommandError(f"{', '.join(missing)} not set: `evalbench comment` runs in a GitHub Actions job "
                           "(pass GITHUB_TOKEN from secrets.GITHUB_TOKEN in the step's env)")
    SECRETS.add(env["GITHUB_TOKEN"])
    return env["GITHUB_API_URL"].rstrip("/"), env["GITHUB_REPOSITORY"], env["GITHUB_TOKEN"], _event_pull_request(env)


def _post(api: str, repo: str, token: str, number: int, body: str) -> str:
    """Update the comment carrying MARKER, else post one; `updated` or `posted` (aiohttp, the plugin's own
    HTTP client)."""
    import asyncio

    import aiohttp

    headers = {"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
               "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "pytest-evalbench"}

    async def call(session: aiohttp.ClientSession, method: str, path: str, **kwargs: Any) -> Any:
        async with session.request(method, api + path, allow_redirects=False, **kwargs) as response:
            raw = await response.content.read(MAX_GITHUB_BYTES + 1)
            if len(raw) > MAX_GITHUB_BYTES:
                raise CommandError(f"GitHub answered {method} {path} with more than {MAX_GITHUB_BYTES:,} bytes")
            try:
                data = parse_json(raw.decode("utf-8", "replace"), Path(f"GitHub's answer to {method} {path}"))
            except InputError:
                data = None
            if response.status >= 400:
                message = str(data.get("message", ""))[:200] if isinstance(data, dict) else ""
                raise CommandError(f"GitHub answered {response.status} {method} {path}"
                                   + (f": {message}" if message else ""))
            return data

    async def run() -> str:
        timeout = aiohttp.ClientTimeout(total=GITHUB_TIMEOUT_S)
        async with aiohttp.ClientSession(headers=headers, timeout=timeout) as session:
            existing = None
            for page in range(1, MAX_COMMENT_PAGES + 1):
                found = await call(session, "GET", f"/repos/{repo}/issues/{number}/comments",
                                   params={"per_page": "100", "page": str(page)})
                if not isinstance(found, list):
                    raise CommandError("GitHub answered the comment listing with something else than a list")
                existing = next((c for c in found if isinstance(c, dict) and MARKER in str(c.get("body", ""))), None)
                if existing is not None or len(found) < 100:
                    break
            ident = existing.get("id") if existing is not None else None
            if type(ident) is int and ident > 0:  # an id as GitHub gives one (True is an int too, and -1 no id)
                await call(session, "PATCH", f"/repos/{repo}/issues/comments/{ident}", json={"body": body})
                return "updated"
            await call(session, "POST", f"/repos/{repo}/issues/{number}/comments", json={"body": body})
            return "posted"

    try:
        return asyncio.run(run())
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        raise CommandError(f"GitHub cannot be reached at {redact(api)}: {type(exc).__name__}") from None


def comment(root: Path, name: str | None, url: str | None) -> int:
    env = os.environ
    try:
        api, repo, token, number = _github(env)
        branch, base = branches(root, env)
        with _open(root, url) as store:
            benchmark = _benchmark(store, name)
            newest = store.runs(benchmark, branch=branch, limit=1) if branch else store.runs(benchmark, limit=1)
            if not newest:
                raise CommandError(f"the store holds no run of {benchmark} on {branch or 'this branch'}")
            run = _run(store, str(newest[0].id))
            base = base or run.base_branch
            against = None
            base_runs = store.runs(benchmark, branch=base, limit=1) if base else []
            if base_runs:
                against = compare_runs(_run(store, str(base_runs[0].id)), run)
        how = _post(api, repo, token, number, comment_markdown(run, against, base))
    except EvalbenchError as exc:
        return _fail("comment", exc)
    print(terminal(f"comment {how} on pull request #{number} of {repo}: run {run.id}"
                   + (f" compared with run {against.old.id} of {base}" if against else "")))
    return 0
