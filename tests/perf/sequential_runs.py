"""Sequential sampling in real runs on the fake server (not part of the test suite): the calls a
`generation.sampling: sequential` run saves against fixed k on a stable suite, and how its per-case
verdicts compare with fixed k's on the same outcomes.

The suite: CASES scenario rows, k samples each, one turn; STABLE of them pass each sample with
probability STABLE_RATE, the others with FLAKY_RATE. The judge's answer to a case's n-th transcript is
drawn once per (case, n) from a seeded generator, so every run sees the same outcome sequence per
case. Three runs of `pytest --benchmark=seq` in a temporary project (cache off): a fixed run that
leaves the scores the prior is fitted to (as a team's last run would), then a fixed run and a
sequential run on the same outcomes. Calls are the fake server's requests (user, target, judge).

    PYTHONPATH=$PWD python tests/perf/sequential_runs.py [--cases 50] [--samples 5] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(HERE / "tests"))

from helpers import JUDGE, TARGET, USER, judge_says, scenario, write_benchmark  # noqa: E402

from pytest_evalbench.testing import FakeLLMServer, by_model  # noqa: E402

STABLE_RATE = 0.99
FLAKY_RATE = 0.5
SID = re.compile(r"(m01_s\d{3}_v01)")
VERDICT = re.compile(r"per-case: (m01_s\d{3}_v01)\[tgt\] \d+/\d+ passed -> (\w+)")


class Bookkeeping:
    """The judge's answer to a case's n-th transcript, the same in every run (`restart`)."""

    def __init__(self, rates: dict[str, float], samples: int, seed: int) -> None:
        rng = random.Random(seed)
        self.plan = {sid: [rng.random() < rate for _ in range(samples * 2)] for sid, rate in rates.items()}
        self.lock = threading.Lock()
        self.seen: Counter[str] = Counter()

    def restart(self) -> None:
        with self.lock:
            self.seen.clear()

    def present(self, request: dict[str, Any]) -> bool:
        found = SID.search(request["messages"][-1]["content"].split("CONVERSATION:", 1)[1])
        assert found is not None
        with self.lock:
            n = self.seen[found.group(1)]
            self.seen[found.group(1)] += 1
        return self.plan[found.group(1)][n]


def run(project: Path, server: FakeLLMServer) -> tuple[int, dict[str, str], float, dict[str, Any]]:
    server.reset()
    env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-perf", "COLUMNS": "200"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "--benchmark=seq", "--evalbench-cache=off", "-p", "no:xdist",
                           "-q", "-p", "no:cacheprovider"], check=False, cwd=project, env=env, capture_output=True,
                          text=True)
    wall = time.perf_counter() - start
    last = json.loads((project / "benchmarks" / "seq" / "last_run.json").read_text())
    assert last["status"] == "complete", (done.stdout[-3000:], last)
    return len(server.requests), dict(VERDICT.findall(done.stdout)), wall, last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=50)
    parser.add_argument("--stable", type=float, default=0.9, help="share of stable cases")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    sids = [f"m01_s{i:03d}_v01" for i in range(1, args.cases + 1)]
    stable = round(args.cases * args.stable)
    rates = {sid: STABLE_RATE if i < stable else FLAKY_RATE for i, sid in enumerate(sids)}
    outcomes = Bookkeeping(rates, args.samples, args.seed)

    def user(request: dict[str, Any]) -> str:
        found = SID.search(json.dumps(request))
        return f"Thought: ok\nMessage: I need help with {found.group(1) if found else '?'}"

    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer() as server:
        project = Path(tmp)
        (project / "pytest.ini").write_text("[pytest]\n")
        server.set_responder(by_model({USER: user, TARGET: lambda r: "Sure, where to?",
                                       JUDGE: judge_says(outcomes.present)}))
        bench = write_benchmark(project, "seq", scenarios=[scenario(sid, "m01") for sid in sids],
                                generation={"turns": 1, "num_samples": args.samples, "perfunctory": False,
                                            "landmarks": True, "sampling": "fixed"})
        spec = bench / "benchmark.yaml"
        run(project, server)  # the last run: its scores give the prior
        outcomes.restart()
        fixed_calls, fixed, fixed_wall, _ = run(project, server)
        spec.write_text(spec.read_text().replace("sampling: fixed", "sampling: sequential"))
        outcomes.restart()
        seq_calls, seq, seq_wall, last = run(project, server)
    same = sum(fixed[sid] == seq.get(sid) for sid in fixed)
    changed = sorted(f"{sid}: {fixed[sid]} -> {seq.get(sid)}" for sid in fixed if fixed[sid] != seq.get(sid))
    print(f"{args.cases} cases ({stable} stable at {STABLE_RATE}, the others at {FLAKY_RATE}), k = {args.samples}, "
          f"seed {args.seed}")
    print(f"fixed:      {fixed_calls} calls, {fixed_wall:.1f} s, verdicts {dict(Counter(fixed.values()))}")
    print(f"sequential: {seq_calls} calls, {seq_wall:.1f} s, verdicts {dict(Counter(seq.values()))}")
    print(f"calls saved: {fixed_calls - seq_calls} ({(fixed_calls - seq_calls) / fixed_calls:.1%}); "
          f"last_run.json sequential: {last['sequential']}")
    print(f"per-case verdicts equal to fixed k: {same}/{len(fixed)}" + (f"; differ: {', '.join(changed)}" if changed else ""))


if __name__ == "__main__":
    main()
