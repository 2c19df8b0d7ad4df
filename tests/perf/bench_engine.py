"""Engine performance script (not part of the test suite): prints ratios measured in one run.

    python tests/perf/bench_engine.py [--n 200] [--turns 3] [--latency 0.1] [--concurrency 1 16 64]

For each concurrency it runs `pytest --benchmark=perf` in one process (no xdist) against the
project's fake server with injected latency and prints wall time, the ideal time
ceil(N / C) x calls-per-conversation x latency, their ratio, requests made and the peak
concurrency the server saw. Then: per-item time at zero latency (cold: includes the openai
client; warm cache: the plugin alone), a warm rerun's request count, and the collection time
of a 10,000-row scenarios.json.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from pytest_evalbench.testing import by_model


def write_bench(root: Path, n: int, turns: int) -> None:
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


RESPONDER = by_model({
    # every conversation distinct (the persona names the row), so no call is deduplicated
    "sim-user": lambda r: f"Thought: t\nMessage: hello {len(r['messages'])} from "
                          + r["messages"][0]["content"].split("WHO YOU ARE: ")[1].split("\n")[0],
    "sim-target": lambda r: "Sure, tell me more?",
    "sim-judge": lambda r: {"justification": "asked", "present": True},
})


class ServerProcess:
    """The fake server in its own process, as a real endpoint would be (no GIL shared with pytest)."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
        self.proc = subprocess.Popen([sys.executable, "-m", "pytest_evalbench.testing.fake_server",
                                      "--responder", "bench_engine:RESPONDER"], stdout=subprocess.PIPE, env=env,
                                     text=True)
        assert self.proc.stdout is not None
        self.base_url = self.proc.stdout.readline().strip()

    def control(self, **body: object) -> None:
        request = urllib.request.Request(f"{self.base_url}/_control", data=json.dumps(body).encode(), method="POST")
        urllib.request.urlopen(request).read()

    def stats(self) -> dict[str, int]:
        return json.loads(urllib.request.urlopen(f"{self.base_url}/_stats").read())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


@contextlib.contextmanager
def server_process() -> Iterator[ServerProcess]:
    server = ServerProcess()
    try:
        yield server
    finally:
        server.stop()


class LoopTimer:
    """Times the test loop alone: from the first test to the last (startup and collection excluded)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> object:
        start = time.perf_counter()
        try:
            return (yield)
        finally:
            self.seconds = time.perf_counter() - start


def run_pytest(root: Path, *args: str) -> tuple[float, float, int]:
    """Run pytest in this process; return (whole-process seconds, test-loop seconds, exit code)."""
    cwd = os.getcwd()
    os.chdir(root)
    timer = LoopTimer()
    try:
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            code = pytest.main(["-p", "no:cacheprovider", "-p", "no:xdist", "-q", *args], plugins=[timer])
        return time.perf_counter() - start, timer.seconds, int(code)
    finally:
        os.chdir(cwd)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.1)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--collect-rows", type=int, default=10_000)
    args = parser.parse_args()
    calls = 2 * args.turns + 1
    os.environ["OPENAI_API_KEY"] = "sk-perf"
    with tempfile.TemporaryDirectory() as tmp, server_process() as server:
        root = Path(tmp)
        write_bench(root, args.n, args.turns)
        base = ["--benchmark=perf", f"--evalbench-base-url={server.base_url}"]
        print(f"N={args.n} scenarios x {args.turns} turns = {calls} calls each; latency {args.latency * 1000:.0f} ms")
        print("wall = the test loop (first test to last); process = the whole pytest run incl. startup")
        print(f"{'C':>4} {'wall s':>8} {'ideal s':>8} {'ratio':>6} {'process':>8} {'requests':>9} {'peak':>5}")
        for conc in args.concurrency:
            server.control(reset=True, latency=args.latency)
            process, wall, code = run_pytest(root, *base, "--evalbench-cache=off", f"--evalbench-concurrency={conc}")
            ideal = math.ceil(args.n / conc) * calls * args.latency
            stats = server.stats()
            print(f"{conc:>4} {wall:>8.2f} {ideal:>8.2f} {wall / ideal:>6.2f} {process:>8.2f} {stats['requests']:>9} "
                  f"{stats['peak_concurrency']:>5}" + ("" if code == 0 else f"  (exit {code})"), flush=True)

        server.control(reset=True, latency=0.0)
        _, cold, _ = run_pytest(root, *base, "--evalbench-cache=refresh", "--evalbench-concurrency=16")
        server.control(reset=True)
        _, warm, _ = run_pytest(root, *base, "--evalbench-cache=replay")
        print(f"zero latency, cold (openai client included): {cold / args.n * 1000:.2f} ms per item")
        print(f"zero latency, warm cache (plugin only):        {warm / args.n * 1000:.2f} ms per item, "
              f"{server.stats()['requests']} requests")

        big = root / "big"
        write_bench(big, args.collect_rows, args.turns)
        process, _, _ = run_pytest(big, "--benchmark=perf", "--collect-only")
        print(f"collection of {args.collect_rows} rows: {process:.2f} s (whole pytest process, startup included)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
