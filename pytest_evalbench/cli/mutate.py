"""`evalbench mutate NAME`: does the suite catch anything? Runs the benchmark against deliberately
weakened variants (mutants) of each model target and reports, per metric and mutant, whether the
suite detects it: a significant drop against the real target under the gate's own paired test
(exact one-sided McNemar, the benchmark's correction and alpha).

Mutants are ordinary targets, so they are cached like any target (the original benchmark's cache):
- `<target>.m-nosys`: the target's system prompt removed (the generic default instead);
- `<target>.m-opp-<metric>`: the target told to do the opposite of the metric's definition;
- `<target>.m-canned`: an app target that replies with one canned sentence whatever the user says.

The run happens in a sibling benchmark `benchmarks/NAME.mutants/` (the real targets plus their
mutants; its result files and report.html are those of any run); the verdicts go to
`benchmarks/NAME/mutants.json`. Also a pytest plugin (`-p pytest_evalbench.cli.mutate`): it makes the
canned-reply app of the `.m-canned` targets.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import yaml
from pydantic import Field

from pytest_evalbench.base.errors import ConfigError, InputError
from pytest_evalbench.base.files import (
    FORMAT_VERSION,
    GITIGNORE,
    VERSION_KEY,
    atomic_write_text,
    copy_into,
    finite_json,
    read_json_or_default,
)
from pytest_evalbench.base.inputs import read_input_json, read_yaml
from pytest_evalbench.base.safe_files import UnsafeWrite, check_dir, check_input_file, check_write
from pytest_evalbench.base.safe_text import redact
from pytest_evalbench.formats import Strict
from pytest_evalbench.formats.results import PassFailUnit
from pytest_evalbench.formats.spec import SPEC_FILE, BenchmarkSpec, load_spec, resolve_benchmark_dir
from pytest_evalbench.formats.stats import mcnemar_detectable_drop
from pytest_evalbench.gate.paired import compare_with_baseline, make_baseline, rows_to_detect
from pytest_evalbench.kinds.protocol import spec_kind

MUTANTS_FILE = "mutants.json"
SUFFIX = ".mutants"
CANNED = ".m-canned"
CANNED_REPLY = "Thank you for your message."
"""What the canned-reply mutant says to every turn."""
COPIED = ("scenarios.json", "calibration.json", "calibration.jsonl")
"""The files of the benchmark the mutants' run reads besides benchmark.yaml."""
RUN_ERRORS = "run_errors.json"
"""Written by the mutants' run into benchmarks/NAME.mutants/: its items' errors by message."""
MAX_NAMED = 4
"""Mutant x metric pairs named in the one `not compared` line."""
MARKER = ".evalbench-mutants"
"""The file `evalbench mutate` writes first into benchmarks/NAME.mutants/: a directory without it is
never written into."""
IGNORE_ALL = "# evalbench mutate: everything here is rebuilt by the next run, so git ignores it all\n*\n"
MARKER_TEXT = ("Written by `evalbench mutate {name}`: the mutants' run of benchmarks/{name}/. Every file here "
               "is rewritten by the next `evalbench mutate {name}`; delete the directory to start over.\n")


@dataclass(frozen=True)
class Mutant:
    """One weakened variant of a model target."""

    target: str
    id: str
    mutation: str
    """`no-system-prompt`, `opposite` or `canned`."""
    metric: str | None = None
    """The metric an `opposite` mutant was told to defy."""


class Detection(Strict):
    """One mutant x metric: the real target's and the mutant's rates on their shared rows, and the verdict."""

    target: str
    mutant: str
    kind: str
    """`no-system-prompt`, `opposite` or `canned`."""
    metric: str
    real_rate: Optional[float]
    mutant_rate: Optional[float]
    n_shared: int
    p_adjusted: Optional[float]
    detected: Optional[bool]
    """A significant drop under the gate's own test; null: not compared (no shared scored rows)."""


class Sensitivity(Strict):
    """One metric: how many of the mutants compared on it the suite detected."""

    detected: int
    compared: int
    score: Optional[float]
    """detected / compared; null when no mutant was compared."""
    rows_needed: Optional[int] = None
    """Set when the metric's shared rows are too few for any drop to be significant (even every row
    flipping from pass to fail): the paired rows a fall of the real target's rate to 0 needs for 80%
    power at the benchmark's alpha (`gate.paired.rows_to_detect`); null otherwise."""


class MutationReport(Strict):
    """benchmarks/NAME/mutants.json: `evalbench mutate`'s verdicts, measured by the session that wrote it."""

    benchmark: str
    alpha: float
    correction: str
    detections: list[Detection] = Field(default_factory=list)
    sensitivity: dict[str, Sensitivity] = Field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {**self.model_dump(mode="json"), VERSION_KEY: FORMAT_VERSION}

    def lines(self) -> list[str]:
        """The report, one line per mutant x metric, then one sensitivity line per metric."""
        out = [f"mutants of {self.benchmark}: detected = a significant drop against the real target "
               f"(exact McNemar, {self.correction} correction, alpha {self.alpha:g}); measured this session"]
        for d in self.detections:
            if d.detected is not None:
                out.append(f"  {d.mutant} {d.metric}: {d.real_rate:.2f} -> {d.mutant_rate:.2f} of {d.n_shared}, "
                           f"p_adj {d.p_adjusted:.3g}: {'detected' if d.detected else 'NOT detected'}")
        missing = [f"{d.mutant} {d.metric}" for d in self.detections if d.detected is None]
        if missing:  # one line: why is the run's to say (`run_problems`)
            shown = ", ".join(missing[:MAX_NAMED]) + (f" and {len(missing) - MAX_NAMED} more"
                                                      if len(missing) > MAX_NAMED else "")
            out.append(f"  not compared (no shared scored rows): {len(missing)} of {len(self.detections)} "
                       f"mutant x metric pairs: {shown}")
        for metric, s in sorted(self.sensitivity.items()):
            score = "–" if s.score is None else f"{s.score:.2f}"
            out.append(f"sensitivity {metric}: {score} ({s.detected} of {s.compared} mutants detected)"
                       f"{self._finding(metric, s)}")
        return out

    def _finding(self, metric: str, s: Sensitivity) -> str:
        """Why a metric detected no mutant: too few rows for any drop to count, or no mutant moves it."""
        if s.detected or not s.compared:
            return ""
        compared = self._compared(metric)
        if all(mcnemar_detectable_drop(d.n_shared, 0.0, self.alpha) is None for d in compared):
            rows = max(d.n_shared for d in compared)
            need = (f"a fall of the real target's rate to 0 needs {s.rows_needed} rows (cases x samples) for 80% "
                    f"power" if s.rows_needed is not None else "the real target passes none of them: nothing "
                    "can fall")
            return (f" TOO FEW CASES: {rows} shared row{'s' if rows != 1 else ''} per mutant cannot show any drop "
                    f"significant at alpha {self.alpha:g}; {need}")
        return " INSENSITIVE: no mutant moves this metric"

    def _compared(self, metric: str) -> list[Detection]:
        return [d for d in self.detections if d.metric == metric and d.detected is not None]


def mutants_of(spec: BenchmarkSpec) -> list[Mutant]:
    """Every mutant of every model target of the benchmark."""
    out = []
    for target in spec.targets:
        if not target.model:
            continue
        out.append(Mutant(target.id, f"{target.id}.m-nosys", "no-system-prompt"))
        out += [Mutant(target.id, f"{target.id}.m-opp-{m.id}", "opposite", m.id) for m in spec.metrics]
        out.append(Mutant(target.id, f"{target.id}{CANNED}", "canned"))
    return out


def mutant_spec(data: dict[str, Any], spec: BenchmarkSpec, mutants: list[Mutant]) -> dict[str, Any]:
    """benchmark.yaml of the mutants' run: the real model targets, then one target per mutant."""
    raw = {t.get("id"): t for t in data.get("targets") or [] if isinstance(t, dict)}
    default_prompt = spec.scenario.user_context
    targets = [raw[m.target] for m in mutants if m.mutation == "canned"]  # each real model target once
    metrics = {m.id: m for m in spec.metrics}
    for mutant in mutants:
        base = dict(raw[mutant.target])
        base["id"] = mutant.id
        prompt = base.get("system_prompt") or default_prompt or "You are a helpful assistant."
        if mutant.mutation == "no-system-prompt":
            base["system_prompt"] = "You are a helpful assistant."
        elif mutant.mutation == "opposite" and mutant.metric is not None:
            base["system_prompt"] = (f"{prompt}\n\nIn this conversation, do the opposite of this behaviour: "
                                     f"{metrics[mutant.metric].behaviour}")
        targets.append(base)
    out = dict(data)
    out["name"] = f"{spec.name}{SUFFIX}"
    out["targets"] = targets
    return out


def mutants_dir(bench_dir: Path) -> Path:
    """benchmarks/NAME.mutants/, if `evalbench mutate` may write there: new, or a real directory (no
    link) inside benchmarks/ that holds the `MARKER` an earlier `mutate` wrote. Anything else is the
    user's (a benchmark of that name, a link a pull request planted): ConfigError, nothing written."""
    out = bench_dir.parent / f"{bench_dir.name}{SUFFIX}"
    if out.is_symlink():
        raise UnsafeWrite(f"{out}: is a symbolic link; evalbench mutate never writes through a link (remove it)")
    check_dir(out, bench_dir.parent)
    marker = out / MARKER
    if out.exists() and (marker.is_symlink() or not marker.is_file()):
        raise ConfigError(f"{out}: exists and was not written by evalbench mutate (no {MARKER} in it); nothing "
                          f"was written: rename or remove that directory (or rename benchmark {bench_dir.name!r})")
    return out


def prepare(bench_dir: Path, spec: BenchmarkSpec, mutants: list[Mutant]) -> Path:
    """Write benchmarks/NAME.mutants/ (its marker, benchmark.yaml and the data files; copies of data
    files the benchmark no longer has are removed); its results of earlier runs stay. Every write
    stays inside that directory and follows no link (`files.atomic_open`)."""
    data = read_yaml(bench_dir / SPEC_FILE)
    if not isinstance(data, dict):
        raise InputError(bench_dir / SPEC_FILE, "expected a mapping at the top level")
    out = mutants_dir(bench_dir)
    out.mkdir(exist_ok=True)
    atomic_write_text(out / MARKER, MARKER_TEXT.format(name=bench_dir.name), out)
    atomic_write_text(out / SPEC_FILE, yaml.safe_dump(mutant_spec(data, spec, mutants), sort_keys=False,
                                                      allow_unicode=True), out)
    for name in COPIED:
        if (bench_dir / name).is_file():
            copy_into(check_input_file(bench_dir / name, "a data file to copy"), out / name, out)
        elif (out / name).is_file() and not (out / name).is_symlink():
            (out / name).unlink()  # a copy of ours, of a file the benchmark no longer has
    atomic_write_text(out / GITIGNORE, IGNORE_ALL, out)  # all of it is rebuilt by the next mutate: never committed
    return out


def units(run_dir: Path, target: str) -> list[PassFailUnit]:
    """A target's scored rows of the mutants' run (runs/<target>/scores.json), as pass/fail units."""
    path = run_dir / "runs" / target / "scores.json"
    if not path.is_file():
        return []
    rows = read_input_json(path)  # nesting, numbers and duplicate keys bounded: one InputError naming the file
    if not isinstance(rows, list):
        raise InputError(path, f"a JSON {type(rows).__name__}, not a list of rows")
    return [PassFailUnit(target, str(r["id"]), str(r["metric_id"]), r["sample"] if isinstance(r.get("sample"), int) else 0,
                         r.get("passed"))
            for r in rows if isinstance(r, dict) and "id" in r and "metric_id" in r]


def detect(spec: BenchmarkSpec, run_dir: Path, mutants: list[Mutant]) -> MutationReport:
    """Each mutant against its real target, metric by metric, with the gate's own paired test."""
    gate = spec.gate
    report = MutationReport(benchmark=spec.name, alpha=gate.alpha, correction=gate.correction)
    metric_ids = [m.id for m in spec.metrics]
    for mutant in mutants:
        real = units(run_dir, mutant.target)
        weak = [PassFailUnit(mutant.target, u.id, u.metric_id, u.sample, u.passed)  # paired under the real id
                for u in units(run_dir, mutant.id)]
        comparison = compare_with_baseline(make_baseline([], real, {}), weak, correction=gate.correction,
                                           alpha=gate.alpha)
        for metric in metric_ids:
            test = comparison.get(mutant.target, metric)
            found = {} if test is None else {
                "real_rate": round(test.baseline_mean, 4), "mutant_rate": round(test.current_mean, 4),
                "n_shared": test.n_shared, "p_adjusted": test.p_adjusted, "detected": test.significant}
            report.detections.append(Detection.model_validate({
                "target": mutant.target, "mutant": mutant.id, "kind": mutant.mutation, "metric": metric, "real_rate": None,
                "mutant_rate": None, "n_shared": 0, "p_adjusted": None, "detected": None, **found}))
    for metric in metric_ids:
        compared = [d for d in report.detections if d.metric == metric and d.detected is not None]
        hits = sum(1 for d in compared if d.detected)
        report.sensitivity[metric] = Sensitivity(detected=hits, compared=len(compared),
                                                 score=round(hits / len(compared), 4) if compared else None,
                                                 rows_needed=rows_needed(compared, gate.alpha))
    return report


def rows_needed(compared: list[Detection], alpha: float) -> int | None:
    """When no compared mutant of a metric has rows enough for any drop to be significant (not even
    every row flipping from pass to fail): the paired rows a fall of the real target's rate to 0
    needs; else (or when the real target passes nothing) None."""
    if not compared or any(mcnemar_detectable_drop(d.n_shared, 0.0, alpha) is not None for d in compared):
        return None
    rate = max(d.real_rate or 0.0 for d in compared)
    return rows_to_detect(rate, rate, alpha) if rate > 0 else None


def mutate(root: Path, name: str, pytest_args: list[str]) -> tuple[MutationReport, int]:
    """Run the mutants and write benchmarks/NAME/mutants.json; (the report, the run's exit status)."""
    bench_dir = resolve_benchmark_dir(root / "benchmarks", name, "")
    spec = load_spec(bench_dir)
    if spec_kind(spec).judged != "metrics":  # the registry names kinds; a kind says what its judge decides
        raise ConfigError(f"{bench_dir / SPEC_FILE}: kind is {spec.kind!r}; evalbench mutate runs scenario benchmarks")
    mutants = mutants_of(spec)
    if not mutants:
        raise ConfigError(f"{bench_dir / SPEC_FILE}: no target with a `model` to mutate")
    check_write(bench_dir / MUTANTS_FILE, bench_dir)  # before any call: the verdicts will have somewhere to go
    run_dir = prepare(bench_dir, spec, mutants)
    (run_dir / RUN_ERRORS).unlink(missing_ok=True)  # ours (the directory is marked): an earlier run's
    command = [sys.executable, "-m", "pytest", f"--benchmark={run_dir.name}", "-p", "pytest_evalbench.cli.mutate",
               f"--evalbench-cache-dir={bench_dir / '.evalbench-cache'}", "-q", "-p", "no:cacheprovider",
               *pytest_args]
    status = subprocess.run(command, cwd=root, check=False, stdout=subprocess.DEVNULL).returncode
    report = detect(spec, run_dir, mutants)
    atomic_write_text(bench_dir / MUTANTS_FILE, finite_json(report.to_json(), bench_dir / MUTANTS_FILE, indent=1) + "\n",
                      bench_dir)
    return report, status


def run_problems(run_dir: Path) -> list[tuple[int, str]]:
    """The mutants' run's item errors as (items, message), most frequent first (`RUN_ERRORS`)."""
    found = read_json_or_default(run_dir / RUN_ERRORS, [])
    rows = [(e["items"], e["error"]) for e in found if isinstance(e, dict)
            and isinstance(e.get("items"), int) and isinstance(e.get("error"), str)] if isinstance(found, list) else []
    return sorted(rows, key=lambda row: -row[0])


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    """The mutants' run (this module is its plugin): its items' errors by message, written for
    `evalbench mutate` to say why the run is incomplete (controller or single process)."""
    from pytest_evalbench.plugin._compat import is_worker
    from pytest_evalbench.plugin.session import plugin_of

    if is_worker(session.config):
        return
    evalbench = plugin_of(session.config)
    counts = Counter(redact(message) for message in evalbench.books.messages.values())
    errors = [{"error": message, "items": n} for message, n in counts.most_common()]
    atomic_write_text(evalbench.bench_dir / RUN_ERRORS,
                      finite_json(errors, evalbench.bench_dir / RUN_ERRORS, indent=1) + "\n", evalbench.bench_dir)


def pytest_evalbench_make_target(config: Any, target: Any) -> Any:
    """The canned-reply app of a `.m-canned` mutant (this module is its run's plugin); None otherwise."""
    if str(target.id).endswith(CANNED):
        return lambda messages: CANNED_REPLY
    return None
