"""Baselines and the paired, multiplicity-corrected comparison of a run with its baseline, and the
compare rule.

A baseline file holds a run's pass/fail per unit and scores: unit rows (`PassFailUnit`: target, id,
metric_id, sample, passed; passed None = unscored), one pass/fail unit each, keyed
`<target>|<id>|<metric_id>|<sample>`; and score rows (`EvalScore`): numeric per-eval scores of dataset
cases on a 1..5 scale, keyed `<target>|<id>|<metric_id>`. Every comparison pairs the cases both runs
scored; the tests of one run form one family whose p-values are adjusted together (Holm by default).
Pure functions; no I/O, no pytest.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pytest_evalbench.base.numbers import Count, Probability, Score, number_problem
from pytest_evalbench.formats.results import EvalScore, ModelResult, PassFailUnit
from pytest_evalbench.formats.stats import (
    POWER,
    adjust,
    agresti_min_interval,
    bootstrap_mean_interval,
    mcnemar_detectable_drop,
    mcnemar_drop_p,
    mcnemar_power,
    wilcoxon_drop_p,
)

EPS = 1e-9  # a 1/n step must not count as more than an equal max_drop through float noise
POOLED = "(pooled)"
SCORE_RANGE = 4.0  # scores run 1..5: drops of scores are compared with drop:X / max_drop on (score-1)/4


# --------------------------------------------------------------------------- compare rules


@dataclass(frozen=True)
class CompareRule:
    kind: Literal["significant", "drop", "any"]
    min_drop: float = 0.0


RULE_FORMS = ("'significant' (fail on a drop that is significant after the run's multiplicity correction), "
              "'drop:<x>' with 0 <= x < 1 (fail when the observed drop exceeds x and is significant after "
              "correction), 'any' (fail on any observed drop)")


def parse_compare_rule(text: str) -> CompareRule:
    """`--evalbench-compare-fail` value -> CompareRule; ValueError lists the accepted forms."""
    raw = (text or "").strip().lower()
    if raw in ("significant", "any"):
        return CompareRule(raw)  # type: ignore[arg-type]
    if raw.startswith("drop:"):
        try:
            value = float(raw[5:])
        except ValueError:
            value = -1.0
        if 0 <= value < 1:
            return CompareRule("drop", value)
    raise ValueError(f"invalid compare rule {text!r}; accepted forms: {RULE_FORMS}")


# --------------------------------------------------------------------------- the comparison


@dataclass
class PairedTest:
    """One comparison of the family: a target x metric (pass/fail, exact one-sided McNemar), a
    target's pooled pass/fail over all its metrics, or a target x eval score (Wilcoxon).

    `change` is current minus baseline on the shared pairs (a pass rate, or for scores the mean
    difference divided by SCORE_RANGE); `drop` = -change. `low`/`high`: a descriptive 95% interval
    of the change (Agresti-Min for pass/fail, paired bootstrap for scores); the decision is
    `p_adjusted < alpha` with change < 0, nothing else.
    """

    target: str
    metric_id: str
    kind: Literal["pass/fail", "pooled", "scores"]
    n_shared: int
    baseline_mean: float
    current_mean: float
    change: float
    low: float
    high: float
    p_value: float
    method: str
    b: int = 0
    c: int = 0
    p_adjusted: float = 1.0
    significant: bool = False
    pass_to_fail: list[str] = field(default_factory=list)
    detectable: float | None = None
    """Pass/fail: the smallest drop this test detects with 80% power at the run's alpha, from its own
    n_shared and flip noise (`flip_noise`) (None: no drop is detectable; scores: not computed)."""

    @property
    def drop(self) -> float:
        return -self.change

    def exceeds(self, limit: float) -> bool:
        """Observed drop > limit (a pass rate moves in steps of 1/n_shared)."""
        return self.drop > limit + EPS

    def describe(self) -> str:
        if self.kind == "scores":
            scale = SCORE_RANGE
            what = (f"mean score {self.baseline_mean:.2f} -> {self.current_mean:.2f} "
                    f"({self.change * scale:+.2f}, bootstrap 95% CI [{self.low * scale:+.2f}, {self.high * scale:+.2f}])")
        else:
            what = (f"{self.baseline_mean:.2f} -> {self.current_mean:.2f} ({self.change:+.2f}; "
                    f"{self.b} pass->fail / {self.c} fail->pass of {self.n_shared})")
        return (f"{self.target}: {self.metric_id} {what}, {self.method} p={self.p_value:.3g}, "
                f"adjusted p={self.p_adjusted:.3g}" + ("" if self.kind == "scores" else f", {self.detects()}"))

    def detects(self) -> str:
        """`detects drops >= 0.25` (80% power at the run's alpha) or `detects no drop`."""
        return detects_text(self.detectable)


def flip_noise(b: int, c: int, n: int) -> float:
    """The share of pairs that flip when nothing changed, estimated from a comparison's flips: the rarer
    direction, doubled (flips are symmetric without a change; a real drop or gain only adds to one side)."""
    return min(1.0, 2 * min(b, c) / n) if n else 0.0


PLAN_MAX_ROWS = 100_000
"""`--evalbench-plan` looks no further: a drop that needs more paired rows is reported as out of reach."""


def rows_to_detect(drop: float, rate: float, alpha: float) -> int | None:
    """The fewest paired rows whose exact one-sided McNemar test detects a fall of the pass rate from
    `rate` to `rate - drop` with 80% power at alpha, each row passing independently in both runs (so a
    pair is discordant with probability rate(1 - rate + drop) + (1 - rate)(rate - drop)); None when the
    drop is impossible from that rate or needs more than PLAN_MAX_ROWS rows."""
    if drop <= 0 or drop > rate:
        return None
    noise = 2 * (1 - rate) * (rate - drop)

    def enough(n: int) -> bool:
        return mcnemar_power(n, noise, drop, alpha) >= POWER

    high = 1
    while not enough(high):
        if high >= PLAN_MAX_ROWS:
            return None
        high = min(PLAN_MAX_ROWS, high * 2)
    low = high // 2
    while high - low > 1:  # exact power steps up and down a little with n: the first n of the last rise
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid, high)
    return high


@dataclass(frozen=True)
class PlanLine:
    """`--evalbench-plan`: what one target x metric needs to detect a drop, from this selection's cases."""

    target: str
    metric: str
    rate: float
    rate_from: str
    """Where the rate comes from: the baseline file's name, or `assumed` (0.5 without a baseline)."""
    cases: int
    samples: int
    needed: int | None
    detectable_now: float | None

    def text(self, drop: float, alpha: float) -> str:
        head = f"{self.target} {self.metric}: rate {self.rate:.2f} ({self.rate_from})"
        now = f"this selection: {self.cases} case{'s' if self.cases != 1 else ''} x {self.samples} " \
              f"sample{'s' if self.samples != 1 else ''}, {detects_text(self.detectable_now)}"
        if self.needed is None:
            return f"{head}: a drop of {drop:.2f} is out of reach (over {PLAN_MAX_ROWS} paired rows); {now}"
        per_case = -(-self.needed // max(self.cases, 1))
        return (f"{head}: a drop of {drop:.2f} needs {self.needed} paired rows for 80% power at alpha {alpha:g}: "
                f"{self.cases} cases x {per_case} samples, or {self.needed} cases x 1 sample; {now}")


def plan(drop: float, alpha: float, units: Mapping[tuple[str, str], tuple[int, int]], baseline: Baseline | None,
         baseline_name: str = "baseline") -> list[PlanLine]:
    """Per (target, metric) with its (cases, samples) in this selection: the paired rows a comparison
    needs to detect `drop`, at the baseline's rate for it (0.5 without one)."""
    out = []
    for (target, metric), (cases, samples) in sorted(units.items()):
        entry = ((baseline.targets.get(target) or {}).get("metrics") or {}).get(metric) if baseline else None
        known = isinstance(entry, dict) and isinstance(entry.get("pass_rate"), (int, float))
        rate = float(entry["pass_rate"]) if known and entry else 0.5
        now = mcnemar_detectable_drop(cases * samples, 2 * rate * (1 - rate), alpha)
        out.append(PlanLine(target, metric, rate, baseline_name if known else "assumed", cases, samples,
                            rows_to_detect(drop, rate, alpha), now))
    return out


def detects_text(drop: float | None) -> str:
    """The smallest detectable change in words, the same on every surface: `detects drops >= 0.25`
    (80% power at the run's alpha) or `detects no drop` (no drop this n could make significant)."""
    return "detects no drop" if drop is None else f"detects drops >= {drop:.2f}"


@dataclass(frozen=True)
class NotCompared:
    """A target x metric the comparison could not pair (no shared cases, no scored cases on one side)."""

    target: str
    metric: str
    why: str

    def text(self) -> str:
        return f"{self.target}: {self.metric} not compared ({self.why})"


@dataclass
class Comparison:
    tests: list[PairedTest]
    correction: str
    alpha: float
    not_compared: list[NotCompared] = field(default_factory=list)
    """Comparisons that could not be made (no shared cases, metric missing on one side)."""
    baseline_meta: dict[str, Any] = field(default_factory=dict)
    meta_warnings: list[str] = field(default_factory=list)
    incomparable: dict[str, str] = field(default_factory=dict)
    """Target -> what changed since the baseline, for targets with paired tests left out as not
    comparable: a gate that reads the comparison cannot pass on them."""

    @property
    def unevaluated(self) -> list[str]:
        """`not_compared` in words: `<target>: <metric> not compared (<why>)`."""
        return [n.text() for n in self.not_compared]

    def get(self, target: str, metric_id: str) -> PairedTest | None:
        return next((t for t in self.tests if t.target == target and t.metric_id == metric_id), None)

    def fails(self, rule: str | CompareRule) -> list[str]:
        """Reasons the compare rule fails the build (empty list = passes)."""
        rule = parse_compare_rule(rule) if isinstance(rule, str) else rule
        hits = []
        for t in self.tests:
            if rule.kind == "any":
                hit = t.kind != "pooled" and t.exceeds(0.0)
            else:
                hit = t.significant and t.exceeds(rule.min_drop)
            if hit:
                hits.append(t.describe())
        return hits

    def to_dict(self) -> dict[str, Any]:
        """The HTML report's view: one entry per target x metric pass/fail test."""
        entries = []
        for t in self.tests:
            if t.kind != "pass/fail":
                continue
            entries.append({"target": t.target, "metric_id": t.metric_id, "baseline": {"rate": t.baseline_mean},
                            "change": t.change, "significant_drop": t.significant,
                            "paired": {"low": t.low, "high": t.high, "b": t.b, "c": t.c, "p_value": t.p_value,
                                       "p_adjusted": t.p_adjusted, "n_shared": t.n_shared}})
        return {"entries": entries, "tests": [asdict(t) for t in self.tests], "correction": self.correction,
                "alpha": self.alpha, "unevaluated": self.unevaluated, "baseline_meta": self.baseline_meta,
                "meta_warnings": self.meta_warnings}


def _group(values: dict[str, Any], parts: int) -> dict[tuple[str, str], dict[str, Any]]:
    """Keyed values split by (target, metric) from `t|id|metric[|sample]` keys."""
    out: dict[tuple[str, str], dict[str, Any]] = defaultdict(dict)
    for key, value in values.items():
        split = key.split("|")
        if len(split) == parts:
            out[(split[0], split[2])][key] = value
    return out


def _pass_fail_test(target: str, metric: str, kind: Literal["pass/fail", "pooled"],
                    old: dict[str, bool], new: dict[str, bool]) -> PairedTest | None:
    shared = sorted(set(old) & set(new))
    if not shared:
        return None
    pass_to_fail = [k for k in shared if old[k] and not new[k]]
    b, c, n = len(pass_to_fail), sum(1 for k in shared if new[k] and not old[k]), len(shared)
    low, high = agresti_min_interval(b, c, n)
    return PairedTest(target, metric, kind, n, sum(old[k] for k in shared) / n, sum(new[k] for k in shared) / n,
                      (c - b) / n, low, high, mcnemar_drop_p(b, c), "exact McNemar", b=b, c=c,
                      pass_to_fail=pass_to_fail)


def _score_test(target: str, metric: str, old: dict[str, float], new: dict[str, float]) -> PairedTest | None:
    shared = sorted(set(old) & set(new))
    if not shared:
        return None
    diffs = [(new[k] - old[k]) / SCORE_RANGE for k in shared]
    p, how = wilcoxon_drop_p(diffs)
    low, high = bootstrap_mean_interval(diffs)
    n = len(shared)
    return PairedTest(target, metric, "scores", n, sum(old[k] for k in shared) / n, sum(new[k] for k in shared) / n,
                      sum(diffs) / n, low, high, p, f"Wilcoxon ({how})")


def compare_with_baseline(baseline: Baseline, units: list[PassFailUnit], meta: dict[str, Any] | None = None,
                          *, scores: list[EvalScore] | None = None, correction: str = "holm",
                          alpha: float = 0.05, identities: Mapping[str, Mapping[str, str]] | None = None,
                          compare_anyway: bool = False, accept_incomparable: bool = False) -> Comparison:
    """Current run vs a baseline: every paired test, with p-values adjusted over the whole family.
    `meta` (the current run's, same shape as the baseline's) yields warnings for keys whose values
    differ, e.g. the judge model. `identities` (this run's, per target): a target whose judge,
    simulated user, check rules or plugin version differ from the baseline's is not comparable (its
    tests are left out, each named with what changed, and listed in `incomparable`) unless
    `compare_anyway`; `accept_incomparable` (leaving them out on purpose) adds a warning naming them."""
    old_cases, new_cases = _group(baseline.cases, 4), _group(unit_passes(units), 4)
    old_scores, new_scores = _group(baseline.scores, 3), _group(case_scores(scores or []), 3)
    tests: list[PairedTest] = []
    unevaluated: list[NotCompared] = []

    def missing(target: str, metric: str, old: dict[str, Any], new: dict[str, Any]) -> None:
        side = "this run" if old and not new else ("the baseline" if new and not old else "both")
        why = "no shared cases" if old and new else f"no scored cases in {side}"
        unevaluated.append(NotCompared(target, metric, why))

    by_target: dict[str, list[PairedTest]] = defaultdict(list)
    for key in sorted(set(old_cases) | set(new_cases)):
        test = _pass_fail_test(key[0], key[1], "pass/fail", old_cases.get(key, {}), new_cases.get(key, {}))
        if test is None:
            missing(*key, old_cases.get(key, {}), new_cases.get(key, {}))
        else:
            tests.append(test)
            by_target[key[0]].append(test)
    for target, target_tests in sorted(by_target.items()):
        if len(target_tests) > 1:
            old = {k: v for (t, _), cases in old_cases.items() if t == target for k, v in cases.items()}
            new = {k: v for (t, _), cases in new_cases.items() if t == target for k, v in cases.items()}
            pooled = _pass_fail_test(target, POOLED, "pooled", old, new)
            if pooled is not None:
                tests.append(pooled)
    for key in sorted(set(old_scores) | set(new_scores)):
        test = _score_test(key[0], key[1], old_scores.get(key, {}), new_scores.get(key, {}))
        if test is None:
            missing(*key, old_scores.get(key, {}), new_scores.get(key, {}))
        else:
            tests.append(test)
    warnings = meta_warnings(baseline.meta, meta) if meta is not None else []
    changed = identity_changes(baseline.identities, identities)
    if identities is not None and baseline.identities is None:
        warnings.append("the baseline records no identities (judge, simulated user, checks, plugin version): "
                        "compared as it is; save a new baseline to have them checked")
    incomparable: dict[str, str] = {}
    for target, what in sorted(changed.items()):
        if compare_anyway:
            warnings.append(f"{target}: compared anyway (--evalbench-compare-anyway) although {what}")
            continue
        if any(t.target == target for t in tests):
            incomparable[target] = what
            if accept_incomparable:
                warnings.append(f"{target}: not compared, accepted on purpose (--evalbench-accept-incomparable): "
                                f"{what}")
        unevaluated += [NotCompared(target, t.metric_id, f"not comparable: {what}; --evalbench-compare-anyway "
                                    "compares it") for t in tests if t.target == target]
        tests = [t for t in tests if t.target != target]
    for test, p_adj in zip(tests, adjust([t.p_value for t in tests], correction)):
        test.p_adjusted = p_adj
        test.significant = test.change < 0 and p_adj < alpha
        if test.kind != "scores":
            test.detectable = mcnemar_detectable_drop(test.n_shared, flip_noise(test.b, test.c, test.n_shared), alpha)
    return Comparison(tests, correction, alpha, unevaluated, dict(baseline.meta), warnings, incomparable)


def identity_changes(old: Mapping[str, Mapping[str, str]] | None,
                     new: Mapping[str, Mapping[str, str]] | None) -> dict[str, str]:
    """Per target both runs know: what of its identities changed, in words (`judge_model a -> b`)."""
    if old is None or new is None:
        return {}
    out = {}
    for target in sorted(set(old) & set(new)):
        before, now = old[target], new[target]
        parts = [f"{key} {before.get(key, 'unknown')} -> {now.get(key, 'unknown')}"
                 for key in sorted(set(before) | set(now)) if before.get(key) != now.get(key)]
        if parts:
            out[target] = "changed since the baseline: " + ", ".join(parts)
    return out


def _short(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def meta_warnings(baseline: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """What differs between the baseline's run and this one, in words: changed, added and removed
    entries of mappings (e.g. targets) instead of two raw dicts."""
    out = []
    for key in sorted(set(baseline) & set(current)):
        old, new = baseline[key], current[key]
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            parts = [f"{k}: {_short(old[k])} -> {_short(new[k])}" for k in sorted(set(old) & set(new)) if old[k] != new[k]]
            parts += [f"added {k} ({_short(new[k])})" for k in sorted(set(new) - set(old))]
            parts += [f"removed {k} ({_short(old[k])})" for k in sorted(set(old) - set(new))]
            out.append(f"{key} differ from the baseline: " + "; ".join(parts))
        else:
            out.append(f"{key} differs from the baseline: {_short(old)} -> {_short(new)}")
    return out


BASELINE_SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)


# --------------------------------------------------------------------------- rows and keys


def unit_passes(rows: Iterable[PassFailUnit]) -> dict[str, bool]:
    """Pass/fail per scored unit (`PassFailUnit.key`); unscored rows have no pass/fail."""
    return {r.key: r.passed for r in rows if r.passed is not None}


def case_scores(rows: Iterable[EvalScore]) -> dict[str, float]:
    """Numeric score per scored (target, case, eval) (`EvalScore.key`)."""
    return {r.key: r.score for r in rows}


@dataclass
class MetricCount:
    """One target x metric: scored rows, passes and the rate, with the metric's label."""

    n_passed: int
    n_total: int
    pass_rate: float | None = None
    metric_name: str | None = None
    metric_type: str | None = None


def metric_counts(results: list[ModelResult], units: list[PassFailUnit]) -> dict[str, dict[str, MetricCount]]:
    """{target: {metric_id: counts}}: from the scored outcome rows, falling back to the
    results.json `by_metric` of targets without rows."""
    out: dict[str, dict[str, MetricCount]] = {}
    labels: dict[str, tuple[str | None, str | None]] = {}
    from_rows: dict[str, dict[str, list[int]]] = {}
    for row in units:
        labels.setdefault(row.metric_id, (row.metric_name, row.metric_type))
        if row.passed is not None:
            counts = from_rows.setdefault(row.target, {}).setdefault(row.metric_id, [0, 0])
            counts[0] += row.passed
            counts[1] += 1
    for target, metrics in from_rows.items():
        for mid, (k, n) in metrics.items():
            out.setdefault(target, {})[mid] = MetricCount(k, n)
    for summary in results:
        if summary.target_model in from_rows:
            continue
        for mid, rate in summary.by_metric.items():
            out.setdefault(summary.target_model, {})[mid] = MetricCount(rate.n_passed, rate.n_total)
    for entries in out.values():
        for mid, entry in entries.items():
            entry.pass_rate = round(entry.n_passed / entry.n_total, 4) if entry.n_total else None
            entry.metric_name, entry.metric_type = labels.get(mid, (None, None))
    return out


# --------------------------------------------------------------------------- baseline files


@dataclass(frozen=True)
class Baseline:
    """A baseline in memory: the run's metadata, per-target rates (for people reading the file) and
    the paired units a later run is compared with, case by case."""

    meta: dict[str, Any]
    targets: dict[str, Any]
    """Per target: its rates and per-metric counts; informative only, never compared."""
    cases: dict[str, bool]
    """`PassFailUnit.key` -> passed, for every scored pass/fail unit."""
    scores: dict[str, float]
    """`EvalScore.key` -> score (1..5), for every scored eval of a dataset case."""
    schema_version: int = BASELINE_SCHEMA_VERSION
    identities: dict[str, dict[str, str]] | None = None
    """Per target, what shaped its verdicts (judge model and prompt style, simulated-user model and
    prompt, check rules, plugin version); None in files written before they were recorded."""

    def to_json(self) -> dict[str, Any]:
        """The baseline file's content (`--evalbench-save-baseline`)."""
        return {"schema_version": self.schema_version, "meta": self.meta, "targets": self.targets,
                "cases": self.cases, "scores": self.scores,
                **({"identities": self.identities} if self.identities is not None else {})}


def make_baseline(results: list[ModelResult], units: list[PassFailUnit], meta: dict[str, Any],
                  scores: list[EvalScore] | None = None,
                  identities: Mapping[str, Mapping[str, str]] | None = None) -> Baseline:
    """This run as a baseline: per target its rates plus the pass/fail of every scored unit
    and every per-eval score, so a later run can be compared case by case (paired)."""
    counts = metric_counts(results, units)
    rates = {s.target_model: s for s in results}
    targets = {}
    for target in sorted(set(counts) | set(rates)):
        summary = rates.get(target)
        targets[target] = {"positive_pass_rate": summary.positive_pass_rate if summary else None,
                           "negative_pass_rate": summary.negative_pass_rate if summary else None,
                           "metrics": {mid: asdict(c) for mid, c in sorted(counts.get(target, {}).items())}}
    return Baseline(dict(meta), targets, dict(sorted(unit_passes(units).items())),
                    dict(sorted(case_scores(scores or []).items())),
                    identities={t: dict(v) for t, v in sorted(identities.items())} if identities is not None else None)


_TARGET_NUMBERS: dict[str, Any] = {"positive_pass_rate": Probability, "negative_pass_rate": Probability}
_METRIC_NUMBERS: dict[str, Any] = {"pass_rate": Probability, "n_passed": Count, "n_total": Count}


def _targets_problem(targets: dict[str, Any]) -> str | None:
    """`field '...': why` for the first number of a baseline's `targets` that is not of its type (the
    plan reads `pass_rate`; a rate of 1e308 or a count of 400 digits would overflow it)."""
    for target, entry in targets.items():
        if not isinstance(entry, dict):
            continue
        for name, kind in _TARGET_NUMBERS.items():
            if entry.get(name) is not None and (problem := number_problem(kind, entry[name])):
                return f"field 'targets.{target}.{name}': {problem}"
        metrics = entry.get("metrics")
        for metric, counts in (metrics.items() if isinstance(metrics, dict) else ()):
            for name, kind in _METRIC_NUMBERS.items():
                value = counts.get(name) if isinstance(counts, dict) else None
                if value is not None and (problem := number_problem(kind, value)):
                    return f"field 'targets.{target}.metrics.{metric}.{name}': {problem}"
    return None


def load_baseline(data: Any) -> Baseline:
    """Validate a parsed baseline file (versions 1 and 2; version 1 has no `scores`); ValueError
    says what is wrong (the caller adds the file name)."""
    if not isinstance(data, dict) or "schema_version" not in data:
        raise ValueError("not an evalbench baseline file (no schema_version)")
    if data["schema_version"] not in READABLE_VERSIONS:
        raise ValueError(f"baseline schema_version {data['schema_version']!r} is not supported "
                         f"(this version reads {', '.join(map(str, READABLE_VERSIONS))}); re-create the baseline "
                         "with --evalbench-save-baseline")
    for key in ("meta", "targets", "cases"):
        if not isinstance(data.get(key), dict):
            raise ValueError(f"baseline file: {key!r} missing or not an object")
    if not isinstance(data.get("scores", {}), dict):
        raise ValueError("baseline file: 'scores' is not an object")
    bad = [k for k, v in data["cases"].items() if len(k.split("|")) != 4 or not isinstance(v, bool)]
    if bad:
        raise ValueError(f"baseline file: case {bad[0]!r} is not '<target>|<id>|<metric>|<sample>': true/false")
    scores = data.get("scores", {})
    bad = [k for k, v in scores.items()
           if len(k.split("|")) != 3 or isinstance(v, bool) or not isinstance(v, (int, float))]
    if bad:
        raise ValueError(f"baseline file: score {bad[0]!r} is not '<target>|<id>|<eval>': <number>")
    problem = next((f"field 'scores.{k}': {p}" for k, v in scores.items() if (p := number_problem(Score, v))),
                   None) or _targets_problem(data["targets"])
    if problem is not None:
        raise ValueError(f"baseline file: {problem}")
    identities = data.get("identities")
    if identities is not None and not (isinstance(identities, dict) and all(
            isinstance(v, dict) and all(isinstance(x, str) for x in v.values()) for v in identities.values())):
        raise ValueError("baseline file: 'identities' is not '<target>': {'<name>': '<text>'}")
    return Baseline(data["meta"], data["targets"], data["cases"], {k: float(v) for k, v in scores.items()},
                    data["schema_version"], identities)
