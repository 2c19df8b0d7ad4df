"""The two HTTP transports side by side (not part of the test suite): the raw aiohttp path against the
openai SDK's, on the latency-bound run of `targets.py` (3 turns + judge per row, cache off, the
endpoint answering after `--latency` seconds in its own process), in interleaved rounds.

    python tests/perf/transports.py [--rows 1000] [--latency 1.0] [--concurrency 256] [--repeat 2]

Prints each transport's median wall and CPU (the whole pytest process) and the saving of aiohttp over
openai; the rule in docs/architecture.md keeps a second transport only if it saves 10% or more.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from targets import TURNS, Server, load, others, run_pytest, write_bench


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--transports", nargs="+", default=["aiohttp", "openai"])
    args = parser.parse_args()
    calls = 2 * TURNS + 1
    ideal = math.ceil(args.rows / args.concurrency) * calls * args.latency
    print(f"{args.rows} rows x {calls} calls, latency {args.latency:g} s, concurrency {args.concurrency}; "
          f"ideal {ideal:.2f} s; {load()}", flush=True)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in args.transports}
    server = Server()
    try:
        with tempfile.TemporaryDirectory(prefix="evalbench-perf-") as tmp:
            project = write_bench(Path(tmp) / "transports", args.rows)
            for round_ in range(args.repeat):
                for name in args.transports:
                    server.control(reset=True, latency=args.latency, status=200)
                    run = run_pytest(project, "--benchmark=perf", f"--evalbench-base-url={server.base_url}",
                                     "--evalbench-cache=off", f"--evalbench-concurrency={args.concurrency}",
                                     f"--evalbench-transport={name}")
                    requests = server.requests()
                    ok = run["exit"] == 0 and requests == args.rows * calls
                    print(f"round {round_ + 1} {name}: wall {run['process']:.2f} s ({run['process'] / ideal:.3f} of "
                          f"ideal), CPU {run['cpu']:.2f} s, {requests} requests{'' if ok else ' INVALID'}", flush=True)
                    if not ok:
                        return 2
                    runs[name].append(run)
    finally:
        server.stop()
    medians = {name: (statistics.median(r["process"] for r in rs), statistics.median(r["cpu"] for r in rs))
               for name, rs in runs.items()}
    for name, (wall, cpu) in medians.items():
        print(f"{name}: wall {wall:.2f} s ({wall / ideal:.3f} of ideal), CPU {cpu:.2f} s; {others(runs[name])}")
    if {"aiohttp", "openai"} <= set(medians):
        (raw, raw_cpu), (sdk, sdk_cpu) = medians["aiohttp"], medians["openai"]
        print(f"aiohttp saves {(sdk - raw) / sdk:.1%} of the wall and {(sdk_cpu - raw_cpu) / sdk_cpu:.1%} of the CPU "
              f"against openai; {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
