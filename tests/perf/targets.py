"""The performance targets (not part of the test suite): each figure with both of its sides measured
in this one run, printed with its target, PASS or MISS, and the machine's load.

    python tests/perf/targets.py [--only 1 2 3 4] [--scale 1.0] [--repeat 3] [--junitxml]

1. Latency-bound: 1,000 rows x (3 turns + judge) against an endpoint answering after 1 s, at
   `--evalbench-concurrency=256`, cache off: whole-process wall / ideal <= 1.10.
2. Short: 200 rows x (3 turns + judge), 100 ms, concurrency 64, cache off: wall / ideal <= 1.25.
   The ideal of 1 and 2 is what the injected latency forces: ceil(rows / concurrency) x 7 calls x
   latency (the simulated user and the target each turn, then the judge, one after the other).
3. A fully cached replay of 10,000 rows (`--evalbench-cache=replay`, zero requests; the cache is
   recorded first, at latency 0) against plain pytest running 10,000 trivial parametrized tests:
   wall / plain <= 3.5.
4. Peak RSS of one process at 100,000 items (1 turn + judge, 2 ms, concurrency 64, cache off) against
   pytest's floor, a run over 100,000 bare `pytest.Item`s with node ids of our shape and length
   under the same terminal reporter: RSS / floor <= 1.25. `--junitxml` adds the same run writing a
   JUnit file (informative: no target).

Figures 2 and 3 take `--repeat` interleaved rounds (medians, with every round's ratio); 1 and 4 one
run each. `--scale 0.05` shrinks every row count (concurrency and latency stay) to check the script
in a minute: such figures are not the targets' and are marked `scaled`.

Every measured pytest process loads only the plugins it names (`PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`,
`-p pytest_evalbench.plugin`, and a probe from this file reading the test loop's wall and the
peak RSS after the terminal summary), writes bytecode as an installed package has, and keeps its
temporary directories under the script's own root. The endpoint is aiohttp in its own process, so
it is not the bottleneck (`tests/perf/diagnostics.py` compares a plain aiohttp client against it).
The exit status is 0 when every figure is met, 1 when one is missed, 2 when a measured run failed
(a figure is then INVALID, never PASS).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
PROBE_ENV = "EVALBENCH_PERF_PROBE"


# ---------------------------------------------------------------------- the endpoint (own process)
def serve() -> None:
    """An OpenAI-compatible endpoint for sim-user / sim-target / sim-judge; its latency, an enforced
    rate limit and an HTTP status for every chat answer (a failing endpoint) are set over /_control."""
    from aiohttp import web

    from pytest_evalbench.testing._handler import RateWindow

    state: dict[str, Any] = {"latency": 0.0, "requests": 0, "active": 0, "peak": 0, "window": None, "status": 200,
                             "fail_odd": False}

    def answer(request: dict[str, Any]) -> str:
        model = request.get("model")
        if model == "sim-user":
            persona = request["messages"][0]["content"].split("WHO YOU ARE: ")[1].split("\n")[0]
            return f"Thought: t\nMessage: hello {len(request['messages'])} from {persona}"
        if model == "sim-judge":
            found = re.search(r"from person (\d+)", json.dumps(request["messages"]))
            present = not (state["fail_odd"] and found is not None and int(found.group(1)) % 2)
            return json.dumps({"justification": "asked" if present else "never asked", "present": present})
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
            if state["status"] != 200:
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
        if "fail_odd" in body:  # the judge finds the behaviour absent in the odd-numbered personas' rows
            state["fail_odd"] = bool(body["fail_odd"])
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
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)  # aiohttp sets TCP_NODELAY itself
        await site.start()
        print(f"http://127.0.0.1:{runner.addresses[0][1]}/v1", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


class Server:
    """The endpoint in its own process (`targets.py --serve`)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.base_url = self.proc.stdout.readline().strip()

    def control(self, **body: object) -> None:
        request = urllib.request.Request(f"{self.base_url}/_control", data=json.dumps(body).encode(), method="POST")
        urllib.request.urlopen(request).read()

    def stats(self) -> dict[str, Any]:
        return dict(json.loads(urllib.request.urlopen(f"{self.base_url}/_stats").read()))

    def requests(self) -> int:
        return int(self.stats()["requests"])

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


# ---------------------------------------------------------------------- the measured pytest runs
class Probe:
    """Loaded into a measured run: the test loop's wall and CPU, and the peak RSS, to a file."""

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
            "loop": self.loop, "loop_cpu": self.cpu,
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def pytest_configure(config: Any) -> None:
    """Loaded as `-p targets` in a measured run (the xdist controller only)."""
    if os.environ.get(PROBE_ENV) and not hasattr(config, "workerinput"):
        config.pluginmanager.register(Probe(), "perf-probe")


TURNS = 3
ISOLATED = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": ""}
"""Measured pytest processes load only the plugins named with -p: the dev venv's other pytest11
plugins (hypothesis' costs every start) are not ours to measure. They write bytecode, as an
installed package has (a shell's PYTHONDONTWRITEBYTECODE=1 would recompile the plugin every start)."""
PLUGIN = ("-p", "pytest_evalbench.plugin")


def write_bench(root: Path, rows: int, turns: int = TURNS) -> Path:
    """A project with `benchmarks/perf/`: `rows` scenario rows of one positive metric, sim-* models."""
    import yaml

    bench = root / "benchmarks" / "perf"
    bench.mkdir(parents=True, exist_ok=True)
    spec = {"name": "perf", "description": "performance benchmark",
            "metrics": [{"id": "m01", "name": "Asks", "type": "positive", "definition": "asks a question"}],
            "generation": {"turns": turns, "num_samples": 1, "perfunctory": False, "landmarks": False},
            "targets": [{"id": "t", "model": "sim-target"}],
            "user_model": {"model": "sim-user"}, "evaluator_model": {"model": "sim-judge"}}
    (bench / "benchmark.yaml").write_text(yaml.safe_dump(spec))
    scenarios = [{"id": f"m01_s{i:05d}_v01", "metric_id": "m01", "persona": f"person {i}", "user_goal": "help",
                  "landmarks": [], "demographic": {}} for i in range(rows)]
    (bench / "scenarios.json").write_text(json.dumps(scenarios))
    (root / "pytest.ini").write_text("[pytest]\n")
    return root


def plain_project(root: Path, tests: int) -> Path:
    """Plain pytest's side of a replay: `tests` trivial parametrized tests."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "test_rows.py").write_text(
        f"import pytest\n\n\n@pytest.mark.parametrize('i', range({tests}))\ndef test_row(i):\n    pass\n")
    return root


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


def bare_project(root: Path, items: int) -> Path:
    """pytest's floor: `items` bare `pytest.Item`s from a conftest, node ids of our shape and length
    (`benchmarks/perf/scenarios.json::m01_s00000_v01[t-s0]`), no parametrization, no fixtures."""
    (root / "benchmarks" / "perf").mkdir(parents=True, exist_ok=True)
    (root / "benchmarks" / "perf" / "scenarios.json").write_text("")
    (root / "conftest.py").write_text(BARE_ITEMS.replace("ROWS", str(items)))
    (root / "pytest.ini").write_text("[pytest]\n")
    return root


def run_pytest(root: Path, *args: str, plugin: bool = True) -> dict[str, float]:
    """One pytest process (autoload off; our plugin unless not `plugin`, xdist's for -n): its wall
    (`process`), exit status, CPU (with its xdist workers), what other processes used of the machine
    meanwhile, and what the probe saw. Its temporary directories live under the script's own root
    (`PYTEST_DEBUG_TEMPROOT`): pytest deletes the numbered base directories beyond the newest three
    in a session's finish, and under the shared /tmp that can mean another session's thousands."""
    probe = root / "probe.json"
    temproot = root.parent / "pytest-temproot"
    temproot.mkdir(exist_ok=True)
    env = {**os.environ, **ISOLATED, PROBE_ENV: str(probe), "OPENAI_API_KEY": "sk-perf",
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
           "PYTEST_DEBUG_TEMPROOT": str(temproot)}
    xdist = ("-p", "xdist.plugin") if "-n" in args else ()
    machine, own = machine_cpu(), children_cpu()
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *(PLUGIN if plugin else ()),
                           *xdist, "-p", "targets", "-q", "--tb=short", *args],
                          check=False, cwd=root, env=env, capture_output=True, text=True)
    result = {"process": time.perf_counter() - start, "exit": float(done.returncode), "cpu": children_cpu() - own}
    if machine is not None:
        result["others_cpu"] = max(0.0, (machine_cpu() or machine) - machine - result["cpu"])
    if probe.is_file():
        result.update(json.loads(probe.read_text()))
        probe.unlink()
    if done.returncode:
        (root / "last-failed-run.txt").write_text(done.stdout[-20000:] + done.stderr[-5000:])
    return result


def children_cpu() -> float:
    """User + system CPU seconds of this script's finished children (a pytest run and its reaped
    xdist workers)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def machine_cpu() -> float | None:
    """CPU seconds the whole machine has been busy, all cores (/proc/stat; None where there is
    none). Busy time during a run minus the run's own CPU is what other processes took meanwhile."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def others(runs: list[dict[str, float]]) -> str:
    """The cores other processes used while these runs ran (median)."""
    shares = [r["others_cpu"] / r["process"] for r in runs if "others_cpu" in r and r["process"] > 0]
    return f"others used {statistics.median(shares):.2f} cores" if shares else "others' CPU unknown"


# ---------------------------------------------------------------------- the figures
@dataclass
class Figure:
    """One target: the measured ratio, its bound, and what it was measured from."""

    number: int
    title: str
    ratio: float = math.nan
    bound: float = math.nan
    detail: list[str] = field(default_factory=list)
    problem: str = ""  # a measured run failed: the figure is invalid
    scaled: bool = False

    @property
    def verdict(self) -> str:
        if self.problem or math.isnan(self.ratio):
            return "INVALID"
        return "PASS" if self.ratio <= self.bound else "MISS"

    def line(self) -> str:
        note = " (scaled: not the target's size)" if self.scaled else ""
        return f"{self.number}. {self.title}: {self.ratio:.2f} (target <= {self.bound:.2f}) {self.verdict}{note}"

    def show(self) -> None:
        print(self.line(), flush=True)
        for text in self.detail:
            print(f"   {text}", flush=True)
        if self.problem:
            print(f"   INVALID: {self.problem}", flush=True)


def check_run(figure: Figure, run: dict[str, float], label: str, project: Path, *,
              requests: int | None = None, expected: int | None = None) -> None:
    """A measured run must have scored every row (exit 0: the judge finds the behaviour present)
    and, where given, made the expected number of requests: else the figure is invalid."""
    if run["exit"] != 0:
        figure.problem += f"{label} exited {run['exit']:.0f} (its output: {project / 'last-failed-run.txt'}); "
    if expected is not None and requests != expected:
        figure.problem += f"{label} made {requests} requests, expected {expected}; "


def latency_bound(server: Server, root: Path, number: int, rows: int, latency: float, concurrency: int,
                  bound: float, repeat: int, scaled: bool) -> Figure:
    """Whole-process wall against the ideal that `latency` forces, over `repeat` runs (median)."""
    calls = 2 * TURNS + 1
    ideal = math.ceil(rows / concurrency) * calls * latency
    figure = Figure(number, f"{rows} rows x {calls} calls, {latency * 1000:g} ms latency, concurrency {concurrency}: "
                            "wall / ideal", bound=bound, scaled=scaled)
    project = write_bench(root / f"latency-{number}", rows)
    runs = []
    for _ in range(repeat):
        server.control(reset=True, latency=latency, status=200)
        run = run_pytest(project, "--benchmark=perf", f"--evalbench-base-url={server.base_url}",
                         "--evalbench-cache=off", f"--evalbench-concurrency={concurrency}")
        stats = server.stats()
        check_run(figure, run, "the run", project, requests=int(stats["requests"]), expected=rows * calls)
        runs.append({**run, "peak": float(stats["peak_concurrency"])})
    wall = statistics.median(r["process"] for r in runs)
    figure.ratio = wall / ideal
    rounds = ", ".join(f"{r['process']:.2f} s ({r['process'] / ideal:.2f})" for r in runs)
    figure.detail = [
        f"wall {wall:.2f} s{' (median)' if repeat > 1 else ''}; ideal ceil({rows}/{concurrency}) x {calls} x "
        f"{latency:g} s = {ideal:.2f} s" + (f"; runs: {rounds}" if repeat > 1 else ""),
        f"test loop {statistics.median(r.get('loop', math.nan) for r in runs):.2f} s; CPU "
        f"{statistics.median(r['cpu'] for r in runs):.2f} s (whole process); requests {rows * calls} each run, at most "
        f"{max(r['peak'] for r in runs):.0f} in flight; {others(runs)}; {load()}"]
    return figure


def replay(server: Server, root: Path, number: int, rows: int, bound: float, repeat: int, scaled: bool) -> Figure:
    """A fully cached replay against plain pytest with as many trivial tests, interleaved rounds."""
    figure = Figure(number, f"cached replay of {rows} rows: wall / plain pytest with {rows} trivial tests",
                    bound=bound, scaled=scaled)
    project = write_bench(root / "replay", rows)
    base = ("--benchmark=perf", f"--evalbench-base-url={server.base_url}")
    server.control(reset=True, latency=0.0, status=200)
    record = run_pytest(project, *base, "--evalbench-cache=on", "--evalbench-concurrency=64")
    check_run(figure, record, "recording the cache", project, requests=server.requests(),
              expected=rows * (2 * TURNS + 1))
    plain = plain_project(root / "plain", rows)
    sides: dict[str, list[dict[str, float]]] = {"replay": [], "plain": []}
    run_pytest(plain, plugin=False)  # both sides start with warm file caches
    for _ in range(repeat):
        server.control(reset=True)
        run = run_pytest(project, *base, "--evalbench-cache=replay")
        check_run(figure, run, "the replay", project, requests=server.requests(), expected=0)
        sides["replay"].append(run)
        sides["plain"].append(run_pytest(plain, plugin=False))
        check_run(figure, sides["plain"][-1], "plain pytest", plain)
    wall = {side: statistics.median(r["process"] for r in runs) for side, runs in sides.items()}
    figure.ratio = wall["replay"] / wall["plain"]
    rounds = ", ".join(f"{a['process'] / b['process']:.2f}" for a, b in zip(sides["replay"], sides["plain"]))
    figure.detail = [
        f"replay {wall['replay']:.2f} s, plain pytest {wall['plain']:.2f} s"
        + (f" (medians of {repeat} interleaved rounds; each round's ratio: {rounds})" if repeat > 1 else ""),
        f"CPU {statistics.median(r['cpu'] for r in sides['replay']):.2f} s against "
        f"{statistics.median(r['cpu'] for r in sides['plain']):.2f} s; 0 requests; recorded in "
        f"{record['process']:.1f} s; {others(sides['replay'] + sides['plain'])}; {load()}"]
    return figure


def peak_rss(server: Server, root: Path, number: int, items: int, bound: float, junitxml: bool,
             scaled: bool) -> Figure:
    """Peak RSS of one process at `items` items (1 turn + judge) against the floor of as many bare items."""
    latency, concurrency = 0.002, 64
    figure = Figure(number, f"peak RSS at {items} items: RSS / pytest's floor of {items} bare items",
                    bound=bound, scaled=scaled)
    floor_project = bare_project(root / "bare", items)
    floor = run_pytest(floor_project, plugin=False)
    check_run(figure, floor, "the floor", floor_project)
    project = write_bench(root / "rss", items, turns=1)
    base = ("--benchmark=perf", f"--evalbench-base-url={server.base_url}", "--evalbench-cache=off",
            f"--evalbench-concurrency={concurrency}")
    server.control(reset=True, latency=latency, status=200)
    run = run_pytest(project, *base)
    check_run(figure, run, "the run", project, requests=server.requests(), expected=items * 3)
    figure.ratio = run.get("rss_mb", math.nan) / floor.get("rss_mb", math.nan)
    figure.detail = [f"peak RSS {run.get('rss_mb', math.nan):.0f} MB, floor {floor.get('rss_mb', math.nan):.0f} MB "
                     f"(read after the terminal summary); 1 turn + judge, {latency * 1000:g} ms, concurrency "
                     f"{concurrency}, cache off; wall {run['process']:.1f} s and {floor['process']:.1f} s; {load()}"]
    if junitxml:
        server.control(reset=True)
        sink = run_pytest(project, *base, "--junitxml=junit.xml")
        rss = sink.get("rss_mb", math.nan)
        figure.detail.append(f"with --junitxml (no target): {rss:.0f} MB, {rss / floor.get('rss_mb', math.nan):.2f} x "
                             f"the floor (exit {sink['exit']:.0f})")
    return figure


def header() -> None:
    import pytest_evalbench

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True,
                            check=False).stdout.strip() or "unknown"
    print(f"pytest-evalbench {pytest_evalbench.__version__} (commit {commit}), pytest {pytest.__version__}, "
          f"Python {platform.python_version()}, {os.cpu_count()} cores; every figure measured in this run; "
          f"{load()}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", type=int, nargs="+", choices=(1, 2, 3, 4), default=[1, 2, 3, 4],
                        help="the figures to measure (default: all four)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply every row count (e.g. 0.05 to check the script quickly; default 1)")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds of figures 2 and 3 (default 3)")
    parser.add_argument("--junitxml", action="store_true", help="figure 4: also the run writing a JUnit file")
    args = parser.parse_args()
    scaled = args.scale != 1.0

    def size(n: int) -> int:
        return max(1, round(n * args.scale))

    began = time.perf_counter()
    header()
    figures: list[Figure] = []
    server = Server()
    try:
        with tempfile.TemporaryDirectory(prefix="evalbench-perf-") as tmp:
            root = Path(tmp)
            plan = {
                1: lambda: latency_bound(server, root, 1, size(1000), 1.0, 256, 1.10, 1, scaled),
                2: lambda: latency_bound(server, root, 2, size(200), 0.1, 64, 1.25, args.repeat, scaled),
                3: lambda: replay(server, root, 3, size(10_000), 3.5, args.repeat, scaled),
                4: lambda: peak_rss(server, root, 4, size(100_000), 1.25, args.junitxml, scaled),
            }
            for number in sorted(set(args.only)):
                figure = plan[number]()
                figure.show()
                figures.append(figure)
    finally:
        server.stop()
    return report(figures, began)


def report(figures: list[Any], began: float) -> int:
    """The closing summary of a perf script's figures, and its exit status: 2 if any is invalid,
    1 if any missed its target, else 0."""
    print(f"\nsummary ({load()}; script run time {time.perf_counter() - began:.0f} s):")
    for figure in figures:
        print(f"  {figure.line()}")
    verdicts = {figure.verdict for figure in figures}
    return 2 if "INVALID" in verdicts else 1 if "MISS" in verdicts else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve()
    else:
        sys.exit(main())
