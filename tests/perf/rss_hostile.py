"""Peak RSS of a run against hostile endpoints (issue 25, row 5: an endless chunked body, a gzip
bomb), for each role, at -n 0 and -n 2. Prints one line per run; exits 1 if any is over 600 MB.

    python tests/perf/rss_hostile.py [--rows 48] [--concurrency 16] [--transport aiohttp|openai]

The fake server runs in this process; pytest runs as a child, so `ru_maxrss` of the children is
the pytest process's peak (with -n 2, the largest of controller and workers).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from helpers import JUDGE, TARGET, USER, judge_says, scenario, write_benchmark  # noqa: E402

from pytest_evalbench.testing import FakeLLMServer, Reply, by_model  # noqa: E402

LIMIT_MB = 600


def gzip_bomb(size: int) -> bytes:
    """`size` bytes of spaces, gzip-compressed piece by piece (this process never holds them: a
    child inherits its parent's peak RSS across exec, which would hide the child's own)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b" " * (1 << 20)
    return b"".join(packer.compress(block) for _ in range(size >> 20)) + packer.flush()


BOMB = gzip_bomb(1 << 30)  # 1 GiB in about 1 MB


def persona(request: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(request["messages"]).encode()).hexdigest()[:12]


def run(attack: str, role: str, workers: str, rows: int, concurrency: int, transport: str = "aiohttp") -> float:
    hostile = Reply(endless=True) if attack == "endless" else Reply(raw_body=BOMB, headers={"Content-Encoding": "gzip"})
    # every row's calls differ (the user names its persona), so none is shared by single flight
    routes: dict[str, Any] = {USER: lambda r: f"Thought: ok\nMessage: I need help, {persona(r)}",
                              TARGET: lambda r: "Sure, where to?", JUDGE: judge_says(True)}
    routes[role] = lambda r: hostile
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer(by_model(routes)) as server:
        scenarios = [scenario(f"m01_s{i:03d}_v01", "m01", persona=f"person {i}") for i in range(1, rows + 1)]
        write_benchmark(Path(tmp), scenarios=scenarios, generation={"turns": 1})
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test", "PYTEST_ADDOPTS": ""}
        with tempfile.TemporaryFile("w+") as out:
            child = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--benchmark=demo",
                                      "-q", "-n", workers, f"--evalbench-concurrency={concurrency}",
                                      "--evalbench-timeout=60", f"--evalbench-transport={transport}"],
                                     cwd=tmp, env=env, stdout=out, stderr=out)
            _, status, usage = os.wait4(child.pid, 0)  # this child's peak (and its waited-for workers')
            child.returncode = os.waitstatus_to_exitcode(status)
            if child.returncode != 7:
                out.seek(0)
                print(out.read()[-4000:])
                raise SystemExit(f"expected exit 7 (rows ended with an error), got {child.returncode}")
        return usage.ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=48)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--transport", default="aiohttp", choices=("aiohttp", "openai"))
    args = parser.parse_args()
    worst = 0.0
    for workers in ("0", "2"):
        for attack in ("endless", "bomb"):
            for role in (TARGET, JUDGE, USER):
                peak = run(attack, role, workers, args.rows, args.concurrency, args.transport)
                worst = max(worst, peak)
                print(f"-n {workers} {attack:8s} {role:10s} peak RSS {peak:6.0f} MB", flush=True)
    print(f"worst peak RSS {worst:.0f} MB (limit {LIMIT_MB} MB)")
    return 0 if worst < LIMIT_MB else 1


if __name__ == "__main__":
    sys.exit(main())
