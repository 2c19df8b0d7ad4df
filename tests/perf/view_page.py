"""How long `evalbench view` takes to show a 10,000-case run's page in headless Chromium (not part of the
test suite; the target, under 1 s, is in docs/performance.md).

    python tests/perf/view_page.py [--cases 10000] [--rounds 5]

Records two runs of `--cases` cases (each with a transcript) in a fresh SQLite store, serves it with
uvicorn on 127.0.0.1, and opens /runs/1 (its default order: most worth labelling first), a filtered page,
a search, the runs page and the two runs side by side (/compare/1/2) in the system Chromium, `--rounds`
times each after one warm-up. Prints per page the median of the navigation's `duration` (request start
to the end of the load event, as the page's Navigation Timing reports it) and of the wall from the
navigate command to the load event; and the time to record the first run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "browser"))

from chromium_pipe import CHROMIUM, Chromium
from helpers import write_benchmark
from view_helpers import HOSTILE, case, new_store, run_of, serve

PAGES = {"run page (labelling order)": "/runs/1", "run page, failed, page 50": "/runs/1?status=failed&page=50",
         "run page, search": "/runs/1?q=traveller%20123", "runs page": "/",
         "two runs side by side": "/compare/1/2"}
NAVIGATION = "performance.getEntriesByType('navigation')[0].duration"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if CHROMIUM is None:
        print("chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_benchmark(root)
        store = new_store(root / "runs.sqlite")
        cases = [case(i, passed=i % 3 != 0, probability=i / args.cases, text=HOSTILE) for i in range(args.cases)]
        start = time.perf_counter()
        store.record(run_of(cases))
        print(f"recorded a {args.cases}-case run in {time.perf_counter() - start:.2f} s")
        store.record(run_of([case(i, passed=i % 4 != 0, probability=i / args.cases, text=HOSTILE)
                             for i in range(args.cases)], created="2026-12-07T07:00:00Z"))
        browser = Chromium(root / "profile")
        try:
            with serve(store, root) as served:
                for name, path in PAGES.items():
                    browser.open(served.url + path)  # warm-up: templates compiled, connection open
                    durations, walls = [], []
                    for _ in range(args.rounds):
                        start = time.perf_counter()
                        browser.open(served.url + path)
                        walls.append(time.perf_counter() - start)
                        durations.append(browser.evaluate(NAVIGATION) / 1000)
                    print(f"{name:30} navigation {statistics.median(durations):.3f} s (max {max(durations):.3f}), "
                          f"navigate-to-load wall {statistics.median(walls):.3f} s, median of {args.rounds}")
        finally:
            browser.close()
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
