"""Fixed-cost performance script (not part of the test suite): prints, in one run, the issue #27
targets "Fixed costs down" and "Replays and failures as cheap as pytest allows".

    python tests/perf/bench_fixed.py [--n 200] [--repeat 3] [--cached 10000] [--errors 500] [--errors-latency 0]
        [--skip fixed cached errors]

1. Whole-process wall / ideal at C = 64 and C = 128 (N scenarios x 3 turns + judge, 100 ms latency,
   one process, cache off; targets <= 1.15 and <= 1.25), and `-n 2` against one process plus what
   xdist itself adds to an empty suite (a one-test project with `-n 2` minus the same without; and,
   printed below it, an empty suite of the same N items: xdist's cost grows with the items, about
   0.5 ms each for shipping their reports, 0.31 s for one empty test against 0.41 s for 200);
   `--repeat` interleaved rounds, medians, and the cores other processes used meanwhile: on a
   shared 2-core machine one `-n 2` run of several can lose 1-3 s to them (its start-up is three
   CPU-bound processes in a row, where one process has one), so a single round proves nothing.
2. Fully cached N = 10,000: the cache is recorded once (latency 0), then a `--evalbench-cache=replay`
   run (no request) against plain pytest running 10,000 trivial parametrized tests, in the same run
   (target <= 1.5); then the same replay in a fresh copy of the project (every file new: other
   inodes and mtimes, as CI's checkout of a committed cache).
3. 500 items whose endpoint answers HTTP 500 against the same 500 items answered (latency 0 unless
   `--errors-latency`, cache off; target <= 1.0).
Every pytest process is run as bench_engine.py runs it (autoload off, plugins named with -p). Both
sides of each ratio are measured here, one after the other; the machine's load average is printed
next to each ratio because the numbers are noisy on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_engine
from bench_engine import run_pytest, write_bench


class Server(bench_engine.Server):
    """bench_engine's endpoint (its `status` knob answers every chat call with that HTTP status)."""

    def requests(self) -> int:
        return int(self.stats()["requests"])


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def exit_note(r: dict[str, float]) -> str:
    return f" (exit {r['exit']:.0f})" if r.get("exit") else ""


def plain_project(root: Path, tests: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "test_rows.py").write_text(
        f"import pytest\n\n\n@pytest.mark.parametrize('i', range({tests}))\ndef test_row(i):\n    pass\n")
    return root


def contention(runs: list[dict[str, float]]) -> str:
    """What other processes took from the machine's cores while these runs ran (median, in cores)."""
    shares = [r["others_cpu"] / r["process"] for r in runs if "others_cpu" in r]
    return f"others used {statistics.median(shares):.2f} cores" if shares else "others' CPU not known"


def fixed(server: Server, root: Path, n: int, turns: int, latency: float, repeat: int) -> None:
    """Each concurrency: `repeat` rounds of (one process, `-n 2`, the empty suite with and without
    `-n 2`), one after the other, so every side sees the machine's load of the same minute; medians
    printed, each round's `-n 2` ratio and what other processes used of the cores meanwhile."""
    calls = 2 * turns + 1
    project = root / "fixed"
    write_bench(project, n, turns)
    base = ("--benchmark=perf", f"--evalbench-base-url={server.base_url}", "--evalbench-cache=off")
    print(f"1. fixed costs: N={n} x ({turns} turns + judge), {latency * 1000:.0f} ms, cache off; "
          f"ideal = ceil(N/C) x {calls} x latency; medians of {repeat} interleaved rounds", flush=True)
    plains = {"bare": plain_project(root / "empty", 1), "bare_n": plain_project(root / "empty_n", n)}
    for conc, target in ((64, 1.15), (128, 1.25)):
        ideal = math.ceil(n / conc) * calls * latency
        runs: dict[str, list[dict[str, float]]] = {"one": [], "two": [], "bare_xd": [], "bare": [],
                                                   "bare_n_xd": [], "bare_n": []}
        requests: dict[str, list[int]] = {"one": [], "two": []}
        for _ in range(repeat):
            for side, extra in (("one", ()), ("two", ("-n", "2"))):
                server.control(reset=True, latency=latency, status=200)
                runs[side].append(run_pytest(project, *base, f"--evalbench-concurrency={conc}", *extra))
                requests[side].append(server.requests())
            for side, plain in plains.items():
                runs[f"{side}_xd"].append(run_pytest(plain, "-n", "2", plugin=False))
                runs[side].append(run_pytest(plain, plugin=False))
        med = {side: statistics.median(r["process"] for r in rs) for side, rs in runs.items()}
        exits = "".join(exit_note(r) for rs in runs.values() for r in rs)
        print(f"   C={conc}: one process {med['one']:.2f} s, ideal {ideal:.2f} s, process/ideal "
              f"{med['one'] / ideal:.2f} (target <= {target}); requests {sorted(set(requests['one']))}{exits}; "
              f"{contention(runs['one'])}; {load()}", flush=True)
        allowed = med["one"] + (med["bare_xd"] - med["bare"])
        rounds = " ".join(f"{two['process'] / (one['process'] + xd['process'] - bare['process']):.2f}"
                          for one, two, xd, bare in zip(runs["one"], runs["two"], runs["bare_xd"], runs["bare"]))
        print(f"   C={conc}: -n 2 {med['two']:.2f} s vs one process + xdist's own cost ({med['one']:.2f} + "
              f"{med['bare_xd']:.2f} - {med['bare']:.2f} = {allowed:.2f} s): ratio {med['two'] / allowed:.2f} "
              f"(target <= 1.00; rounds: {rounds}); requests {sorted(set(requests['two']))}; during -n 2 "
              f"{contention(runs['two'])}; {load()}", flush=True)
        allowed_n = med["one"] + (med["bare_n_xd"] - med["bare_n"])
        print(f"   C={conc}: the same against what xdist adds to an empty suite of the same {n} items "
              f"({med['bare_n_xd']:.2f} - {med['bare_n']:.2f} = {med['bare_n_xd'] - med['bare_n']:.2f} s: it ships "
              f"each item's reports to the controller): allowed {allowed_n:.2f} s, ratio {med['two'] / allowed_n:.2f}",
              flush=True)


def cached(server: Server, root: Path, rows: int, turns: int) -> None:
    project = root / "cached"
    write_bench(project, rows, turns)
    server.control(reset=True, latency=0.0, status=200)
    base = ("--benchmark=perf", f"--evalbench-base-url={server.base_url}")
    record = run_pytest(project, *base, "--evalbench-cache=on", "--evalbench-concurrency=64")
    print(f"\n2. fully cached N={rows} ({turns} turns + judge): recorded in {record['process']:.1f} s, "
          f"{server.requests()} requests{exit_note(record)}", flush=True)
    plain = plain_project(root / "plain", rows)
    for _ in range(2):  # the second pair is the one printed: both sides with warm file caches
        server.control(reset=True)
        replay = run_pytest(project, *base, "--evalbench-cache=replay")
        bare = run_pytest(plain, plugin=False)
    print(f"   replay {replay['process']:.2f} s (requests {server.requests()}{exit_note(replay)}) vs plain pytest, "
          f"{rows} trivial parametrized tests {bare['process']:.2f} s: ratio {replay['process'] / bare['process']:.2f} "
          f"(target <= 1.5); {load()}", flush=True)
    checkout = root / "checkout"
    shutil.copytree(project, checkout, copy_function=shutil.copyfile)
    server.control(reset=True)
    fresh = run_pytest(checkout, *base, "--evalbench-cache=replay")
    print(f"   replay in a fresh copy: {fresh['process']:.2f} s (requests {server.requests()}"
          f"{exit_note(fresh)}): ratio {fresh['process'] / bare['process']:.2f}; {load()}", flush=True)
    shutil.rmtree(checkout)


def errors(server: Server, root: Path, items: int, turns: int, latency: float) -> None:
    project = root / "errors"
    write_bench(project, items, turns)
    base = ("--benchmark=perf", f"--evalbench-base-url={server.base_url}", "--evalbench-cache=off")
    server.control(reset=True, latency=latency, status=200)
    passing = run_pytest(project, *base)
    passing_requests = server.requests()
    server.control(reset=True, status=500)
    failing = run_pytest(project, *base)
    failing_requests = server.requests()
    server.control(status=200)
    status = project / "benchmarks" / "perf" / "last_run.json"
    last = json.loads(status.read_text()) if status.is_file() else {}
    print(f"\n3. {items} items ({turns} turns + judge, default concurrency, latency {latency * 1000:.0f} ms): "
          f"endpoint answering 500 "
          f"{failing['process']:.2f} s ({failing_requests} requests, exit {failing['exit']:.0f}) vs answered "
          f"{passing['process']:.2f} s ({passing_requests} requests, exit {passing['exit']:.0f}): ratio "
          f"{failing['process'] / passing['process']:.2f} (target <= 1.00); {load()}", flush=True)
    print(f"   last_run.json of the erroring run: {last.get('status')}, {str(last.get('incomplete'))[:200]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--cached", type=int, default=10_000, help="rows of the fully cached run")
    parser.add_argument("--errors", type=int, default=500, help="items of the erroring run")
    parser.add_argument("--errors-latency", type=float, default=0.0, help="endpoint latency of the erroring run")
    parser.add_argument("--repeat", type=int, default=3, help="rounds of section 1 (medians printed)")
    parser.add_argument("--skip", nargs="*", default=[], choices=["fixed", "cached", "errors"])
    args = parser.parse_args()
    began = time.perf_counter()
    print("pytest runs: PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 -p pytest_evalbench.plugin [-p xdist.plugin], "
          f"bytecode written; {load()}", flush=True)
    server = Server()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            if "fixed" not in args.skip:
                fixed(server, root, args.n, args.turns, args.latency, args.repeat)
            if "errors" not in args.skip:
                errors(server, root, args.errors, args.turns, args.errors_latency)
            if "cached" not in args.skip:
                cached(server, root, args.cached, args.turns)
    finally:
        server.stop()
    print(f"\nscript run time {time.perf_counter() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
