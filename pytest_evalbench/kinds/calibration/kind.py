"""`CalibrationKind`: this kind's implementation of the protocol in `kinds/protocol.py` (imported by the
registry there only when a run is of this kind; the package `__init__` imports nothing)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pytest_evalbench.base.errors import ConfigError
from pytest_evalbench.base.files import dump_json, versioned
from pytest_evalbench.formats.agreement import agreement_entry, best_threshold, cross_validated_judgments
from pytest_evalbench.formats.nested import StyleAnswers, choose, nested_judgments
from pytest_evalbench.formats.spec import JudgeStyle
from pytest_evalbench.kinds.estimate import Expectations, Plan
from pytest_evalbench.kinds.explain import EVAL_NAMES, run_eval
from pytest_evalbench.kinds.judges import RESULT_FILE, judge_name, majority, poll
from pytest_evalbench.kinds.labels import (
    CALIBRATION_FILE,
    HELDOUT_FILE,
    CalibrationEntry,
    CalibrationItem,
    CalibrationRecord,
    MetricLabel,
    judge_examples,
    load_labels,
)
from pytest_evalbench.kinds.metric_judge import STYLES, Example, decide, judge, pick_contrast
from pytest_evalbench.kinds.protocol import (
    BenchmarkKind,
    JSONRecord,
    Judged,
    JudgedRowHook,
    KindResults,
    Outcome,
    Status,
    spec_kind,
)
from pytest_evalbench.kinds.run import BenchmarkRun
from pytest_evalbench.llm.types import Endpoint, Usage

__all__ = ["CalibrationKind"]


class CalibrationKind:
    """The calibration kind of the protocol in `kinds/protocol.py`."""

    roles = ("evaluator_model",)

    def __init__(self, run: BenchmarkRun) -> None:
        self.run = run
        self._order: dict[str, int] = {}
        self._examples: dict[str, list[Example]] = {}

    def data_files(self) -> list[Path]:
        """calibration.jsonl, and calibration-heldout.jsonl when the benchmark has held-out labels."""
        heldout = self.run.bench_dir / HELDOUT_FILE
        return [self.run.bench_dir / CALIBRATION_FILE] + ([heldout] if heldout.exists() or heldout.is_symlink() else [])

    def load_items(self) -> dict[Path, list[CalibrationItem]]:
        files = self.data_files()
        judged = spec_kind(self.run.spec).judged
        cases = {path: load_labels(path, self.run.spec, judged, heldout=path.name == HELDOUT_FILE) for path in files}
        self._order = {c.row_id: i for i, c in enumerate(c for found in cases.values() for c in found)}
        # only calibration's own labels are ever shown in a contrast prompt: held-out ones choose nothing
        self._examples = judge_examples(cases[files[0]], self.run.spec)
        return cases

    def order(self) -> dict[str, int]:
        if not self._order:
            self.load_items()
        return self._order

    def expect_cases(self, cases: Iterable[Any]) -> None:
        """Cases of this kind never wait for each other."""

    async def run_item(self, case: CalibrationItem) -> CalibrationRecord:
        run = self.run
        usage_by_phase: dict[str, Usage] = {}
        judges = run.judges()
        label = case.label
        verdict: bool | int | None
        expected: bool | int
        if isinstance(label, MetricLabel):
            metric = run.spec.metric(label.metric_id)
            assert metric is not None  # loading checked it
            decision = decide(metric, label.transcript)
            if decision is not None:  # the rules' judgment, not the judge's
                return CalibrationRecord(run.spec.name, case.line, case.key, label.present, decision.present,
                                         decision.justification, usage_by_phase, decided_by="check",
                                         heldout=case.heldout)
            if not self._examples:
                self.load_items()  # sets the examples a contrast prompt may show
            config = run.spec.judge
            verdicts: dict[str, bool | None] = {}
            probabilities: dict[str, float | None] = {}
            verdict, text = None, ""
            own_style = run.spec.judge_style(metric)  # the record's judgment is this style's
            # the example being scored is never one the contrast prompt shows (a held-out one never is)
            contrast = pick_contrast(self._examples.get(metric.id, []), exclude=None if case.heldout else case.line)
            # every style, so calibration can say which to use; a held-out example only as a run asks
            for style in ((own_style,) if case.heldout else STYLES):
                seen: list[float] = []

                async def ask_one(endpoint: Endpoint, sample: int, style: JudgeStyle = style,
                                  contrast: list[Example] = contrast, seen: list[float] = seen
                                  ) -> tuple[bool | None, str]:
                    answer = await judge(metric, label.transcript, evaluator=endpoint, engine=run.engine,
                                         sample=sample, usage_by_phase=usage_by_phase, style=style,
                                         contrast=contrast if style == "contrast" else (),
                                         probability=config.probability)
                    seen.extend([answer.probability] if answer.probability is not None else [])
                    return answer.present, answer.justification

                panel = majority(await poll(judges, config.samples, 0, ask_one))
                verdicts[style] = panel.value
                probabilities[style] = round(sum(seen) / len(seen), 4) if seen else None
                if style == own_style:
                    verdict, text = panel.value, panel.justification
            return CalibrationRecord(run.spec.name, case.line, case.key, label.present, verdict, text, usage_by_phase,
                                     decided_by="judge", verdicts=verdicts,
                                     probabilities=probabilities if config.probability else {}, heldout=case.heldout)
        else:
            outcome = await run_eval(label.eval, label.inputs, judges=judges, engine=run.engine, usage_by_phase=usage_by_phase,
                                     samples=run.spec.judge.samples)
            verdict, text, expected = outcome.score, outcome.explanation, label.score
        return CalibrationRecord(run.spec.name, case.line, case.key, expected, verdict, text, usage_by_phase,
                                 heldout=case.heldout)

    def record_to_json(self, record: CalibrationRecord) -> JSONRecord:
        return record.to_json()

    def record_from_json(self, data: JSONRecord) -> CalibrationRecord:
        return CalibrationRecord.from_json(data)

    def outcome(self, record: CalibrationRecord, judged_row: JudgedRowHook | None) -> Outcome:
        """The item passes when the judge agrees with the label (decided here, once)."""
        status: Status = ("unscored" if record.verdict is None else
                          "passed" if record.verdict == record.label else "failed")
        record.status = status
        shown = {True: "present", False: "absent"}
        label, verdict = (shown[v] if isinstance(v, bool) else v for v in (record.label, record.verdict))
        message = {"failed": f"{record.key}: the judge said {verdict}, the label says {label}\n"
                             f"judge: {record.justification}",
                   "unscored": record.justification}.get(status, "")
        return Outcome(status, message, [("evalbench_label", record.label), ("evalbench_verdict", record.verdict)])

    def plan_calls(self, case: CalibrationItem, expect: Expectations) -> Plan:
        """A calibration run is not estimated: its judge calls are as many as its labelled lines."""
        raise ConfigError("--evalbench-estimate: a calibration run (--evalbench-calibrate) cannot be estimated; "
                          "it makes one judge call per labelled line of calibration.jsonl")

    def write_results(self, data: Iterable[JSONRecord]) -> KindResults:
        """calibration.json over this session's examples, one entry per metric or eval."""
        records = [self.record_from_json(d) for d in data]
        judges = self.run.judges()
        settings = {"prompt": self.run.spec.judge.prompt, "probability": self.run.spec.judge.probability,
                    "samples": self.run.spec.judge.samples, "params": {j.model: dict(j.params) for j in judges}}
        judged = spec_kind(self.run.spec).judged
        entries = calibration_entries([r for r in records if not r.heldout], judged, judge_name(judges),
                                      settings=settings, styles=self.run.spec.judge_styles())
        for entry in entries:
            held = [r for r in records if r.heldout and r.key == (entry.metric_id or entry.eval)]
            entry.heldout = heldout_stats(held, entry, judged, probability=self.run.spec.judge.probability)
        dump_json(self.run.bench_dir / RESULT_FILE, [versioned(e.model_dump(exclude_none=False)) for e in entries],
                  self.run.bench_dir)
        return KindResults(view="none", results=[e.model_dump(exclude_none=False) for e in entries],
                           table=calibration_table(entries), files=[self.run.bench_dir / RESULT_FILE])


def _style_stats(rows: list[CalibrationRecord], style: str) -> dict[str, Any]:
    """One prompt style on the judge's examples: agreement and kappa, and with probabilities the
    threshold chosen on all of them and the leave-one-out kappa of threshold judgments."""
    stats = agreement_entry([r.label for r in rows], [r.verdicts.get(style) for r in rows], [True, False],
                            weighted=False)
    out = {k: stats[k] for k in ("n", "agreement", "kappa", "kappa_ci")}
    scored = [(bool(r.label), p) for r in rows if (p := r.probabilities.get(style)) is not None]
    if scored:
        labels, probabilities = [a for a, _ in scored], [p for _, p in scored]
        cv = agreement_entry(labels, cross_validated_judgments(probabilities, labels), [True, False], weighted=False)
        out.update(threshold=best_threshold(probabilities, labels), threshold_n=cv["n"],
                   threshold_kappa=cv["kappa"], threshold_kappa_ci=cv["kappa_ci"])
    return out


def _judge_split(rows: list[CalibrationRecord], settings: dict[str, Any]) -> dict[str, Any]:
    """The judge-only fields of a metric's entry: its own kappa (with the style in `settings`), each
    style's, which style to use (chosen by cross-validated kappa), and the nested cross-validated kappa
    of that whole choice (style and threshold chosen without the examples that score them)."""
    judged = [r for r in rows if r.decided_by == "judge"]
    own = agreement_entry([r.label for r in judged], [r.verdict for r in judged], [True, False], weighted=False)
    styles: dict[str, dict[str, Any]] = {style: _style_stats(judged, style) for style in STYLES} if judged else {}
    chosen = styles.get(settings["prompt"], {})
    out = {"judge_n": own["n"], "judge_agreement": own["agreement"], "judge_kappa": own["kappa"],
           "judge_kappa_ci": own["kappa_ci"], "prompt": settings["prompt"], "styles": styles or None,
           "recommended_prompt": None, "threshold": chosen.get("threshold"),
           "threshold_kappa": chosen.get("threshold_kappa"), "settings": settings}
    if judged:
        labels = [bool(r.label) for r in judged]
        answers: dict[str, StyleAnswers] = {style: StyleAnswers([r.verdicts.get(style) for r in judged],
                                       [r.probabilities.get(style) for r in judged]) for style in STYLES}
        probability = bool(settings.get("probability"))
        out["recommended_prompt"] = choose(labels, answers, probability=probability,
                                           preferred=settings["prompt"]).style
        nested = nested_judgments(labels, answers, probability=probability, preferred=settings["prompt"])
        stats = agreement_entry(labels, nested.verdicts, [True, False], weighted=False)
        out.update(nested_n=stats["n"], nested_kappa=stats["kappa"], nested_kappa_ci=stats["kappa_ci"],
                   nested_folds=nested.folds, nested_choices=nested.choices)
    return out


def calibration_entries(records: Iterable[CalibrationRecord], judged: Judged, judge: str,
                        settings: dict[str, Any] | None = None,
                        styles: Mapping[str, str] | None = None) -> list[CalibrationEntry]:
    """One entry per metric or eval; a metric's `settings` name its own prompt style (`styles`:
    metric id -> style, when not `settings["prompt"]`)."""
    groups: dict[str, list[CalibrationRecord]] = defaultdict(list)
    for record in sorted(records, key=lambda r: r.line):
        groups[record.key].append(record)
    weighted = judged == "evals"
    categories: list[bool | int] = [True, False] if not weighted else [1, 2, 3, 4, 5]
    order = list(EVAL_NAMES) if weighted else sorted(groups)
    entries = []
    for key in sorted(groups, key=lambda k: (order.index(k) if k in order else len(order), k)):
        rows = groups[key]
        stats = agreement_entry([r.label for r in rows], [r.verdict for r in rows], categories,
                                weighted=weighted)
        own = {**settings, "prompt": (styles or {}).get(key, settings["prompt"])} if settings is not None else None
        split = _judge_split(rows, own) if not weighted and own is not None else {}
        entries.append(CalibrationEntry.model_validate({("eval" if weighted else "metric_id"): key, "judge": judge,
                                                        **stats, **split}))
    return entries


def heldout_stats(rows: list[CalibrationRecord], entry: CalibrationEntry, judged: Judged, *,
                  probability: bool) -> dict[str, Any] | None:
    """The judge on the held-out labels of one metric or eval, decided as a run decides: a judge row by
    P(present) against the entry's calibrated threshold (the sampled judgment without one); None without
    held-out labels."""
    if not rows:
        return None
    rows = sorted(rows, key=lambda r: r.line)
    weighted = judged == "evals"
    categories: list[Any] = [1, 2, 3, 4, 5] if weighted else [True, False]
    threshold = entry.threshold if probability and not weighted else None

    def decided(r: CalibrationRecord) -> bool | int | None:
        p = r.probabilities.get(entry.prompt or "") if r.decided_by == "judge" else None
        return p >= threshold if threshold is not None and p is not None else r.verdict

    stats = agreement_entry([r.label for r in rows], [decided(r) for r in rows], categories, weighted=weighted)
    out = {k: stats[k] for k in ("n", "unscored", "agreement", "kappa", "kappa_ci", "confusion")}
    if not weighted:
        judge_rows = [r for r in rows if r.decided_by == "judge"]
        alone = agreement_entry([r.label for r in judge_rows], [decided(r) for r in judge_rows], categories,
                                weighted=False)
        out.update(judge_n=alone["n"], judge_agreement=alone["agreement"], judge_kappa=alone["kappa"],
                   judge_kappa_ci=alone["kappa_ci"])
    return out


def calibration_table(entries: list[CalibrationEntry]) -> list[str]:
    """Terminal lines: per metric or eval, agreement and kappa with its interval."""
    lines = [f"calibration ({RESULT_FILE}): judge {entries[0].judge}" if entries else "calibration: no examples"]
    for e in entries:
        key = e.metric_id or e.eval
        agreement = "-" if e.agreement is None else f"{e.agreement:.2f}"
        value = "undefined" if e.kappa is None else f"{e.kappa:.2f}"
        ci = "" if e.kappa_ci is None else f" [95% CI {e.kappa_ci[0]:.2f}, {e.kappa_ci[1]:.2f}]"
        lines.append(f"  {key}: n={e.n} agreement {agreement} kappa {value}{ci}"
                     + (f" ({e.weighting}-weighted)" if e.weighting != "none" else "")
                     + (f", {e.unscored} unscored" if e.unscored else "")
                     + (" (rules and judge)" if e.judge_n is not None else ""))
        if e.judge_n is not None:
            lines.append(f"    judge alone ({e.prompt} prompt): n={e.judge_n} kappa {_kappa(e.judge_kappa, e.judge_kappa_ci)}"
                         + ("" if e.threshold is None else f"; P(present) >= {e.threshold:.2f}: cross-validated kappa "
                            f"{_kappa(e.threshold_kappa, None)}"))
        for style, stats in (e.styles or {}).items():
            lines.append(f"    style {style}: n={stats['n']} kappa {_kappa(stats['kappa'], stats['kappa_ci'])}"
                         + ("" if stats.get("threshold") is None else
                            f"; threshold {stats['threshold']:.2f}, cross-validated kappa "
                            f"{_kappa(stats['threshold_kappa'], stats['threshold_kappa_ci'])}"))
        if e.nested_n is not None:
            chosen = ", ".join(f"{style} {n}" for style, n in (e.nested_choices or {}).items())
            lines.append(f"    whole procedure (style and threshold chosen without the examples they score; "
                         f"{e.nested_folds}-fold nested cross-validation): n={e.nested_n} kappa "
                         f"{_kappa(e.nested_kappa, e.nested_kappa_ci)}; styles chosen per fold: {chosen}")
        if e.heldout is not None:
            held = e.heldout
            lines.append(f"    held out ({HELDOUT_FILE}, never used to choose; decided as a run decides): "
                         f"n={held['n']} kappa {_kappa(held['kappa'], held['kappa_ci'])}"
                         + ("" if held.get("judge_n") is None else
                            f"; judge alone: n={held['judge_n']} kappa {_kappa(held['judge_kappa'], held['judge_kappa_ci'])}"))
        if e.recommended_prompt is not None:
            lines.append(f"    use judge_prompt: {e.recommended_prompt} on {key} (highest cross-validated judge-only "
                         "kappa; `metrics[].judge_prompt`, or `judge.prompt` for every metric)")
    return lines


def _kappa(value: float | None, ci: list[float] | None) -> str:
    shown = "undefined" if value is None else f"{value:.2f}"
    return shown + ("" if ci is None else f" [95% CI {ci[0]:.2f}, {ci[1]:.2f}]")


def _conforms(run: BenchmarkRun) -> BenchmarkKind[CalibrationRecord, CalibrationItem]:
    """For mypy: the kind is the boundary's protocol with its own case and record types."""
    return CalibrationKind(run)
