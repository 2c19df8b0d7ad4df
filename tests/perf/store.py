"""The run store's cost (not part of the test suite): a fully cached replay of 10,000 rows recording its
run in the default SQLite store against the same replay with `--evalbench-store=none`, interleaved rounds,
whole-process wall (medians): with / without <= 1.10.

    python tests/perf/store.py [--rows 10000] [--repeat 3] [--quick]

`--quick` is `--rows 2000 --repeat 1` (a check of the script in a minute, not the target's figure). The CPU
of both sides is printed too: on a machine other processes load, it moves less than the wall. Every
recording round starts from a new store file (the first run of a project pays for creating its tables) and
must add exactly one run with every row. The measured processes are run as `tests/perf/targets.py` runs
them (its endpoint, probe and isolation). Exit 0 when the target is met, 1 when missed, 2 when a run failed.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from targets import TURNS, Server, load, others, run_pytest, write_bench

BOUND = 1.10


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rows, repeat = (2_000, 1) if args.quick else (args.rows, args.repeat)
    server = Server()
    try:
        with tempfile.TemporaryDirectory(prefix="evalbench-perf-store-") as tmp:
            project = write_bench(Path(tmp) / "store", rows)
            base = ("--benchmark=perf", f"--evalbench-base-url={server.base_url}")
            server.control(reset=True, latency=0.0, status=200)
            record = run_pytest(project, *base, "--evalbench-cache=on", "--evalbench-concurrency=64",
                                "--evalbench-store=none")
            if record["exit"] != 0 or server.requests() != rows * (2 * TURNS + 1):
                print(f"INVALID: recording the cache failed (exit {record['exit']:.0f})")
                return 2
            store = project / ".evalbench" / "runs.sqlite"
            sides: dict[str, list[dict[str, float]]] = {"with": [], "without": []}
            run_pytest(project, *base, "--evalbench-cache=replay", "--evalbench-store=none")  # warm file caches
            for _ in range(repeat):
                store.unlink(missing_ok=True)
                sides["with"].append(run_pytest(project, *base, "--evalbench-cache=replay"))
                sides["without"].append(run_pytest(project, *base, "--evalbench-cache=replay", "--evalbench-store=none"))
                with sqlite3.connect(store) as db:
                    runs = db.execute("SELECT count(*), max(case_count) FROM runs").fetchone()
                if runs != (1, rows) or any(r["exit"] != 0 for side in sides.values() for r in side):
                    print(f"INVALID: a replay failed or the store holds {runs} (runs, cases), expected (1, {rows})")
                    return 2
    finally:
        server.stop()
    wall = {side: statistics.median(r["process"] for r in runs) for side, runs in sides.items()}
    ratio = wall["with"] / wall["without"]
    rounds = ", ".join(f"{a['process'] / b['process']:.3f}" for a, b in zip(sides["with"], sides["without"]))
    verdict = "PASS" if ratio <= BOUND else "MISS"
    print(f"store: cached replay of {rows} rows, recorded in a new SQLite store / not recorded: {ratio:.3f} "
          f"(target <= {BOUND:.2f}) {verdict}" + (" (--quick: not the target's size)" if args.quick else ""))
    cpu = {side: statistics.median(r["cpu"] for r in runs) for side, runs in sides.items()}
    print(f"  with {wall['with']:.2f} s, without {wall['without']:.2f} s (medians of {repeat} interleaved rounds; "
          f"each round's ratio: {rounds}); {others(sides['with'] + sides['without'])}; {load()}")
    print(f"  CPU with {cpu['with']:.2f} s, without {cpu['without']:.2f} s: {cpu['with'] / cpu['without']:.3f} "
          "(less moved by other processes than the wall on a busy machine)")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
