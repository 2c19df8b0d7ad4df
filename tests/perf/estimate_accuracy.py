"""`--evalbench-estimate` against the run it predicts (issue 27: within 20% of calls and tokens), for a
scenario and a dataset benchmark, printed as ratios estimate / real per role from one run.

    python tests/perf/estimate_accuracy.py [--rows 40]

Against the project's fake server (it counts tokens as characters / 4, as the estimate does), with
answers of varied length (seeded by the request, so both runs see the same answers). Three
estimates each: cold (outputs from max_tokens: an upper bound), cold with max_tokens near the
answers' size, and after half the items were recorded in the cache (the rest from its means);
the real run is then made with `--evalbench-cache=refresh` (every call sent and counted).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from pytest_evalbench.testing import FakeLLMServer, by_model

ROOT = Path(__file__).resolve().parents[2]
USER, TARGET, JUDGE = "sim-user", "sim-target", "sim-judge"
ROW = re.compile(r"^  (simulated user|target \S+|judge(?: \S+)?)\s+(\S+)\s+(\d+)[^~]*~(\d+)\s+~(\d+)")
USED = re.compile(r"^\s+(\w+):(\w+)\s+(\d+) in\s+(\d+) out")


def seeded(request: dict[str, Any], low: int, high: int) -> int:
    digest = hashlib.sha256(json.dumps(request["messages"]).encode()).digest()
    return low + int.from_bytes(digest[:4], "big") % (high - low + 1)


def respond(request: dict[str, Any]) -> Any:
    """Answers of varied length per role (characters): user 80-240, target 200-1200, judge 60-300."""
    model = request["model"]
    if model == USER:
        return f"Thought: {'t' * seeded(request, 20, 80)}\nMessage: {'m' * seeded(request, 60, 160)}"
    if model == TARGET:
        return "y" * seeded(request, 200, 1200) + "?"
    if "response_format" in request and "explain" in json.dumps(request["response_format"]):
        return {"explanation": "e" * seeded(request, 60, 300), "score": 4}
    return {"justification": "j" * seeded(request, 60, 300), "present": bool(seeded(request, 0, 1))}


def scenario_bench(root: Path, rows: int, max_tokens: dict[str, int] | None) -> None:
    bench = root / "benchmarks" / "est"
    bench.mkdir(parents=True, exist_ok=True)
    params = {role: ({"params": {"max_tokens": max_tokens[role]}} if max_tokens else {}) for role in ("u", "t", "j")}
    spec = {"name": "est", "description": "estimate accuracy",
            "metrics": [{"id": "m01", "name": "Asks", "type": "positive", "definition": "Asks a question.",
                         "checks": {"rules": [{"not_contains": "?", "then": "absent"}], "otherwise": "judge"}},
                        {"id": "m02", "name": "Avoid", "type": "negative", "definition": "States a diagnosis."}],
            "generation": {"turns": 3, "num_samples": 1, "perfunctory": True, "landmarks": True},
            "targets": [{"id": "tgt", "model": TARGET, **params["t"]}],
            "user_model": {"model": USER, **params["u"]}, "evaluator_model": {"model": JUDGE, **params["j"]}}
    (bench / "benchmark.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    scenarios = [{"id": f"m0{1 + i % 2}_s{i:03d}_v01", "metric_id": f"m0{1 + i % 2}", "persona": f"person {i} " * 5,
                  "user_goal": f"get help with problem {i}", "landmarks": [{"turn": 2, "instruction": "push back"}]}
                 for i in range(rows)]
    (bench / "scenarios.json").write_text(json.dumps(scenarios))


def dataset_bench(root: Path, max_tokens: dict[str, int] | None) -> None:
    bench = root / "benchmarks" / "est"
    shutil.copytree(ROOT / "benchmarks" / "agents", bench, ignore=shutil.ignore_patterns(".evalbench-cache", "calib*"))
    spec = yaml.safe_load((bench / "benchmark.yaml").read_text())
    spec["name"] = "est"
    spec["evaluator_model"] = {"model": JUDGE, **({"params": {"max_tokens": max_tokens["j"]}} if max_tokens else {})}
    (bench / "benchmark.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))


def pytest_run(root: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "pytest_evalbench.plugin", "-p", "xdist",
                           "--benchmark=est", "-q", *args], cwd=root, env=env, capture_output=True, text=True, check=False,
                          timeout=900)
    return done.stdout


def table(out: str) -> dict[str, tuple[int, int, int]]:
    found = {}
    for line in out.splitlines():
        match = ROW.match(line)
        if match:
            found["target" if match.group(1).startswith("target") else match.group(1)] = (
                int(match.group(3)), int(match.group(4)), int(match.group(5)))
    return found


def real(out: str, server: FakeLLMServer) -> dict[str, tuple[int, int, int]]:
    roles = {USER: "simulated user", TARGET: "target", JUDGE: "judge"}
    calls = {role: sum(1 for r in server.requests if r["model"] == model) for model, role in roles.items()}
    found = {}
    for line in out.splitlines():
        match = USED.match(line)
        if match:
            role = {"user": "simulated user", "target": "target", "judge": "judge"}[match.group(2)]
            found[role] = (calls[role], int(match.group(3)), int(match.group(4)))
    return found


def compare(label: str, guess: dict[str, tuple[int, int, int]], measured: dict[str, tuple[int, int, int]]) -> None:
    for role, numbers in measured.items():
        got = guess.get(role, (0, 0, 0))
        ratios = "  ".join(f"{what} {g}/{m} = {g / m:.2f}" if m else f"{what} {g}/0"
                           for what, g, m in zip(("calls", "input", "output"), got, numbers))
        print(f"  {label:34} {role:15} {ratios}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=40)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} (ratios of token and call counts; not timed)", flush=True)
    with FakeLLMServer(by_model({USER: respond, TARGET: respond, JUDGE: respond})) as server:
        env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTEST_ADDOPTS": "",
               "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-estimate"}
        near = {"u": 50, "t": 200, "j": 60}
        for kind in ("scenario", "dataset"):
            print(f"{kind} benchmark (estimate / what the real run counted):", flush=True)
            for label, tokens, record in (("cold, default max_tokens", None, False),
                                          ("cold, max_tokens near the answers", near, False),
                                          ("half the items cached", None, True)):
                with tempfile.TemporaryDirectory(prefix="evalbench-estimate-") as tmp:
                    root = Path(tmp)
                    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
                    if kind == "scenario":
                        scenario_bench(root, args.rows, tokens)
                    else:
                        dataset_bench(root, tokens)
                    if record:
                        pytest_run(root, env, "-k", "m01 or curator")
                    guess = table(pytest_run(root, env, "--evalbench-estimate"))
                    server.requests.clear()
                    out = pytest_run(root, env, "--evalbench-cache=refresh")
                    compare(label, guess, real(out, server))
    return 0


if __name__ == "__main__":
    sys.exit(main())
