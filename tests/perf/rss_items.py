"""Peak RSS of one evalbench process at N items next to pytest's floor for N bare `pytest.Item`s
(the bound: within 1.25 x the floor at N = 100,000, docs/performance.md), in one run; also the
evalbench run with `--junitxml`, the one sink that needs per-item JUnit properties.

    python tests/perf/rss_items.py [--n 20000] [--latency 0.002] [--concurrency 64] [--no-junitxml]

Reuses bench_engine.py's fake endpoint (its own process) and measured pytest runs (autoload off,
only our plugin, peak RSS read by a probe plugin at session end). Prints one line per run and the ratio.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_engine import Server, bare_files, floor_rss, run_pytest, write_bench


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--latency", type=float, default=0.002)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--no-junitxml", action="store_true", help="skip the --junitxml run (halves the time)")
    args = parser.parse_args()
    server = Server()
    try:
        with tempfile.TemporaryDirectory(prefix="evalbench-rss-") as tmp:
            root = Path(tmp)
            bare = floor_rss(root / "bare", bare_files(args.n))
            print(f"N={args.n}: bare pytest.Item floor {bare:.0f} MB", flush=True)
            write_bench(root / "eval", args.n, 1)
            runs = {"evalbench": (), "evalbench --junitxml": ("--junitxml=junit.xml",)}
            if args.no_junitxml:
                del runs["evalbench --junitxml"]
            for label, extra in runs.items():
                server.control(reset=True, latency=args.latency)
                r = run_pytest(root / "eval", "--benchmark=perf", f"--evalbench-base-url={server.base_url}",
                               "--evalbench-cache=off", f"--evalbench-concurrency={args.concurrency}", *extra)
                rss = r.get("rss_mb", float("nan"))
                print(f"  {label}: {rss:.0f} MB ({rss / bare:.2f} x floor)"
                      + (f"  (exit {r['exit']:.0f})" if r.get("exit") not in (0.0, 1.0) else ""), flush=True)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
