"""Engine performance script (not part of the test suite): prints, in one run, what issue #19 asks.

    python tests/perf/bench_engine.py [--n 200] [--turns 3] [--latency 0.1] [--concurrency 16 64 128]
                                      [--transport aiohttp|openai]

1. wall / ideal at each concurrency for this project (`pytest --benchmark=perf`, one process, cache
   off) and for a floor client written here (plain aiohttp, the same call chains: per item
   `turns` x (user, target) + judge, one after the other); ideal = ceil(N / C) x calls x latency.
   "process" is the whole pytest run (startup and collection included), "loop" the test loop;
   CPU per request is the client's process CPU during its loop / requests.
2. Startup cost of having the plugin installed on an unrelated one-test run (median of 5,
   interleaved with a run without it) and the import time of the plugin's modules.
Every measured pytest process runs with PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 and names its plugins
with -p (ours, xdist's for -n), so other installed plugins do not count against ours.
3. `-n 2` against one process at the middle concurrency: process wall and request counts.
5. (issue #27) the endpoint enforcing `--rate-limit` R requests/minute (a bucket of one second's
   worth, OpenAI's x-ratelimit-* headers on every answer, 429 + Retry-After beyond), no limit
   option, `-n 0` and `-n 2`, N = `--rate-n`: exit code (0/1/6: every row scored), wall / ideal
   (ideal = calls / R) and 429 answers / calls. `--rate-only` runs just this part.
4. N = 10,000 at the middle concurrency with the same chains and latency (about two minutes):
   wall / ideal and peak RSS; with `--rss-large 100000` also peak RSS at N = 100,000 (1 turn +
   judge, `--rss-latency`, several minutes; off by default).

The fake server here is aiohttp in its own process (TCP_NODELAY, listen backlog 1024), so it is
not the bottleneck: the floor client's ratio shows what the server allows.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
PROBE_ENV = "EVALBENCH_PERF_PROBE"


# ---------------------------------------------------------------------- fake server (own process)
def serve(port: int) -> None:
    """An OpenAI-compatible endpoint: sim-user / sim-target / sim-judge; latency, an enforced rate limit
    and an HTTP status for every answer (a dead endpoint) set over /control."""
    from aiohttp import web

    from pytest_evalbench.testing.rate_window import RateWindow

    state: dict[str, Any] = {"latency": 0.0, "requests": 0, "active": 0, "peak": 0, "window": None, "status": 200}

    def answer(request: dict[str, Any]) -> str:
        model = request.get("model")
        if model == "sim-user":
            persona = request["messages"][0]["content"].split("WHO YOU ARE: ")[1].split("\n")[0]
            return f"Thought: t\nMessage: hello {len(request['messages'])} from {persona}"
        if model == "sim-judge":
            return json.dumps({"justification": "asked", "present": True})
        return "Sure, tell me more?"

    async def chat(http: web.Request) -> web.Response:
        window: RateWindow | None = state["window"]
        limit_headers: dict[str, str] = {}
        if window is not None:
            admitted, limit_headers = window.take()
            if not admitted:
                error = {"error": {"message": "Rate limit reached for requests", "type": "requests",
                                   "code": "rate_limit_exceeded"}}
                return web.Response(status=429, body=json.dumps(error).encode(), content_type="application/json",
                                    headers=limit_headers)
        state["requests"] += 1
        state.setdefault("first", time.time())
        state["last"] = time.time()
        state["active"] += 1
        state["peak"] = max(state["peak"], state["active"])
        try:
            request = json.loads(await http.read())
            if state["latency"]:
                await asyncio.sleep(state["latency"])
            if state["status"] != 200:  # bench_fixed.py's dead endpoint: every chat answer is this status
                return web.json_response({"error": {"message": "internal error", "type": "server_error"}},
                                         status=state["status"])
            body = {"id": "x", "object": "chat.completion", "created": 0, "model": request["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": answer(request)}}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
            return web.Response(body=json.dumps(body).encode(), content_type="application/json",
                                headers=limit_headers)
        finally:
            state["active"] -= 1

    async def control(http: web.Request) -> web.Response:
        body = json.loads(await http.read())
        if body.get("reset"):
            state.update(requests=0, peak=0)
            state.pop("first", None)
        if "latency" in body:
            state["latency"] = float(body["latency"])
        if "status" in body:
            state["status"] = int(body["status"])
        if "rate_limit" in body:  # requests per minute; None: no limit
            state["window"] = RateWindow(float(body["rate_limit"])) if body["rate_limit"] else None
        return web.json_response({})

    async def stats(http: web.Request) -> web.Response:
        window = state["window"]
        return web.json_response({"requests": state["requests"], "peak_concurrency": state["peak"],
                                  "limited": window.limited if window is not None else 0,
                                  "span": state.get("last", 0.0) - state.get("first", 0.0)})

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        app.router.add_post("/v1/_control", control)
        app.router.add_get("/v1/_stats", stats)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port, backlog=1024)  # aiohttp sets TCP_NODELAY itself
        await site.start()
        print(f"http://127.0.0.1:{runner.addresses[0][1]}/v1", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


class Server:
    """The fake endpoint in its own process (`bench_engine.py --serve`)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.base_url = self.proc.stdout.readline().strip()

    def control(self, **body: object) -> None:
        request = urllib.request.Request(f"{self.base_url}/_control", data=json.dumps(body).encode(), method="POST")
        urllib.request.urlopen(request).read()

    def stats(self) -> dict[str, int]:
        return dict(json.loads(urllib.request.urlopen(f"{self.base_url}/_stats").read()))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


# ---------------------------------------------------------------------- floor client (own process)
def floor(base_url: str, n: int, turns: int, concurrency: int) -> None:
    """Plain aiohttp, same chains as the plugin: prints loop seconds and CPU seconds as JSON."""
    import aiohttp

    async def main() -> None:
        semaphore = asyncio.Semaphore(concurrency)
        url = f"{base_url}/chat/completions"
        headers = {"Authorization": "Bearer sk-perf", "Content-Type": "application/json"}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

            async def call(model: str, messages: list[dict[str, str]]) -> str:
                async with semaphore, session.post(url, data=json.dumps({"model": model, "messages": messages}),
                                                   headers=headers) as response:
                    return str(json.loads(await response.read())["choices"][0]["message"]["content"])

            async def chain(i: int) -> None:
                system = f"You are a user.\nWHO YOU ARE: person {i}\n"
                history: list[dict[str, str]] = []
                for _ in range(turns):
                    said = await call("sim-user", [{"role": "system", "content": system}, *history])
                    history.append({"role": "user", "content": said.split("Message: ")[1]})
                    reply = await call("sim-target", history)
                    history.append({"role": "assistant", "content": reply})
                await call("sim-judge", [{"role": "user", "content": json.dumps(history)}])

            await asyncio.gather(*(chain(i) for i in range(n)))

    cpu, start = time.process_time(), time.perf_counter()
    asyncio.run(main())
    print(json.dumps({"loop": time.perf_counter() - start, "cpu": time.process_time() - cpu}))


# ---------------------------------------------------------------------- the plugin's runs
class Probe:
    """pytest plugin loaded into the measured run: loop wall, loop CPU and peak RSS to a file."""

    def __init__(self) -> None:
        self.start = self.cpu = self.loop = 0.0

    def pytest_runtestloop(self) -> None:
        self.start, self.cpu = time.perf_counter(), time.process_time()

    def pytest_sessionfinish(self) -> None:
        self.loop, self.cpu = time.perf_counter() - self.start, time.process_time() - self.cpu

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self) -> None:
        """Peak RSS read last: after every plugin's `pytest_sessionfinish` (result files, reports)
        and the terminal summary, which a probe registered after the plugin would otherwise miss."""
        import resource

        Path(os.environ[PROBE_ENV]).write_text(json.dumps({
            "loop": self.loop, "cpu": self.cpu,
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def pytest_configure(config: Any) -> None:
    """Loaded as `-p bench_engine` in the measured run (controller only)."""
    if os.environ.get(PROBE_ENV) and not hasattr(config, "workerinput"):
        config.pluginmanager.register(Probe(), "bench-probe")


def write_bench(root: Path, n: int, turns: int) -> None:
    import yaml

    bench = root / "benchmarks" / "perf"
    bench.mkdir(parents=True, exist_ok=True)
    spec = {"name": "perf", "description": "engine benchmark",
            "metrics": [{"id": "m01", "name": "Asks", "type": "positive", "definition": "asks a question"}],
            "generation": {"turns": turns, "num_samples": 1, "perfunctory": False, "landmarks": False},
            "targets": [{"id": "t", "model": "sim-target"}],
            "user_model": {"model": "sim-user"}, "evaluator_model": {"model": "sim-judge"}}
    (bench / "benchmark.yaml").write_text(yaml.safe_dump(spec))
    rows = [{"id": f"m01_s{i:05d}_v01", "metric_id": "m01", "persona": f"person {i}", "user_goal": "help",
             "landmarks": [], "demographic": {}} for i in range(n)]
    (bench / "scenarios.json").write_text(json.dumps(rows))
    (root / "pytest.ini").write_text("[pytest]\n")


ISOLATED = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": ""}
"""Measured pytest processes load only the plugins named with -p: the dev venv's other pytest11
plugins (hypothesis alone costs ~0.6 s at every start) are not ours to measure. They may also
write bytecode, as an installed package has (a dev shell's PYTHONDONTWRITEBYTECODE=1 recompiles
every module of ours, and pytest re-rewrites the plugin's, at every start: ~0.1 s)."""
PLUGIN = ("-p", "pytest_evalbench.plugin")


def run_pytest(root: Path, *args: str, plugin: bool = True) -> dict[str, float]:
    """One pytest process (autoload off; our plugin unless not `plugin`, plus xdist's for -n): wall
    plus what the probe saw. Its temporary directories live under the script's own root
    (`PYTEST_DEBUG_TEMPROOT`): an xdist controller makes a numbered base directory for its workers, and
    pytest then deletes the numbered directories beyond the newest three in the session's finish;
    under the shared /tmp the first `-n 2` run after the test suite spent 3-11 s unlinking that
    suite's 23,000 files (seen in bare `pytest -n 2` as much as with the plugin)."""
    probe = root / "probe.json"
    temproot = root.parent / "pytest-temproot"
    temproot.mkdir(exist_ok=True)
    env = {**os.environ, **ISOLATED, PROBE_ENV: str(probe), "OPENAI_API_KEY": "sk-perf",
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
           "PYTEST_DEBUG_TEMPROOT": str(temproot)}
    xdist = ("-p", "xdist.plugin") if "-n" in args else ()
    machine, own = machine_cpu(), children_cpu()
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *(PLUGIN if plugin else ()), *xdist,
                           "-p", "bench_engine", "-q", "--tb=no", *args],
                          check=False, cwd=root, env=env, capture_output=True, text=True)
    result = {"process": time.perf_counter() - start, "exit": float(done.returncode)}
    result["cpu"] = children_cpu() - own
    if machine is not None:
        result["others_cpu"] = max(0.0, (machine_cpu() or machine) - machine - result["cpu"])
    if probe.is_file():
        result.update(json.loads(probe.read_text()))
        probe.unlink()
    return result


def children_cpu() -> float:
    """User + system CPU seconds of this script's finished child processes (a pytest run with its
    xdist workers: the workers are reaped by their controller, so they count too)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def machine_cpu() -> float | None:
    """CPU seconds the whole machine has been busy (all cores, /proc/stat; None where there is none).
    Busy time during a run minus the run's own CPU is what other processes took meanwhile: on a
    shared machine that contention, not the code measured, is what makes one run of several slow."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def run_floor(server: Server, n: int, turns: int, conc: int) -> dict[str, float]:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--floor", server.base_url, str(n), str(turns), str(conc)],
                         capture_output=True, text=True, check=True).stdout
    return {"process": time.perf_counter() - start, **json.loads(out)}


def startup(root: Path) -> tuple[float, float, float]:
    """Median wall of an unrelated one-test run with and without the plugin (autoload off, the
    plugin named with -p on one side only); plugin import ms."""
    (root / "test_plain.py").write_text("def test_ok():\n    assert True\n")
    times: dict[str, list[float]] = {"with": [], "without": []}
    base = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_plain.py"]
    env = {**os.environ, **ISOLATED}
    for _ in range(5):
        for label, extra in (("with", list(PLUGIN)), ("without", [])):
            start = time.perf_counter()
            subprocess.run(base + extra, cwd=root, capture_output=True, check=True, env=env)
            times[label].append(time.perf_counter() - start)
    trace = subprocess.run([sys.executable, "-X", "importtime", "-c", "import pytest_evalbench.plugin"],
                           capture_output=True, text=True, cwd=root, check=True).stderr
    own = sum(int(m.group(1)) for m in re.finditer(r"import time:\s+(\d+) \|\s+\d+ \|\s+(\S+)", trace)
              if m.group(2).strip().startswith("pytest_evalbench"))
    return statistics.median(times["with"]), statistics.median(times["without"]), own / 1000


def peak_rss(server: Server, root: Path, rows: int, turns: int, latency: float, conc: int, transport: str) -> None:
    """One process, `rows` items of `turns` turns + judge: wall / ideal and peak RSS (the N = 10,000
    and memory targets of issue #19)."""
    write_bench(root, rows, turns)
    server.control(reset=True, latency=latency)
    r = run_pytest(root, "--benchmark=perf", f"--evalbench-base-url={server.base_url}", "--evalbench-cache=off",
                   f"--evalbench-concurrency={conc}", f"--evalbench-transport={transport}",
                   "-p", "no:hypothesispytest")  # a dev venv's plugin, not ours
    ideal = math.ceil(rows / conc) * (2 * turns + 1) * latency
    print(f"\nN={rows} ({turns} turns + judge, {latency * 1000:.0f} ms, C={conc}): peak RSS "
          f"{r.get('rss_mb', float('nan')):.0f} MB; process {r['process']:.1f} s, ideal {ideal:.1f} s "
          f"(ratio {r['process'] / ideal:.2f}); requests {server.stats()['requests']}"
          + (f"  (exit {r['exit']:.0f})" if r.get("exit") else ""), flush=True)
    plain = floor_rss(root / "plain", {"test_rows.py": f"import pytest\n\n\n@pytest.mark.parametrize('i', range({rows}))\n"
                                                           "def test_row(i):\n    pass\n"})
    print(f"  plain pytest, {rows} trivial parametrized tests, no plugin: peak RSS {plain:.0f} MB "
          "(what pytest's own items and reports cost)", flush=True)
    bare = floor_rss(root / "bare", bare_files(rows))
    print(f"  plain pytest, {rows} bare pytest.Item items from a conftest (no parametrization, no fixtures): peak RSS "
          f"{bare:.0f} MB (the least any one-item-per-row plugin can cost)", flush=True)


def floor_rss(project: Path, files: dict[str, str]) -> float:
    """Peak RSS (MB) of a pytest run without the plugin over a project made of `files`."""
    project.mkdir(exist_ok=True)
    (project / "pytest.ini").write_text("[pytest]\n")
    for name, text in files.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text)
    return float(run_pytest(project, plugin=False).get("rss_mb", float("nan")))


BARE_ITEMS = """
import pytest


class Row(pytest.Item):
    def runtest(self):
        pass


class Rows(pytest.File):
    def collect(self):
        for i in range(ROWS):
            yield Row.from_parent(self, name=f"m01_s{i:05d}_v01[t-s0]")


def pytest_collect_file(parent, file_path):
    if file_path.name == "scenarios.json":
        return Rows.from_parent(parent, path=file_path)
"""
"""The floor: bare `pytest.Item`s whose node ids have the same shape and length as the plugin's
(`benchmarks/perf/scenarios.json::m01_s00000_v01[t-s0]`, `BARE_FILES`), under pytest's same terminal
reporter, so the comparison counts only what an item of ours costs beyond pytest's own."""
BARE_FILES = {"benchmarks/perf/scenarios.json": ""}


def bare_files(rows: int) -> dict[str, str]:
    """The floor project for `rows` bare items."""
    return {**BARE_FILES, "conftest.py": BARE_ITEMS.replace("ROWS", str(rows))}


def rate_limited(server: Server, root: Path, args: argparse.Namespace) -> None:
    """Issue #27's target: the endpoint enforcing R requests/minute, no limit option, -n 0 and -n 2:
    every row scored (exit 0/1/6), wall / ideal <= 1.10 (ideal = calls / R), 429s <= 5% of calls."""
    project = root / "rate"
    write_bench(project, args.rate_n, args.turns)
    calls = args.rate_n * (2 * args.turns + 1)
    ideal = calls / (args.rate_limit / 60)
    print(f"\nendpoint enforcing {args.rate_limit:g} requests/min (1 s burst, x-ratelimit-* headers), no limit "
          f"option, N={args.rate_n} x {2 * args.turns + 1} = {calls} calls, C={args.rate_concurrency}, latency "
          f"{args.latency * 1000:.0f} ms; ideal = calls / R = {ideal:.1f} s (load average {os.getloadavg()[0]:.2f})")
    print("  fixed = the same command with --collect-only (interpreter, pytest, xdist workers, collection), "
          "measured just before; (process - fixed) / ideal is what the calls took")
    print("  span = first to last request the endpoint admitted; span / ideal is the pace the calls kept")
    print(f"{'workers':>7} {'exit':>4} {'process s':>9} {'process/ideal':>13} {'fixed s':>7} {'(process-fixed)/ideal':>21} "
          f"{'span/ideal':>10} {'calls':>6} {'429s':>5} {'429s/calls':>10}")
    for workers in ("0", "2"):
        fixed = run_pytest(project, "--benchmark=perf", "--collect-only", "-n", workers)["process"]
        server.control(reset=True, latency=args.latency, rate_limit=args.rate_limit)
        (project / "benchmarks" / "perf" / ".evalbench-cache" / ".endpoint-limits").unlink(missing_ok=True)
        r = run_pytest(project, "--benchmark=perf", f"--evalbench-base-url={server.base_url}", "--evalbench-cache=off",
                       f"--evalbench-concurrency={args.rate_concurrency}", f"--evalbench-transport={args.transport}",
                       "-n", workers)
        stats = server.stats()
        print(f"{'-n ' + workers:>7} {r['exit']:>4.0f} {r['process']:>9.2f} {r['process'] / ideal:>13.2f} {fixed:>7.2f} "
              f"{(r['process'] - fixed) / ideal:>21.2f} {stats['span'] / ideal:>10.2f} "
              f"{stats['requests']:>6} {stats['limited']:>5} {stats['limited'] / max(1, stats['requests']):>10.1%}"
              f"  (load average {os.getloadavg()[0]:.2f})", flush=True)
    server.control(rate_limit=None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 64, 128])
    parser.add_argument("--rss-rows", type=int, default=10_000)
    parser.add_argument("--rss-latency", type=float, default=0.01,
                        help="latency of the --rss-large run (1 turn + judge)")
    parser.add_argument("--rss-large", type=int, default=0, metavar="N",
                        help="also measure peak RSS at N items (e.g. 100000: several minutes; off by default)")
    parser.add_argument("--rate-limit", type=float, default=3000, metavar="R", help="requests/min of the limited endpoint")
    parser.add_argument("--rate-n", type=int, default=100, help="scenarios of the rate-limited runs")
    parser.add_argument("--rate-concurrency", type=int, default=64)
    parser.add_argument("--rate-only", action="store_true", help="run only the rate-limited part")
    parser.add_argument("--transport", choices=("aiohttp", "openai"), default="aiohttp",
                        help="--evalbench-transport of every measured run (default: %(default)s)")
    args = parser.parse_args()
    calls = 2 * args.turns + 1
    if args.rate_only:
        server = Server()
        try:
            with tempfile.TemporaryDirectory() as tmp:
                rate_limited(server, Path(tmp), args)
        finally:
            server.stop()
        return 0
    began = time.perf_counter()
    server = Server()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            write_bench(root, args.n, args.turns)
            base = ["--benchmark=perf", f"--evalbench-base-url={server.base_url}", "--evalbench-cache=off",
                    f"--evalbench-transport={args.transport}"]
            print("pytest runs: PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 -p pytest_evalbench.plugin [-p xdist.plugin], "
                  f"bytecode written, --evalbench-transport={args.transport}")
            print(f"N={args.n} x ({args.turns} turns + judge) = {calls} chained calls each; latency "
                  f"{args.latency * 1000:.0f} ms; ideal = ceil(N/C) x {calls} x latency")
            print(f"{'C':>4} {'client':>8} {'ideal s':>8} {'process s':>9} {'process/ideal':>13} {'loop/ideal':>10} "
                  f"{'CPU/req ms':>10} {'requests':>8} {'peak':>5}")
            middle = args.concurrency[len(args.concurrency) // 2]
            one_process: dict[str, float] = {}
            for conc in args.concurrency:
                ideal = math.ceil(args.n / conc) * calls * args.latency
                for client in ("floor", "evalbench"):
                    server.control(reset=True, latency=args.latency)
                    if client == "floor":
                        r = run_floor(server, args.n, args.turns, conc)
                    else:
                        r = run_pytest(root, *base, f"--evalbench-concurrency={conc}")
                    stats = server.stats()
                    if client == "evalbench" and conc == middle:
                        one_process = {**r, "requests": stats["requests"]}
                    print(f"{conc:>4} {client:>8} {ideal:>8.2f} {r['process']:>9.2f} {r['process'] / ideal:>13.2f} "
                          f"{r['loop'] / ideal:>10.2f} {r['cpu'] / max(1, stats['requests']) * 1000:>10.2f} "
                          f"{stats['requests']:>8} {stats['peak_concurrency']:>5}"
                          + (f"  (exit {r['exit']:.0f})" if r.get("exit") else ""), flush=True)

            server.control(reset=True, latency=args.latency)
            xd = run_pytest(root, *base, f"--evalbench-concurrency={middle}", "-n", "2")
            xd_requests = server.stats()["requests"]
            print(f"\n-n 2 vs one process at C={middle}: process {xd['process']:.2f} s vs {one_process['process']:.2f} s "
                  f"(ratio {xd['process'] / one_process['process']:.2f}); requests {xd_requests} vs "
                  f"{one_process['requests']:.0f}" + (f"  (exit {xd['exit']:.0f})" if xd.get("exit") else ""))

            rate_limited(server, root, args)

            with_plugin, without, own_ms = startup(root)
            print(f"\nstartup, unrelated one-test run (median of 5): {with_plugin * 1000:.0f} ms with the plugin, "
                  f"{without * 1000:.0f} ms without (difference {(with_plugin - without) * 1000:+.0f} ms); "
                  f"importing pytest_evalbench.plugin: {own_ms:.1f} ms (-X importtime, own modules)")

            # N = 10,000 as the issue measured it: the same chains, latency and C as the table
            peak_rss(server, root / f"rss{args.rss_rows}", args.rss_rows, args.turns, args.latency, middle, args.transport)
            if args.rss_large:  # memory only: 1 turn and a short latency keep it to minutes
                peak_rss(server, root / f"rss{args.rss_large}", args.rss_large, 1, args.rss_latency, middle,
                         args.transport)
    finally:
        server.stop()
    print(f"\nscript run time {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(0)
    elif len(sys.argv) > 1 and sys.argv[1] == "--floor":
        floor(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit(main())
