"""Where a run's time goes (not part of the test suite): the measurements behind the targets of
`targets.py`, each with both sides in this one run, printed with the machine's load.

    python tests/perf/diagnostics.py [--only clients xdist startup rate errors] [--n 200] [--latency 0.1]
        [--concurrency 16 64 128] [--repeat 3] [--transport aiohttp|openai]

clients  wall / ideal at each concurrency for this plugin (`pytest --benchmark=perf`, one process,
         cache off) and for a floor client written here (plain aiohttp, the same call chains: per
         row 3 x (user, target) + judge, one after the other); ideal = ceil(N / C) x 7 x latency.
         "process" is the whole run, "loop" the test loop; CPU per request is the client's CPU
         during its loop over the requests. The floor client's ratio is what the endpoint allows.
xdist    `-n 2` against one process plus what xdist itself adds to a one-test suite and to a suite of
         as many empty tests, at each concurrency; `--repeat` interleaved rounds, medians, and the
         cores other processes used meanwhile (a 2-core machine has no core to spare for `-n 2`).
startup  an unrelated one-test run with the plugin and without it (median of 5, interleaved) and
         the import time of the plugin's own modules.
rate     an endpoint enforcing `--rate-limit` requests/minute (a bucket of one second's worth,
         OpenAI's x-ratelimit-* headers on every answer, 429 + Retry-After beyond), no limit option,
         `-n 0` and `-n 2`: exit status (0/1/6: every row scored), wall / ideal (calls / R) and 429s.
errors   `--errors` rows whose endpoint answers HTTP 500 against the same rows answered (cache off).
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from targets import ISOLATED, PLUGIN, TURNS, Server, load, others, plain_project, run_pytest, write_bench

CALLS = 2 * TURNS + 1


def exit_note(r: dict[str, float]) -> str:
    return f" (exit {r['exit']:.0f})" if r.get("exit") else ""


# ---------------------------------------------------------------------- floor client (own process)
def floor(base_url: str, n: int, concurrency: int) -> None:
    """Plain aiohttp, the plugin's call chains: prints its loop seconds and CPU seconds as JSON."""
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
                for _ in range(TURNS):
                    said = await call("sim-user", [{"role": "system", "content": system}, *history])
                    history.append({"role": "user", "content": said.split("Message: ")[1]})
                    reply = await call("sim-target", history)
                    history.append({"role": "assistant", "content": reply})
                await call("sim-judge", [{"role": "user", "content": json.dumps(history)}])

            await asyncio.gather(*(chain(i) for i in range(n)))

    cpu, start = time.process_time(), time.perf_counter()
    asyncio.run(main())
    print(json.dumps({"loop": time.perf_counter() - start, "loop_cpu": time.process_time() - cpu}))


def run_floor(server: Server, n: int, concurrency: int) -> dict[str, float]:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--floor", server.base_url, str(n), str(concurrency)],
                         capture_output=True, text=True, check=True).stdout
    return {"process": time.perf_counter() - start, **json.loads(out)}


# ---------------------------------------------------------------------- sections
def clients(server: Server, root: Path, args: argparse.Namespace) -> None:
    project = write_bench(root / "clients", args.n)
    base = ("--benchmark=perf", f"--evalbench-base-url={server.base_url}", "--evalbench-cache=off",
            f"--evalbench-transport={args.transport}")
    print(f"\nclients: N={args.n} x {CALLS} chained calls, latency {args.latency * 1000:g} ms; "
          f"ideal = ceil(N/C) x {CALLS} x latency; {load()}")
    print(f"{'C':>4} {'client':>9} {'ideal s':>8} {'process s':>9} {'process/ideal':>13} {'loop/ideal':>10} "
          f"{'CPU/req ms':>10} {'requests':>8} {'peak':>5}")
    for conc in args.concurrency:
        ideal = math.ceil(args.n / conc) * CALLS * args.latency
        for client in ("floor", "evalbench"):
            server.control(reset=True, latency=args.latency, status=200)
            r = run_floor(server, args.n, conc) if client == "floor" else run_pytest(
                project, *base, f"--evalbench-concurrency={conc}")
            stats = server.stats()
            print(f"{conc:>4} {client:>9} {ideal:>8.2f} {r['process']:>9.2f} {r['process'] / ideal:>13.2f} "
                  f"{r.get('loop', math.nan) / ideal:>10.2f} {r['loop_cpu'] / max(1, stats['requests']) * 1000:>10.2f} "
                  f"{stats['requests']:>8} {stats['peak_concurrency']:>5}{exit_note(r)}", flush=True)


def xdist(server: Server, root: Path, args: argparse.Namespace) -> None:
    """Each concurrency: `repeat` rounds of (one process, `-n 2`, the one-test and N-test suites with
    and without `-n 2`), one after the other, so every side sees the same minute's load."""
    project = write_bench(root / "xdist", args.n)
    base = ("--benchmark=perf", f"--evalbench-base-url={server.base_url}", "--evalbench-cache=off",
            f"--evalbench-transport={args.transport}")
    print(f"\nxdist: N={args.n} x {CALLS} calls, {args.latency * 1000:g} ms, cache off; medians of {args.repeat} "
          f"interleaved rounds; {load()}", flush=True)
    plains = {"bare": plain_project(root / "empty", 1), "bare_n": plain_project(root / "empty_n", args.n)}
    for conc in args.concurrency:
        ideal = math.ceil(args.n / conc) * CALLS * args.latency
        runs: dict[str, list[dict[str, float]]] = {k: [] for k in ("one", "two", "bare_xd", "bare", "bare_n_xd", "bare_n")}
        for _ in range(args.repeat):
            for side, extra in (("one", ()), ("two", ("-n", "2"))):
                server.control(reset=True, latency=args.latency, status=200)
                runs[side].append(run_pytest(project, *base, f"--evalbench-concurrency={conc}", *extra))
            for side, plain in plains.items():
                runs[f"{side}_xd"].append(run_pytest(plain, "-n", "2", plugin=False))
                runs[side].append(run_pytest(plain, plugin=False))
        med = {side: statistics.median(r["process"] for r in rs) for side, rs in runs.items()}
        exits = "".join(exit_note(r) for rs in runs.values() for r in rs)
        allowed = med["one"] + med["bare_xd"] - med["bare"]
        allowed_n = med["one"] + med["bare_n_xd"] - med["bare_n"]
        rounds = " ".join(f"{two['process'] / (one['process'] + xd['process'] - bare['process']):.2f}"
                          for one, two, xd, bare in zip(runs["one"], runs["two"], runs["bare_xd"], runs["bare"]))
        print(f"  C={conc}: one process {med['one']:.2f} s (ideal {ideal:.2f} s, {med['one'] / ideal:.2f}); -n 2 "
              f"{med['two']:.2f} s against one process + what xdist adds to a one-test suite ({med['one']:.2f} + "
              f"{med['bare_xd']:.2f} - {med['bare']:.2f} = {allowed:.2f} s): {med['two'] / allowed:.2f} (rounds {rounds}); "
              f"against {args.n} empty tests' xdist cost ({allowed_n:.2f} s): {med['two'] / allowed_n:.2f}{exits}; "
              f"during -n 2 {others(runs['two'])}; {load()}", flush=True)


def startup(root: Path) -> None:
    project = root / "startup"
    project.mkdir()
    (project / "test_plain.py").write_text("def test_ok():\n    assert True\n")
    times: dict[str, list[float]] = {"with": [], "without": []}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_plain.py"]
    env = {**os.environ, **ISOLATED}
    for _ in range(5):
        for label, extra in (("with", list(PLUGIN)), ("without", [])):
            start = time.perf_counter()
            subprocess.run(command + extra, cwd=project, capture_output=True, check=True, env=env)
            times[label].append(time.perf_counter() - start)
    trace = subprocess.run([sys.executable, "-X", "importtime", "-c", "import pytest_evalbench.plugin"],
                           capture_output=True, text=True, cwd=project, check=True).stderr
    own = sum(int(m.group(1)) for m in re.finditer(r"import time:\s+(\d+) \|\s+\d+ \|\s+(\S+)", trace)
              if m.group(2).strip().startswith("pytest_evalbench")) / 1000
    with_plugin, without = statistics.median(times["with"]), statistics.median(times["without"])
    print(f"\nstartup, an unrelated one-test run (median of 5): {with_plugin * 1000:.0f} ms with the plugin, "
          f"{without * 1000:.0f} ms without ({(with_plugin - without) * 1000:+.0f} ms); importing "
          f"pytest_evalbench.plugin: {own:.1f} ms of its own modules (-X importtime); {load()}", flush=True)


def rate_limited(server: Server, root: Path, args: argparse.Namespace) -> None:
    project = write_bench(root / "rate", args.rate_n)
    calls = args.rate_n * CALLS
    ideal = calls / (args.rate_limit / 60)
    print(f"\nrate: an endpoint enforcing {args.rate_limit:g} requests/min (1 s burst, x-ratelimit-* headers), no "
          f"limit option, N={args.rate_n} x {CALLS} = {calls} calls, C={args.rate_concurrency}, latency "
          f"{args.latency * 1000:g} ms; ideal = calls / R = {ideal:.1f} s; fixed = the same command with "
          f"--collect-only; span = first to last admitted request; {load()}")
    print(f"{'workers':>7} {'exit':>4} {'process s':>9} {'process/ideal':>13} {'fixed s':>7} {'(process-fixed)/ideal':>21} "
          f"{'span/ideal':>10} {'calls':>6} {'429s':>5} {'429s/calls':>10}")
    for workers in ("0", "2"):
        fixed = run_pytest(project, "--benchmark=perf", "--collect-only", "-n", workers)["process"]
        server.control(reset=True, latency=args.latency, rate_limit=args.rate_limit, status=200)
        (project / "benchmarks" / "perf" / ".evalbench-cache" / ".endpoint-limits").unlink(missing_ok=True)
        r = run_pytest(project, "--benchmark=perf", f"--evalbench-base-url={server.base_url}", "--evalbench-cache=off",
                       f"--evalbench-concurrency={args.rate_concurrency}", f"--evalbench-transport={args.transport}",
                       "-n", workers)
        stats = server.stats()
        print(f"{'-n ' + workers:>7} {r['exit']:>4.0f} {r['process']:>9.2f} {r['process'] / ideal:>13.2f} {fixed:>7.2f} "
              f"{(r['process'] - fixed) / ideal:>21.2f} {stats['span'] / ideal:>10.2f} {stats['requests']:>6} "
              f"{stats['limited']:>5} {stats['limited'] / max(1, stats['requests']):>10.1%}  ({load()})", flush=True)
    server.control(rate_limit=None)


def errors(server: Server, root: Path, args: argparse.Namespace) -> None:
    project = write_bench(root / "errors", args.errors)
    base = ("--benchmark=perf", f"--evalbench-base-url={server.base_url}", "--evalbench-cache=off",
            f"--evalbench-transport={args.transport}")
    server.control(reset=True, latency=args.errors_latency, status=200)
    passing = run_pytest(project, *base)
    passing_requests = server.requests()
    server.control(reset=True, status=500)
    failing = run_pytest(project, *base)
    failing_requests = server.requests()
    server.control(status=200)
    status = project / "benchmarks" / "perf" / "last_run.json"
    last: dict[str, Any] = json.loads(status.read_text()) if status.is_file() else {}
    print(f"\nerrors: {args.errors} rows ({TURNS} turns + judge, default concurrency, latency "
          f"{args.errors_latency * 1000:g} ms): endpoint answering 500 {failing['process']:.2f} s ({failing_requests} "
          f"requests, exit {failing['exit']:.0f}) against answered {passing['process']:.2f} s ({passing_requests} "
          f"requests, exit {passing['exit']:.0f}): {failing['process'] / passing['process']:.2f}; {load()}")
    print(f"  last_run.json of the erroring run: {last.get('status')}, {str(last.get('incomplete'))[:200]}", flush=True)


SECTIONS = ("clients", "xdist", "startup", "rate", "errors")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument("--n", type=int, default=200, help="rows of clients and xdist")
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 64, 128])
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds of xdist (medians printed)")
    parser.add_argument("--transport", choices=("aiohttp", "openai"), default="aiohttp")
    parser.add_argument("--rate-limit", type=float, default=3000, metavar="R", help="requests/min of the limited endpoint")
    parser.add_argument("--rate-n", type=int, default=100, help="rows of the rate-limited runs")
    parser.add_argument("--rate-concurrency", type=int, default=64)
    parser.add_argument("--errors", type=int, default=500, help="rows of the erroring run")
    parser.add_argument("--errors-latency", type=float, default=0.0, help="endpoint latency of the erroring run")
    args = parser.parse_args()
    began = time.perf_counter()
    print("pytest runs: PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 -p pytest_evalbench.plugin [-p xdist.plugin], bytecode "
          f"written, --evalbench-transport={args.transport}; every figure measured in this run; {load()}", flush=True)
    server = Server()
    try:
        with tempfile.TemporaryDirectory(prefix="evalbench-perf-") as tmp:
            root = Path(tmp)
            for section in SECTIONS:
                if section not in args.only:
                    continue
                if section == "startup":
                    startup(root)
                else:
                    {"clients": clients, "xdist": xdist, "rate": rate_limited, "errors": errors}[section](
                        server, root, args)
    finally:
        server.stop()
    print(f"\nscript run time {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--floor"]:
        floor(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(main())
