"""The batch tier's figures (not part of the test suite), every side measured in this one run against
the project's fake server (in this process, its Batch API finishing each batch `--delay` seconds after
it was created):

    python tests/perf/batch.py [--rows 40] [--delay 10]

1. A scenario benchmark (`--rows` rows, 2 turns, the judge) run standard, then with
   `--evalbench-batch=judge`: the batched run's synchronous judge requests (target 0), whether every
   case's status is the standard run's, and the judge's cost (cost.json's `evaluate`) against the
   standard run's (target exactly 0.50).
2. The same with `--evalbench-batch=all`: wall against 1.10 x (batch rounds x delay) + the standard
   run's wall (the target: at most that), and the whole cost against list (target <= 0.52).
3. A judge-batched run killed (SIGKILL) once its batch is recorded, then run again: lines submitted
   twice (target 0).

Each run is its own `python -m pytest` process with its own cache directory (every call a miss), so
a wall includes the interpreter's start; the standard run's wall is the term that carries it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from pytest_evalbench.testing import FakeLLMServer, by_model

USER, TARGET, JUDGE = "perf-user", "perf-target", "perf-judge"
PRICE = {"input_per_million": 1.0, "output_per_million": 4.0}


def write_benchmark(root: Path, rows: int) -> Path:
    bench = root / "benchmarks" / "batch"
    bench.mkdir(parents=True)
    spec = {"name": "batch", "metrics": [{"id": "m01", "name": "Asks", "type": "positive",
                                          "definition": "The assistant asks a question.", "examples": ["Where?"]}],
            "generation": {"turns": 2, "num_samples": 1, "perfunctory": False, "landmarks": False},
            "targets": [{"id": "tgt", "model": TARGET}], "user_model": {"model": USER},
            "evaluator_model": {"model": JUDGE}, "pricing": {USER: dict(PRICE), TARGET: dict(PRICE), JUDGE: dict(PRICE)}}
    (bench / "benchmark.yaml").write_text(yaml.safe_dump(spec))
    scenarios = [{"id": f"m01_s{i:03d}_v01", "metric_id": "m01", "persona": f"persona {i}", "user_goal": "help",
                  "latent_adversarial_goal": "none", "landmarks": [], "demographic": {}} for i in range(rows)]
    (bench / "scenarios.json").write_text(json.dumps(scenarios))
    return bench


def responder() -> Any:
    def user(request: dict[str, Any]) -> str:
        text = str(request["messages"])
        persona = text[text.find("persona "):][:12]
        return f"Thought: ok\nMessage: help {persona}"

    def judge(request: dict[str, Any]) -> dict[str, Any]:
        digits = [c for c in str(request["messages"]) if c.isdigit()]
        return {"justification": "seen", "present": sum(map(int, digits)) % 3 != 0}

    return by_model({USER: user, TARGET: lambda r: "Where are you going?", JUDGE: judge})


def pytest_args(root: Path, cache: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
            "--benchmark=batch", f"--evalbench-cache-dir={root / cache}", "--evalbench-batch-poll=0.5", *extra]


SPANS: dict[str, tuple[float, float]] = {}
"""Run name -> (start, end) on the wall clock the fake server's batch times use."""
CPU: dict[str, float] = {}
"""Run name -> the run's CPU seconds (user + sys of its process)."""


def run(root: Path, env: dict[str, str], cache: str, *extra: str) -> tuple[float, dict[str, Any], dict[str, Any]]:
    """(wall, conv_id -> (present, passed), cost.json) of one run."""
    started, clock = time.monotonic(), time.time()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(pytest_args(root, cache, *extra), cwd=root, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    SPANS[cache] = (clock, clock + wall)
    CPU[cache] = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if done.returncode not in (0, 1):
        sys.exit(f"run {cache} failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    runs = root / "benchmarks" / "batch" / "runs" / "tgt"
    rows = json.loads((runs / "scores.json").read_text())
    return wall, {r["conv_id"]: (r["present"], r["passed"]) for r in rows}, json.loads((runs / "cost.json").read_text())


class Clock:
    """The fake server's Batch API calls timed on the wall clock (wrapping its routes, nothing changed):
    uploads, creations, the poll that saw each batch done, and output reads; the synchronous chat
    requests' times too, for the standard run's start and end."""

    def __init__(self, server: FakeLLMServer) -> None:
        self.events: list[tuple[float, str, str]] = []
        self.polls: Counter[str] = Counter()
        desk = server.batch
        post, get, finish, record = desk.post, desk.get, desk._finish, server._record

        def timed_post(path: str, raw: bytes, content_type: str) -> tuple[int, dict[str, Any]]:
            status, made = post(path, raw, content_type)
            self.events.append((time.time(), "upload" if path == "/v1/files" else "create", str(made.get("id"))))
            return status, made

        def timed_get(path: str, *args: Any) -> tuple[int, bytes]:
            answered = get(path, *args)
            parts = path.split("/")
            if parts[2:3] == ["batches"]:
                self.polls[parts[3]] += 1
            elif path.endswith("/content"):
                self.events.append((time.time(), "read", parts[3]))
            return answered

        def timed_finish(batch: dict[str, Any], *args: Any) -> None:
            finish(batch, *args)
            self.events.append((time.time(), "seen done", batch["id"]))

        def timed_record(request: dict[str, Any]) -> None:
            record(request)
            self.events.append((time.time(), "request", ""))

        desk.post, desk.get, desk._finish = timed_post, timed_get, timed_finish  # type: ignore[method-assign]
        server._record = timed_record  # type: ignore[method-assign]

    def between(self, span: tuple[float, float]) -> list[tuple[float, str, str]]:
        return sorted(e for e in self.events if span[0] <= e[0] <= span[1])


def decompose(clock: Clock, server: FakeLLMServer, delay: float, standard: tuple[float, float],
              batched: tuple[float, float]) -> str:
    """Where the batched run's time beyond its rounds goes, read from the fake server's times (load moves
    these less than the walls): start-up (process start to the first upload, against the standard run's
    start to its first request), per round the poll that saw the batch done (after created + delay),
    reading its output, collecting the next round (read to upload) and the upload (upload to create),
    and the end (last batch seen done to process exit, against the standard run's last request to exit)."""
    std = [t for t, what, _ in clock.between(standard) if what == "request"]
    events = clock.between(batched)
    created = {ident: t for t, what, ident in events if what == "create"}
    seen = {ident: t for t, what, ident in events if what == "seen done"}
    uploads = [t for t, what, _ in events if what == "upload"]
    reads = [t for t, what, _ in events if what == "read"]
    order = sorted(created, key=created.__getitem__)
    late = [seen[b] - created[b] - delay for b in order if b in seen]
    collect, upload, read = [], [], []
    for before, after in itertools.pairwise(order):
        done = seen[before]
        read_at = min((t for t in reads if t >= done), default=done)
        up = max((t for t in uploads if t <= created[after]), default=created[after])
        read.append(read_at - done)
        collect.append(up - read_at)
        upload.append(created[after] - up)
    start_std, end_std = std[0] - standard[0], standard[1] - std[-1]
    start_all = min(uploads) - batched[0]
    end_all = batched[1] - max(seen.values())
    polls = [clock.polls[b] for b in order]
    per_round = [sum(parts) / max(1, len(parts)) for parts in (late, read, collect, upload)]
    overhead = sum(late) + sum(read) + sum(collect) + sum(upload)
    return (f"   where the time goes ({len(order)} batches; fake server's clock): start-up {start_all:.2f}s vs standard "
            f"{start_std:.2f}s (+{start_all - start_std:.2f}s); per round: seen done {per_round[0] * 1000:.0f} ms "
            f"after ready, output read {per_round[1] * 1000:.0f} ms, next round collected {per_round[2] * 1000:.0f} ms, "
            f"upload to create {per_round[3] * 1000:.0f} ms (rounds overhead {overhead:.2f}s); "
            f"end {end_all:.2f}s vs standard {end_std:.2f}s (+{end_all - end_std:.2f}s); polls per batch {polls}")


def total(cost: dict[str, Any]) -> float:
    return sum(phase["cost"] for name, phase in cost.items() if name != "version")


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=40)
    parser.add_argument("--delay", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer(responder()) as server:
        root = Path(tmp)
        write_benchmark(root, args.rows)
        env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "perf-key",
               "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTEST_ADDOPTS": "-p pytest_evalbench.plugin"}

        clock = Clock(server)
        wall_std, standard, cost_std = run(root, env, "standard")
        server.reset()
        _, judged, cost_judge = run(root, env, "judge", "--evalbench-batch=judge")
        sync_judge = sum(1 for r in server.requests if r.get("model") == JUDGE)
        ratio = cost_judge["evaluate"]["cost"] / cost_std["evaluate"]["cost"]
        print(f"1. judge batched: {sync_judge} synchronous judge requests (target 0) {verdict(sync_judge == 0)}; "
              f"statuses identical to standard: {judged == standard} ({len(judged)} cases) "
              f"{verdict(judged == standard)}; judge cost / standard = {ratio:.4f} (target 0.50) "
              f"{verdict(abs(ratio - 0.5) < 1e-9)}")

        server.reset()
        server.batch.delay = args.delay
        before = len(server.batch.batches)
        wall_all, all_rows, cost_all = run(root, env, "all", "--evalbench-batch=all")
        rounds = len(server.batch.batches) - before
        bound = 1.10 * rounds * args.delay + wall_std
        cost_ratio = total(cost_all) / total(cost_std)
        print(f"2. all batched: wall {wall_all:.2f}s vs 1.10 x {rounds} rounds x {args.delay:.1f}s + standard "
              f"{wall_std:.2f}s = {bound:.2f}s {verdict(wall_all <= bound)} (wall / (rounds x delay + standard) = "
              f"{wall_all / (rounds * args.delay + wall_std):.3f}); cost / list = {cost_ratio:.4f} (target <= 0.52) "
              f"{verdict(cost_ratio <= 0.52)}; statuses identical: {all_rows == standard} "
              f"{verdict(all_rows == standard)}; {server.requests.__len__()} synchronous requests")
        print(decompose(clock, server, args.delay, SPANS["standard"], SPANS["all"]))
        print(f"   CPU seconds (user + sys): standard {CPU['standard']:.2f}, all batched {CPU['all']:.2f}")
        print(f"   load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")

        server.batch.delay = 60.0
        before = set(server.batch.batches)
        process = subprocess.Popen(pytest_args(root, "killed", "--evalbench-batch=judge"), cwd=root, env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        records = root / "killed" / ".batches"
        deadline = time.monotonic() + 120
        while not (records.exists() and any(records.glob("*.json"))) and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait()
        server.batch.delay = 0.5
        _, resumed, _ = run(root, env, "killed", "--evalbench-batch=judge")
        lines = Counter(cid for bid, batch in server.batch.batches.items() if bid not in before
                        for cid in batch_ids(server, bid))
        twice = sum(n - 1 for n in lines.values() if n > 1)
        print(f"3. killed after submission and rerun: {len(set(server.batch.batches) - before)} batch(es), "
              f"{twice} lines submitted twice (target 0) {verdict(twice == 0)}; statuses identical: "
              f"{resumed == standard} {verdict(resumed == standard)}")
    return 0


def batch_ids(server: FakeLLMServer, batch_id: str) -> list[str]:
    """The custom ids of one batch's input file, as the fake server holds it."""
    data = server.batch.files[server.batch.batches[batch_id]["input_file_id"]]
    return [json.loads(line)["custom_id"] for line in data.splitlines() if line.strip()]


if __name__ == "__main__":
    sys.exit(main())
