"""CI gating: threshold rules, baseline files, baseline comparison and the terminal table.

Pure functions over the result-file rows of output-schema.md (results.json summaries and
scores.json rows); no I/O, no pytest. A case key is `<target>|<scenario id>|<metric_id>|<sample>`
(target and scenario ids cannot contain `|`, see models.SAFE_ID).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from ..spec import Num
from .stats import Z95, PairedResult, RateEstimate, newcombe_diff_interval, paired_comparison

BASELINE_SCHEMA_VERSION = 1
EPS = 1e-9  # rates are rounded to 4 places upstream; 0.8 - 0.75 must not count as > 0.05
Rate = Optional[Num]  # a YAML `true` is not a rate


class _Rules(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MetricRule(_Rules):
    min_pass_rate: Rate = Field(default=None, ge=0, le=1)
    max_drop: Rate = Field(default=None, ge=0, le=1)


class TargetRule(_Rules):
    min_positive_pass_rate: Rate = Field(default=None, ge=0, le=1)
    min_negative_pass_rate: Rate = Field(default=None, ge=0, le=1)
    max_drop: Rate = Field(default=None, ge=0, le=1)


class ThresholdRules(TargetRule):
    """`thresholds:` of benchmark.yaml. Top-level rules apply to every target; a `per_target`
    entry overrides them field by field; `per_metric` rules apply to that metric on every target
    (its max_drop wins over the target's and the global one)."""

    per_target: dict[str, TargetRule] = Field(default_factory=dict)
    per_metric: dict[str, MetricRule] = Field(default_factory=dict)

    @classmethod
    def from_config(cls, data: dict[str, Any] | ThresholdRules | None) -> ThresholdRules:
        if isinstance(data, ThresholdRules):
            return data
        return cls.model_validate(data or {})

    def for_target(self, target: str) -> TargetRule:
        own = self.per_target.get(target)
        merged = {name: getattr(self, name) for name in TargetRule.model_fields}
        if own is not None:
            merged.update(own.model_dump(exclude_none=True))
        return TargetRule(**merged)


@dataclass(frozen=True)
class Breach:
    """A failed rule, or (kind == "no_data") a rule that could not be checked."""

    target: str
    metric: str  # "positive_pass_rate", "negative_pass_rate" or a metric id
    value: float | None
    threshold: float
    message: str
    kind: Literal["min", "max_drop", "no_data"] = "min"


@dataclass
class ThresholdReport:
    breaches: list[Breach] = field(default_factory=list)
    notes: list[Breach] = field(default_factory=list)  # kind == "no_data": not failures


def metric_counts(results: list[dict[str, Any]], scores: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """{target: {metric_id: {n_passed, n_total, pass_rate, metric_name, metric_type}}}: counts from
    the scored rows of scores.json (the same rows the paired comparison uses), falling back to
    results.json `by_metric` for targets without score rows; names and types from scores."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    labels: dict[str, tuple[Any, Any]] = {}
    from_scores: dict[str, dict[str, list[int]]] = {}
    for row in scores:
        labels.setdefault(row["metric_id"], (row.get("metric_name"), row.get("metric_type")))
        if row.get("passed") is not None:
            counts = from_scores.setdefault(row["target_model"], {}).setdefault(row["metric_id"], [0, 0])
            counts[0] += bool(row["passed"])
            counts[1] += 1
    for target, metrics in from_scores.items():
        for mid, (k, n) in metrics.items():
            out.setdefault(target, {})[mid] = {"n_passed": k, "n_total": n}
    for summary in results:
        if summary["target_model"] in from_scores:
            continue
        for mid, rate in (summary.get("by_metric") or {}).items():
            out.setdefault(summary["target_model"], {})[mid] = {"n_passed": rate["n_passed"], "n_total": rate["n_total"]}
    for metrics in out.values():
        for mid, entry in metrics.items():
            k, n = entry["n_passed"], entry["n_total"]
            name, mtype = labels.get(mid, (None, None))
            entry.update(pass_rate=round(k / n, 4) if n else None, metric_name=name, metric_type=mtype)
    return out


def _baseline_rates(baseline: list[dict[str, Any]] | dict[str, Any]) -> dict[str, dict[str, float | None]]:
    """{target: {metric_id: rate}} from a baseline results.json list or a make_baseline dict."""
    if isinstance(baseline, dict):
        return {t: {m: e.get("pass_rate") for m, e in entry["metrics"].items()}
                for t, entry in baseline.get("targets", {}).items()}
    return {s["target_model"]: {m: r.get("pass_rate") for m, r in (s.get("by_metric") or {}).items()}
            for s in baseline}


def check_thresholds_report(results: list[dict[str, Any]], rules: ThresholdRules | dict[str, Any] | None,
                            baseline_results: list[dict[str, Any]] | dict[str, Any] | None = None) -> ThresholdReport:
    """All rule outcomes: breaches, plus "no data" notes for rules whose rate is null or missing
    (a null rate means no scored rows - not a failure of a min rule, but worth saying)."""
    rules = ThresholdRules.from_config(rules)
    report = ThresholdReport()
    base = _baseline_rates(baseline_results) if baseline_results is not None else None

    def note(target: str, metric: str, threshold: float, what: str) -> None:
        report.notes.append(Breach(target, metric, None, threshold, f"{target}: {metric} no data ({what} not checked)",
                                   "no_data"))

    def minimum(target: str, metric: str, label: str, value: float | None, threshold: float | None) -> None:
        if threshold is None:
            return
        if value is None:
            note(target, metric, threshold, f"min {threshold:.2f}")
        elif value < threshold - EPS:
            report.breaches.append(Breach(target, metric, value, threshold,
                                          f"{target}: {label} {value:.2f} < {threshold:.2f}"))

    seen = {s["target_model"] for s in results}
    for name in sorted(set(rules.per_target) - seen):
        note(name, "per_target", 0.0, "per_target rule for a target without results")
    for summary in sorted(results, key=lambda s: s["target_model"]):
        target = summary["target_model"]
        rule = rules.for_target(target)
        by_metric = summary.get("by_metric") or {}
        minimum(target, "positive_pass_rate", "positive_pass_rate", summary.get("positive_pass_rate"),
                rule.min_positive_pass_rate)
        minimum(target, "negative_pass_rate", "negative_pass_rate", summary.get("negative_pass_rate"),
                rule.min_negative_pass_rate)
        for mid, mrule in sorted(rules.per_metric.items()):
            minimum(target, mid, f"{mid} pass_rate", (by_metric.get(mid) or {}).get("pass_rate"), mrule.min_pass_rate)
        if base is None:
            continue
        old = base.get(target, {})
        for mid in sorted(set(old) | set(by_metric)):
            mrule = rules.per_metric.get(mid)
            limit = mrule.max_drop if mrule and mrule.max_drop is not None else rule.max_drop
            if limit is None:
                continue
            before, now = old.get(mid), (by_metric.get(mid) or {}).get("pass_rate")
            if before is None or now is None:
                if before is not None:
                    note(target, mid, limit, f"max_drop {limit:.2f}")
                continue
            if before - now > limit + EPS:
                report.breaches.append(Breach(target, mid, before - now, limit,
                                              f"{target}: {mid} drop {before - now:.2f} > {limit:.2f} "
                                              f"({before:.2f} -> {now:.2f})", "max_drop"))
    return report


def check_thresholds(results: list[dict[str, Any]], rules: ThresholdRules | dict[str, Any] | None,
                     baseline_results: list[dict[str, Any]] | dict[str, Any] | None = None) -> list[Breach]:
    """The breaches only (empty = gate passes). No-data notes: see `check_thresholds_report`.
    `baseline_results` (for max_drop) is a baseline results.json list or a `make_baseline` dict."""
    return check_thresholds_report(results, rules, baseline_results).breaches


# --------------------------------------------------------------------------- baseline files


def case_key(row: dict[str, Any]) -> str:
    return f"{row['target_model']}|{row['id']}|{row['metric_id']}|{row.get('sample') or 0}"


def case_outcomes(scores: list[dict[str, Any]]) -> dict[str, bool]:
    """Pass/fail per scored case (case_key); unscored rows have no outcome."""
    return {case_key(r): bool(r["passed"]) for r in scores if r.get("passed") is not None}


def make_baseline(results: list[dict[str, Any]], scores: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    """A versioned, JSON-serialisable baseline: rates per target and metric plus the per-case
    outcome of every scored row, so a later run can be compared case by case (paired)."""
    counts = metric_counts(results, scores)
    rates = {s["target_model"]: s for s in results}
    targets = {}
    for target in sorted(set(counts) | set(rates)):
        summary = rates.get(target, {})
        targets[target] = {"positive_pass_rate": summary.get("positive_pass_rate"),
                           "negative_pass_rate": summary.get("negative_pass_rate"),
                           "metrics": dict(sorted(counts.get(target, {}).items()))}
    cases = case_outcomes(scores)
    return {"schema_version": BASELINE_SCHEMA_VERSION, "meta": dict(meta), "targets": targets,
            "cases": dict(sorted(cases.items()))}


def load_baseline(data: Any) -> dict[str, Any]:
    """Validate a parsed baseline file; ValueError says what is wrong."""
    if not isinstance(data, dict) or "schema_version" not in data:
        raise ValueError("not an evalbench baseline file (no schema_version)")
    if data["schema_version"] != BASELINE_SCHEMA_VERSION:
        raise ValueError(f"baseline schema_version {data['schema_version']!r} is not supported "
                         f"(this version reads {BASELINE_SCHEMA_VERSION}); re-create the baseline")
    for key in ("meta", "targets", "cases"):
        if not isinstance(data.get(key), dict):
            raise ValueError(f"baseline file: {key!r} missing or not an object")
    return data


@dataclass(frozen=True)
class CompareRule:
    kind: Literal["significant", "drop", "any"]
    min_drop: float = 0.0


RULE_FORMS = ("'significant' (fail on any statistically significant drop), 'drop:<x>' with 0 <= x < 1 "
              "(fail when a metric's pass rate drops by more than x and the drop is significant), "
              "'any' (fail on any drop)")


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


@dataclass
class MetricComparison:
    """One target x metric: baseline vs current rate, the unpaired (Newcombe) interval of the
    change, and the paired comparison over the cases both runs scored (None when none shared)."""

    target: str
    metric_id: str
    metric_name: str | None
    metric_type: str | None
    baseline: RateEstimate | None
    current: RateEstimate | None
    change: float | None = None
    change_low: float | None = None
    change_high: float | None = None
    paired: PairedResult | None = None

    @property
    def significant_drop(self) -> bool:
        """Paired interval below 0 when cases are shared, else the unpaired one."""
        if self.paired is not None:
            return self.paired.significant_drop
        return self.change_high is not None and self.change_high < 0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["significant_drop"] = self.significant_drop
        return out

    def describe(self) -> str:
        base, cur = self.baseline, self.current
        text = (f"{self.target}: {self.metric_id} {base.rate:.2f} -> {cur.rate:.2f} "  # type: ignore[union-attr]
                f"({self.change:+.2f}, 95% CI [{self.change_low:+.2f}, {self.change_high:+.2f}]")
        if self.paired is not None:
            p = self.paired
            text += (f"; paired {p.diff:+.2f} [{p.low:+.2f}, {p.high:+.2f}], McNemar p={p.p_value:.3g}, "
                     f"{p.b} pass->fail / {p.c} fail->pass of {p.n_shared}")
        return text + ")"


@dataclass
class Comparison:
    entries: list[MetricComparison]
    baseline_meta: dict[str, Any] = field(default_factory=dict)
    meta_warnings: list[str] = field(default_factory=list)

    def get(self, target: str, metric_id: str) -> MetricComparison | None:
        return next((e for e in self.entries if e.target == target and e.metric_id == metric_id), None)

    def fails(self, rule: str | CompareRule) -> list[str]:
        """Reasons the compare rule fails the build (empty list = passes). A drop is a decrease
        of the current pass rate vs the baseline rate; significance as in `significant_drop`."""
        rule = parse_compare_rule(rule) if isinstance(rule, str) else rule
        reasons = []
        for e in self.entries:
            if e.change is None:
                continue
            drop = -e.change
            if rule.kind == "any":
                hit = drop > EPS
            elif rule.kind == "significant":
                hit = e.significant_drop
            else:
                hit = e.significant_drop and drop > rule.min_drop + EPS
            if hit:
                reasons.append(e.describe())
        return reasons

    def to_dict(self) -> dict[str, Any]:
        return {"entries": [e.to_dict() for e in self.entries], "baseline_meta": self.baseline_meta,
                "meta_warnings": self.meta_warnings}


def _group_cases(cases: dict[str, bool]) -> dict[tuple[str, str], dict[str, bool]]:
    """Case outcomes split by (target, metric_id), parsed from the `t|id|metric|sample` keys."""
    out: dict[tuple[str, str], dict[str, bool]] = {}
    for key, passed in cases.items():
        parts = key.split("|")
        if len(parts) == 4:
            out.setdefault((parts[0], parts[2]), {})[key] = bool(passed)
    return out


def compare_with_baseline(baseline: dict[str, Any], results: list[dict[str, Any]], scores: list[dict[str, Any]],
                          meta: dict[str, Any] | None = None, z: float = Z95) -> Comparison:
    """Current run vs a `make_baseline` dict, per target and metric. `meta` (the current run's,
    same shape as the baseline's) yields warnings for keys whose values differ, e.g. the judge."""
    baseline = load_baseline(baseline)
    current = metric_counts(results, scores)
    old_cases = _group_cases(baseline["cases"])
    new_cases = _group_cases(case_outcomes(scores))
    entries = []
    for target in sorted(set(baseline["targets"]) | set(current)):
        old = baseline["targets"].get(target, {}).get("metrics", {})
        new = current.get(target, {})
        for mid in sorted(set(old) | set(new)):
            o, c = old.get(mid), new.get(mid)
            label = c or o or {}
            e = MetricComparison(
                target=target, metric_id=mid, metric_name=label.get("metric_name") or (o or {}).get("metric_name"),
                metric_type=label.get("metric_type") or (o or {}).get("metric_type"),
                baseline=RateEstimate.of(o["n_passed"], o["n_total"], z) if o else None,
                current=RateEstimate.of(c["n_passed"], c["n_total"], z) if c else None)
            if e.baseline and e.current and e.baseline.n and e.current.n:
                e.change = e.current.rate - e.baseline.rate  # type: ignore[operator]
                e.change_low, e.change_high = newcombe_diff_interval(e.baseline.k, e.baseline.n,
                                                                     e.current.k, e.current.n, z)
                paired = paired_comparison(old_cases.get((target, mid), {}), new_cases.get((target, mid), {}), z)
                e.paired = paired if paired.n_shared else None
            entries.append(e)
    warnings = []
    if meta is not None:
        for key in sorted(set(meta) | set(baseline["meta"])):
            if key in meta and key in baseline["meta"] and meta[key] != baseline["meta"][key]:
                warnings.append(f"{key} differs from the baseline: {baseline['meta'][key]!r} -> {meta[key]!r}")
    return Comparison(entries, dict(baseline["meta"]), warnings)


# --------------------------------------------------------------------------- terminal table


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def summary_table(results: list[dict[str, Any]], comparison: Comparison | None = None) -> list[str]:
    """Plain-ASCII aligned lines: per target, its overall rates, then one row per metric with rate,
    k/n and 95% Wilson interval, and (with a comparison) the baseline, change and flips.
    `!` marks a significant drop."""
    header = ["target", "metric", "rate", "n", "95% CI"]
    if comparison is not None:
        header += ["baseline", "change", "change 95% CI", "flips -/+"]
    rows: list[list[str]] = [header]
    counts = metric_counts(results, [])
    summaries = {s["target_model"]: s for s in results}
    targets = sorted(set(summaries) | ({e.target for e in comparison.entries} if comparison else set()))
    for target in targets:
        s = summaries.get(target, {})
        rows.append([target, "(positive)", _fmt(s.get("positive_pass_rate")), str(s.get("n_positive", "-")), ""])
        rows.append([target, "(negative)", _fmt(s.get("negative_pass_rate")), str(s.get("n_negative", "-")), ""])
        mids = set(counts.get(target, {}))
        if comparison is not None:
            mids |= {e.metric_id for e in comparison.entries if e.target == target}
        for mid in sorted(mids):
            c = counts.get(target, {}).get(mid)
            est = RateEstimate.of(c["n_passed"], c["n_total"]) if c else None
            row = [target, mid, _fmt(est.rate if est else None), f"{est.k}/{est.n}" if est else "-",
                   f"[{est.low:.2f}, {est.high:.2f}]" if est else "-"]
            if comparison is not None:
                e = comparison.get(target, mid)
                if e is None or e.change is None:
                    status = "new" if e is None or not e.baseline else ("removed" if not e.current else "-")
                    row += [_fmt(e.baseline.rate) if e and e.baseline else "-", status, "", ""]
                else:
                    p = e.paired
                    low, high = (p.low, p.high) if p else (e.change_low, e.change_high)
                    row += [_fmt(e.baseline.rate),  # type: ignore[union-attr]
                            _fmt(e.change, "+.3f") + (" !" if e.significant_drop else ""),
                            f"[{low:+.2f}, {high:+.2f}]{'' if p else ' u'}", f"{p.b}/{p.c}" if p else "-"]
            rows.append(row)
    widths = [max(len(r[i]) if i < len(r) else 0 for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if comparison is not None:
        lines.append("! = significant drop (95% interval below 0); change CI: paired (Agresti-Min) on shared cases,"
                     " u = unpaired (Newcombe) when none are shared; flips = pass->fail/fail->pass")
        lines += [f"warning: {w}" for w in comparison.meta_warnings]
    return lines
