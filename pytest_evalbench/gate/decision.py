"""The end-of-session decision for CI: thresholds, baseline comparison, per-case verdicts, completeness,
the exit status, and their wording.

`evaluate_gate` is a pure function of in-memory rows and returns one `GateDecision`, which both prints
the summary and decides the exit status, so the two cannot disagree. Exit codes (documented in
docs/reference/exit-codes.md): 0 ok; 1 case failures (with `gate: cases`; with num_samples > 1 a case
fails by its per-case verdict, not by one failed sample); 6 regression (a threshold breach or a
significant drop against the baseline); 7 incomplete (endpoint errors, unscored judgments, budget stop,
replay misses, app errors). Incomplete wins over regression: numbers from an incomplete run cannot
clear or convict a build.

Completeness (`completeness.py`) is the run's one promise to CI: exit 0/1/6 is allowed only when
`Completeness.reasons()` is empty.

The gate words its decision once, here: a `GateVerdict` holds the `GateDecision` as it is, with the
verdict word and the reason; render/ reads its typed fields and never parses a string back. The flip
keys the comparison pairs on are read back into typed `Flip`s here only, where the gate's key format
(`PassFailUnit.key`) is known.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from pytest_evalbench.base.errors import InputError
from pytest_evalbench.base.files import atomic_write_text, bounded_problem, finite_json, read_bounded
from pytest_evalbench.base.json_input import parse_json
from pytest_evalbench.formats.results import EvalScore, ModelResult, PassFailUnit
from pytest_evalbench.formats.sequential import SequentialRule
from pytest_evalbench.formats.spec import ThresholdRules
from pytest_evalbench.formats.stats import case_verdict
from pytest_evalbench.gate.paired import Baseline, CompareRule, Comparison, compare_with_baseline, load_baseline, make_baseline
from pytest_evalbench.gate.rules import RuleResult, check_thresholds
from pytest_evalbench.kinds.protocol import KindResults

EXIT_REGRESSION = 6
EXIT_INCOMPLETE = 7


@dataclass
class GateSettings:
    save_baseline: Path | None = None
    compare_fail: CompareRule | None = None
    case_pass_rate: float = 0.5
    mode: str = "cases"  # cases | thresholds
    fail_inconclusive: bool = False
    correction: str = "holm"
    alpha: float = 0.05
    min_rows: int = 10
    compare_anyway: bool = False
    """`--evalbench-compare-anyway`: compare targets whose identities changed since the baseline."""
    accept_incomparable: bool = False
    """`--evalbench-accept-incomparable`: a gate that reads the baseline may pass although targets
    could not be compared with it (they are named in the summary); without it such a run is incomplete."""
    resave_command: str = "pytest --benchmark=NAME --evalbench-save-baseline"
    """The command that saves a new baseline, named when the baseline is not comparable."""
    selection: bool = False
    """The session ran a selection (node ids, -k, --lf, a shard...): a min rule over fewer than
    `min_rows` rows is not evaluated, and the build is gated by its cases."""


@dataclass
class GateInputs:
    """Everything the gate reads, in memory (the kind's `KindResults` plus the run's context)."""

    results: list[ModelResult]
    """Per-target rate summaries (min rules, the rates table)."""
    units: list[PassFailUnit] = field(default_factory=list)
    """Pass/fail units paired with the baseline (and grouped into per-case verdicts)."""
    scores: list[EvalScore] = field(default_factory=list)
    """Per-eval numeric score rows (dataset) paired with the baseline."""
    rules: ThresholdRules | None = None
    baseline: Baseline | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    incomplete: list[str] = field(default_factory=list)
    corrected: bool = False
    """`judge: {correct_rates: true}`: min rules read the rates corrected for the judge's errors."""
    unreliable: dict[str, str] = field(default_factory=dict)
    """Metric id -> why its judge is unreliable (its judge-decided rows are not in `results`)."""
    metric_types: dict[str, str] = field(default_factory=dict)
    """Metric id -> `positive` or `negative`: which min rule reads its rows."""
    sequential: SequentialRule | None = None
    """`generation.sampling: sequential`: the rule whose verdicts the per-case verdicts are."""
    identities: dict[str, dict[str, str]] | None = None
    """Per target, what shapes its verdicts (`BenchmarkRun.identities`): saved with a baseline, checked against one."""


@dataclass
class CaseVerdict:
    target: str
    case: str
    passed: int
    total: int
    verdict: str
    planned: int | None = None
    """Sequential sampling: the samples a case could draw (`num_samples`); `total` is how many it drew."""

    def line(self) -> str:
        drawn = (f" (drew {self.total} of {self.planned} samples)"
                 if self.planned is not None and self.total < self.planned else "")
        return f"{self.case}[{self.target}] {self.passed}/{self.total} passed -> {self.verdict}{drawn}"


@dataclass
class GateDecision:
    breaches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """Rules that could not be evaluated (never counted as held)."""
    regressions: list[str] = field(default_factory=list)
    cases: list[CaseVerdict] = field(default_factory=list)
    """Per-case verdicts over samples (num_samples > 1 only)."""
    incomplete: list[str] = field(default_factory=list)
    baseline_files: list[Path] = field(default_factory=list)
    """Baseline files this session wrote (`--evalbench-save-baseline`)."""
    mode: str = "cases"
    fail_inconclusive: bool = False
    comparison: Comparison | None = None
    rules: list[RuleResult] = field(default_factory=list)
    """Every rule the gate read, typed: held, breached, inconclusive or not evaluated (and why), with its numbers."""
    by_cases: bool = False
    """A selection too small for a threshold rule: its cases decide the exit status, whatever the mode."""

    @property
    def verdicts(self) -> list[str]:
        return [c.line() for c in self.cases]

    @property
    def failed_cases(self) -> list[CaseVerdict]:
        bad = ("fail", "inconclusive") if self.fail_inconclusive else ("fail",)
        return [c for c in self.cases if c.verdict in bad]

    def exit_code(self, pytest_status: int) -> int:
        """Combine pytest's own status with the gate; usage/internal errors are left alone."""
        if pytest_status not in (0, 1):
            return pytest_status
        if self.incomplete:
            return EXIT_INCOMPLETE
        if self.breaches or self.regressions:
            return EXIT_REGRESSION
        if self.mode == "thresholds" and not self.by_cases:
            return 0
        if self.cases:  # num_samples > 1: the per-case verdicts decide, not single samples
            return 1 if self.failed_cases else 0
        return pytest_status


def case_verdicts(units: list[PassFailUnit], threshold: float,
                  sequential: SequentialRule | None = None) -> list[CaseVerdict]:
    """For num_samples > 1: per (target, case) the pass count over its scored samples and a
    Wilson-bound verdict; empty when no case has more than one sample. With sequential sampling the
    verdict is the rule's over the samples drawn, in order (where the run stopped drawing)."""
    samples: dict[tuple[str, str], list[tuple[int, bool | None]]] = defaultdict(list)
    for row in units:
        samples[(row.target, row.id)].append((row.sample, row.passed))
    if sequential is None and not any(len(drawn) > 1 for drawn in samples.values()):
        return []
    out = []
    for (target, case_id), drawn in sorted(samples.items()):
        in_order = [passed for _, passed in sorted(drawn, key=lambda pair: pair[0])]
        results = [passed for passed in in_order if passed is not None]
        k, n = sum(results), len(results)
        if sequential is None:
            out.append(CaseVerdict(target, case_id, k, n, case_verdict(k, n, threshold)))
        else:
            out.append(CaseVerdict(target, case_id, k, n, sequential.verdict(in_order), sequential.k))
    return out


def compare_rule_results(rule: CompareRule, comparison: Comparison) -> list[RuleResult]:
    """The `--evalbench-compare-fail` rule as typed results: one per paired test it could convict
    (breached ones with their numbers), one "held" line for the rest, or "not evaluated"."""
    name = rule.kind if rule.kind != "drop" else f"drop:{rule.min_drop:g}"
    if not comparison.tests:
        return [RuleResult("compare", name, n.target, n.metric, "not evaluated", why=n.why)
                for n in comparison.not_compared] or [
            RuleResult("compare", name, None, None, "not evaluated", why="no paired comparisons with the baseline")]
    out = []
    for test in comparison.tests:
        hit = (test.kind != "pooled" and test.exceeds(0.0)) if rule.kind == "any" else (
            test.significant and test.exceeds(rule.min_drop))
        if hit:
            out.append(RuleResult("compare", name, test.target, test.metric_id, "breached", test.change,
                                  test.p_adjusted, detects=test.kind != "scores", detectable=test.detectable))
    if not out:
        worst = min(comparison.tests, key=lambda t: t.change)
        out.append(RuleResult("compare", name, worst.target, worst.metric_id, "held", worst.change,
                              worst.p_adjusted, why=f"largest drop of {len(comparison.tests)} paired test"
                              + ("s" if len(comparison.tests) != 1 else ""),
                              detects=worst.kind != "scores", detectable=worst.detectable))
    for skipped in comparison.not_compared:
        out.append(RuleResult("compare", name, skipped.target, skipped.metric, "not evaluated", why=skipped.why))
    return out


def evaluate_gate(inputs: GateInputs, settings: GateSettings) -> GateDecision:
    """Everything the CI gate decides, from the rows this session measured (no I/O; rows carried over
    from earlier sessions stay in the result files but never reach the gate: see docs/guides/gating.md)."""
    decision = GateDecision(incomplete=list(inputs.incomplete), mode=settings.mode,
                          fail_inconclusive=settings.fail_inconclusive)
    comparison = None
    if inputs.baseline is not None:
        comparison = compare_with_baseline(inputs.baseline, inputs.units, inputs.meta, scores=inputs.scores,
                                           correction=settings.correction, alpha=settings.alpha,
                                           identities=inputs.identities, compare_anyway=settings.compare_anyway,
                                           accept_incomparable=settings.accept_incomparable)
        decision.comparison = comparison
        if settings.compare_fail is not None:
            decision.regressions = comparison.fails(settings.compare_fail)
            decision.rules += compare_rule_results(settings.compare_fail, comparison)
    report = check_thresholds(inputs.results, inputs.rules, comparison, corrected=inputs.corrected,
                              unreliable=inputs.unreliable, types=inputs.metric_types,
                              alpha=settings.alpha, min_rows=settings.min_rows if settings.selection else 1)
    decision.breaches = report.breaches + (report.inconclusive if settings.fail_inconclusive else [])
    decision.rules += report.rules
    decision.by_cases = settings.selection and report.too_few
    decision.notes = [r.text() for r in decision.rules if r.status == "not evaluated"]
    if not inputs.results and inputs.rules is not None and inputs.rules.count():
        # no row of this session reached the gate: none was measured, or every one was judged by a
        # judge its calibration found unreliable (those rows are shown, never gated)
        decision.notes.append("threshold rules not evaluated (no row this session measured reached the gate: none "
                             "was measured, or each rests on a judge found unreliable)")
    decision.cases = case_verdicts(inputs.units, settings.case_pass_rate, inputs.sequential)
    if comparison is not None and not settings.accept_incomparable:
        decision.incomplete += incomparable_reasons(comparison, decision.rules, settings.resave_command)
    return decision


def incomparable_reasons(comparison: Comparison, rules: list[RuleResult], resave_command: str) -> list[str]:
    """Why a run gated against the baseline (a compare rule or a max_drop rule read it) is incomplete:
    the targets it could not compare, what changed, and the command that saves a comparable baseline."""
    if not comparison.incomparable or not any(r.rule in ("compare", "max_drop") for r in rules):
        return []
    changed = "; ".join(f"{target}: {what}" for target, what in sorted(comparison.incomparable.items()))
    return [f"the baseline is not comparable, so the gate cannot read it ({changed}); save a new baseline with "
            f"`{resave_command}`, or pass --evalbench-accept-incomparable to gate without "
            f"{'this target' if len(comparison.incomparable) == 1 else 'these targets'} on purpose"]


# --------------------------------------------------------------------------- files


def read_baseline(path: Path) -> Baseline:
    """A baseline file, validated; InputError names the file."""
    try:
        text = read_bounded(path).decode("utf-8")
    except FileNotFoundError:
        raise InputError(path, "baseline file not found; create it with --evalbench-save-baseline") from None
    except OSError as exc:
        raise InputError(path, f"baseline file unreadable: {bounded_problem(exc)}") from None
    except ValueError as exc:
        raise InputError(path, f"baseline file unreadable: {exc}") from None
    try:
        data = parse_json(text, path)
    except InputError as exc:
        raise InputError(path, f"baseline file unreadable: {exc.message}", row=exc.row, field=exc.field) from None
    try:
        return load_baseline(data)
    except InputError as exc:
        raise InputError(path, exc.message, field=exc.field) from None
    except ValueError as exc:
        raise InputError(path, str(exc)) from None


def write_gate_files(settings: GateSettings, inputs: GateInputs, decision: GateDecision, written: KindResults,
                     title: str) -> None:
    """The baseline to save and the HTML report (from the kind's scores.json rows and
    conversations), when asked for."""
    if settings.save_baseline is not None:
        baseline = make_baseline(inputs.results, inputs.units, inputs.meta, inputs.scores, inputs.identities)
        atomic_write_text(settings.save_baseline, finite_json(baseline.to_json(), settings.save_baseline, indent=1) + "\n",
                          None)
        decision.baseline_files.append(settings.save_baseline)


EXIT_WORDS = {0: "passed", 1: "failed", 2: "interrupted", 3: "internal error", 4: "usage error",
              5: "no tests collected", 6: "regression", 7: "incomplete"}

class FlipKey(NamedTuple):
    """What a flipped case and this session's record share: target, case id and sample."""

    target: str
    case: str
    sample: int


@dataclass(frozen=True)
class Flip:
    """A case that passed in the baseline and fails now, with its node id when this session ran it."""

    target: str
    case: str
    metric: str
    sample: int
    baseline_key: str
    """The unit's key in the baseline file, `target|id|metric|sample`."""
    node_id: str | None = None

    def text(self) -> str:
        """The pasteable node id where known, else the baseline's key."""
        return self.node_id or self.baseline_key


@dataclass(frozen=True)
class Failures:
    """This session's failed cases, counted by who decided them: a deterministic check or a judge.
    Failures an unreliable judge decided (reported as xfailed, outside the gate) are counted apart."""

    check: int = 0
    judge: int = 0
    unreliable: int = 0

    @property
    def total(self) -> int:
        """Failed cases (pytest's FAILED): the judge-unreliable ones are not among them."""
        return self.check + self.judge

    def deciders(self) -> str:
        """`(1 decided by a check, 2 by the judge)`; empty without failures."""
        by = [f"{count} by {who}" for count, who in ((self.check, "a check"), (self.judge, "the judge")) if count]
        return f"({', '.join(by)})".replace(" by", " decided by", 1) if by else ""


@dataclass
class GateVerdict:
    """What the gate decided, in words: the verdict, the exit code, the reason, beside the gate's own
    typed `GateDecision` (rules, breaches, comparison...), which renderers read as it is."""

    verdict: str
    exit_code: int
    reason: str
    decision: GateDecision = field(default_factory=GateDecision)
    """The gate's decision, typed; empty when no case was run."""
    flips: list[Flip] = field(default_factory=list)
    """Cases that passed in the baseline and fail now, with this session's node ids."""
    tolerated: int = 0
    """Failed cases this build passed with (gate mode thresholds, or an unreliable judge's failures):
    reports show such a pass apart from a clean one, never as a bare green PASSED."""

    @property
    def rule_lines(self) -> list[str]:
        """Each rule in the same words everywhere: `min_negative_pass_rate 0.60 t: 1.00 held`."""
        return [r.text() for r in self.decision.rules]

    @property
    def flip_node_ids(self) -> list[str]:
        """Node ids of the flipped cases this session ran (the ones a rerun command can name)."""
        return [f.node_id for f in self.flips if f.node_id]

    def to_json(self) -> dict[str, Any]:
        o = self.decision
        return {"verdict": self.verdict, "exit_code": self.exit_code, "reason": self.reason, "mode": o.mode,
                "breaches": o.breaches, "regressions": o.regressions, "incomplete": o.incomplete,
                "notes": o.notes, "verdicts": o.verdicts, "flips": [f.text() for f in self.flips],
                "baseline_files": [str(p) for p in o.baseline_files],
                "comparison": o.comparison.to_dict() if o.comparison is not None else None,
                "rules": [asdict(r) for r in o.rules]}


def flips_of(comparison: Comparison, node_ids: Mapping[FlipKey, str]) -> list[Flip]:
    """The cases that flipped pass -> fail against the baseline (its `target|id|metric|sample` keys)."""
    out = []
    for test in comparison.tests:
        if test.kind != "pass/fail":
            continue
        for key in test.pass_to_fail:
            parts = key.split("|")
            if len(parts) != 4:  # an id with a `|` in it: shown by its key, no node id to find
                out.append(Flip(test.target, key, test.metric_id, 0, key))
                continue
            target, case, metric, sample = parts
            number = int(sample) if sample.isdigit() else 0
            out.append(Flip(target, case, metric, number, key, node_ids.get(FlipKey(target, case, number))))
    return out


def node_ids_of(records: Mapping[str, dict[str, Any]]) -> dict[FlipKey, str]:
    """`FlipKey` -> node id for the records of this session that are judged conversations or dataset cases."""
    out = {}
    for nodeid, record in records.items():
        score = record.get("score") or {}
        case = record.get("case") or {}  # a dataset case: the agent is its target, one sample
        if record.get("target_id") and score.get("id"):
            out[FlipKey(record["target_id"], score["id"], int(score.get("sample") or 0))] = nodeid
        elif case.get("agent_name") and case.get("case_id"):
            out[FlipKey(case["agent_name"], case["case_id"], 0)] = nodeid
    return out


def gate_verdict(decision: GateDecision | None, exit_code: int, failed: Failures | int,
                 node_ids: Mapping[FlipKey, str], finish_error: str | None = None) -> GateVerdict:
    """The gate's decision (or its absence) in words.

    `failed` counts the cases that failed by who decided them (a bare count: the judge decided them all),
    `node_ids` maps flipped cases to node ids.
    """
    if isinstance(failed, int):
        failed = Failures(judge=failed)
    if decision is None:
        reason = "results could not be written (the ERROR line says why)" if finish_error else "no case was run"
        return GateVerdict(verdict=EXIT_WORDS.get(exit_code, f"exit {exit_code}"), exit_code=exit_code, reason=reason)
    comparison = decision.comparison
    flips = flips_of(comparison, node_ids) if comparison is not None else []
    verdict, reason = _verdict(decision, exit_code, failed)
    tolerated = (failed.total + failed.unreliable) if verdict == "passed" else 0
    return GateVerdict(verdict=verdict, exit_code=exit_code, reason=reason, decision=decision, flips=flips,
                       tolerated=tolerated)


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _verdict(view: GateDecision, exit_code: int, failed: Failures) -> tuple[str, str]:
    """The verdict word and one short sentence saying why the build passed or failed, in words a
    newcomer reads right: when cases failed and the build passes anyway, it starts with them and says
    why they do not fail it. The rules' details are listed beside it on every surface, not in it."""
    cases = _count(failed.total, "case failed", "cases failed")
    unreliable = _count(failed.unreliable, "failure of an unreliable judge does", "failures of an unreliable judge do")
    if exit_code == 7 or view.incomplete:
        return "incomplete", "incomplete numbers (INCOMPLETE above) neither pass nor fail"
    if exit_code == 6 or view.breaches or view.regressions:
        what = [_count(len(view.breaches), "threshold rule breached", "threshold rules breached")] if view.breaches else []
        what += [_count(len(view.regressions), "significant drop against the baseline",
                        "significant drops against the baseline")] if view.regressions else []
        return "regression", ", ".join(what) or "a regression"
    if exit_code not in (0, 1):
        return EXIT_WORDS.get(exit_code, f"exit {exit_code}"), f"pytest ended with exit status {exit_code}"
    if view.by_cases:
        if exit_code == 1:
            return "failed", f"{cases}; too few rows for the rules, so cases decide"
        return "passed", "every case passed; too few rows for the rules, so cases decide"
    if view.mode == "thresholds":
        if failed.total:
            if not view.rules and not view.notes:
                return "passed", f"{cases}, and no threshold rule is configured to fail the build"
            return "passed", f"{cases}, the build gates on thresholds only"
        if failed.unreliable:
            return "passed", f"no case failed; {unreliable} not count"
        return "passed", "every case passed" if view.rules or view.notes else "every case passed; no threshold rule is configured"
    if view.cases:  # num_samples > 1: the per-case verdicts decide, not single samples
        tally = Counter(c.verdict for c in view.cases)
        counts = ", ".join(f"{tally[v]} {v}" for v in ("pass", "inconclusive", "fail"))
        return ("failed" if exit_code == 1 else "passed"), f"per-case verdicts over the samples: {counts}"
    if exit_code == 1:
        return "failed", f"{cases}, and any failed case fails the build"
    if failed.unreliable:
        return "passed", f"no case failed; {unreliable} not count"
    return "passed", "every case passed"

