"""Noise model of the CI gate (not part of the test suite): how often does it fail a build when
nothing changed, and how often does it catch a real drop?

Every simulated run goes through the real gate code (`evaluate_gate` on in-memory rows, then
`GateDecision.exit_code`), in `gate: thresholds` mode so the exit status reflects the gate alone.

Model: a benchmark with M metrics x N cases per metric x S samples on one target. Each case has a
latent pass probability drawn once per replicate from a mixture typical of judged LLM cases:
60% stable passes (0.97), 15% stable failures (0.05), 25% flaky (uniform 0.2..0.8). The baseline
and the rerun draw every sample independently from these probabilities. "No change": the rerun
uses the same probabilities (any exit 6 is a false alarm; the rate over replicates is the
family-wise false-alarm rate). "Drop": on one metric the rerun's probabilities are scaled so its
expected pass rate falls by DROP (0.25) points; the exit-6 rate is the power.

Rules: `--evalbench-compare-fail=significant`, `--evalbench-compare-fail=drop:0.1`, and
`thresholds: {max_drop: 0.1}` with `--evalbench-compare`.

    PYTHONPATH=$PWD python tests/perf/gate_noise.py [--reps 1000] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import time

from pytest_evalbench.formats.results import ModelResult, PassFailUnit, RateSummary
from pytest_evalbench.formats.spec import ThresholdRules
from pytest_evalbench.gate.decision import EXIT_REGRESSION, GateInputs, GateSettings, evaluate_gate
from pytest_evalbench.gate.paired import make_baseline, parse_compare_rule

METRICS = (1, 5, 10)
CASES = (6, 20, 50)
SAMPLES = (1, 3)
DROP = 0.25
RULES = ("significant", "drop:0.1", "max_drop: 0.1")


def latent(rng: random.Random) -> float:
    u = rng.random()
    if u < 0.60:
        return 0.97
    if u < 0.75:
        return 0.05
    return rng.uniform(0.2, 0.8)


def draw(probs: dict[tuple[str, str], float], samples: int, rng: random.Random) -> list[PassFailUnit]:
    return [PassFailUnit("t", case, metric, s, rng.random() < p)
            for (metric, case), p in probs.items() for s in range(samples)]


def summaries(rows: list[PassFailUnit]) -> list[ModelResult]:
    """The per-target rates of one run (max_drop reads its metric list)."""
    by_metric: dict[str, list[int]] = {}
    for row in rows:
        k_n = by_metric.setdefault(row.metric_id, [0, 0])
        k_n[0] += bool(row.passed)
        k_n[1] += 1
    return [ModelResult(target_model="t", positive_pass_rate=None, negative_pass_rate=None, n_positive=len(rows),
                        n_negative=0, n_total=len(rows), by_scenario={},
                        by_metric={m: RateSummary(n_passed=k, n_total=n, pass_rate=k / n)
                                   for m, (k, n) in by_metric.items()})]


def settings_for(rule: str) -> tuple[GateSettings, ThresholdRules | None]:
    if rule.startswith("max_drop"):
        return GateSettings(mode="thresholds"), ThresholdRules(max_drop=0.1)
    return GateSettings(mode="thresholds", compare_fail=parse_compare_rule(rule)), None


def alarms(metrics: int, cases: int, samples: int, drop: float, reps: int, rng: random.Random) -> dict[str, int]:
    """Exit-6 count per rule over `reps` simulated baseline/rerun pairs."""
    hits = dict.fromkeys(RULES, 0)
    for _ in range(reps):
        probs = {(f"m{m:02d}", f"m{m:02d}_s{c:03d}"): latent(rng) for m in range(1, metrics + 1)
                 for c in range(cases)}
        rerun = dict(probs)
        if drop:
            hit = [key for key in probs if key[0] == "m01"]
            mean = sum(probs[k] for k in hit) / len(hit)
            for key in hit:
                rerun[key] = probs[key] * max(0.0, 1 - drop / mean)
        base_rows, rows = draw(probs, samples, rng), draw(rerun, samples, rng)
        baseline = make_baseline(summaries(base_rows), base_rows, {})
        for rule in RULES:
            settings, thresholds = settings_for(rule)
            outcome = evaluate_gate(GateInputs(results=summaries(rows), units=rows, rules=thresholds,
                                               baseline=baseline), settings)
            hits[rule] += outcome.exit_code(0) == EXIT_REGRESSION
    return hits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    started = time.perf_counter()
    header = "| metrics | cases | samples | " + " | ".join(f"FWER `{r}`" for r in RULES) + " | " + \
        " | ".join(f"power `{r}`" for r in RULES) + " |"
    print(header)
    print("|" + "---|" * (3 + 2 * len(RULES)))
    for metrics in METRICS:
        for cases in CASES:
            for samples in SAMPLES:
                null = alarms(metrics, cases, samples, 0.0, args.reps, rng)
                power = alarms(metrics, cases, samples, DROP, args.reps, rng)
                cells = [f"{100 * null[r] / args.reps:.1f}%" for r in RULES]
                cells += [f"{100 * power[r] / args.reps:.1f}%" for r in RULES]
                print(f"| {metrics} | {cases} | {samples} | " + " | ".join(cells) + " |", flush=True)
    print(f"\n{args.reps} replicates per cell and scenario, seed {args.seed}, "
          f"{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
