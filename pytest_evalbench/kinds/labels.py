"""calibration.jsonl: human-labelled examples, one a line, the calibration.json entries, and what a
judge is handed from them (`JudgeSetup`, loaded once before the first case is judged).

Shared by the kinds: judge calibration judges these examples; a scenario run's `contrast` prompts
show some of them and its `probability` judgments use calibration.json's thresholds.

Scenario benchmarks label a transcript for one metric; dataset benchmarks label an Explain
eval's inputs with a 1-5 score:

    {"metric_id": "m01", "transcript": [{"role": "user", "content": "..."}, ...], "present": true}
    {"eval": "RelevanceExplain", "inputs": {"input": "...", "question": "..."}, "score": 4}
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

from pydantic import Field, ValidationError, model_validator

from pytest_evalbench.base.errors import MAX_SHOWN_ERRORS, InputError
from pytest_evalbench.base.inputs import read_text
from pytest_evalbench.base.json_input import parse_json
from pytest_evalbench.base.numbers import Count, Kappa, Probability, Threshold
from pytest_evalbench.formats import Strict
from pytest_evalbench.formats.results import Judged, Message, Status
from pytest_evalbench.formats.spec import BenchmarkSpec, first_error
from pytest_evalbench.kinds.explain import PAYLOAD_KEYS, EvalName
from pytest_evalbench.kinds.judges import calibrated_thresholds, judge_name
from pytest_evalbench.kinds.metric_judge import Example, decide, pick_contrast
from pytest_evalbench.llm.types import Usage

CALIBRATION_FILE = "calibration.jsonl"
HELDOUT_FILE = "calibration-heldout.jsonl"
"""Optional labels held out of calibration: judged as a run judges (the calibrated style and threshold)
and reported beside it, never used to choose a style or a threshold."""


class MetricLabel(Strict):
    """A scenario benchmark's example: was the metric's behaviour present in this transcript?"""

    metric_id: str
    transcript: list[Message] = Field(min_length=1)
    present: bool
    note: Optional[str] = None

    @model_validator(mode="after")
    def _has_reply(self) -> MetricLabel:
        if not any(m.role == "assistant" for m in self.transcript):
            raise ValueError("the transcript needs at least one assistant message to judge")
        return self


class EvalLabel(Strict):
    """A dataset benchmark's example: the 1-5 score a person gives these inputs of one Explain eval."""

    eval: EvalName
    inputs: dict[str, Any]
    score: int = Field(ge=1, le=5)
    note: Optional[str] = None

    @model_validator(mode="after")
    def _complete_inputs(self) -> EvalLabel:
        missing = [k for k in PAYLOAD_KEYS[self.eval] if k not in self.inputs]
        if missing:
            raise ValueError(f"{self.eval} needs inputs {', '.join(missing)}")
        return self


Label = Union[MetricLabel, EvalLabel]


class CalibrationEntry(Strict):
    """calibration.json entry: how well the judge agrees with people on one metric or eval."""

    metric_id: Optional[str] = None
    eval: Optional[str] = None
    judge: str
    """The judge model (or the panel, models joined by '+') that was calibrated."""
    n: Count
    unscored: Count
    agreement: Optional[Probability]
    """Share of scored examples where the judge's judgment equals the label exactly."""
    kappa: Optional[Kappa]
    """Cohen's kappa (quadratic-weighted for 1-5 scores); null when undefined (one category only)."""
    kappa_ci: Optional[list[Kappa]]
    """95% percentile-bootstrap interval of kappa."""
    weighting: str
    confusion: dict[str, dict[str, Count]]
    """Human label -> judge's judgment -> count."""
    judge_n: Optional[Count] = None
    """Metrics: the examples the metric's checks leave to the judge (the rest are the rules' judgments)."""
    judge_agreement: Optional[Probability] = None
    judge_kappa: Optional[Kappa] = None
    """Metrics: kappa of the judge alone, on the examples its checks leave to it; `min_kappa` reads this."""
    judge_kappa_ci: Optional[list[Kappa]] = None
    prompt: Optional[str] = None
    """The prompt style calibrated (`judge: {prompt}`): the one whose judgments `kappa` and `judge_kappa` measure."""
    styles: Optional[dict[str, dict[str, Any]]] = None
    """Metrics: per prompt style, on the judge's examples: n, agreement, kappa, kappa_ci; with probability
    scoring also threshold and threshold_kappa (leave-one-out cross-validated) with its interval."""
    recommended_prompt: Optional[str] = None
    """The style with the highest cross-validated judge-only kappa (of the threshold judgments with
    probability scoring, of the sampled judgments without)."""
    threshold: Optional[Threshold] = None
    """With probability scoring: the cut on P(present) chosen on all the judge's examples for the calibrated
    style; runs with `judge: {probability: true}` and this style decide P(present) >= threshold."""
    threshold_kappa: Optional[Kappa] = None
    """The cross-validated kappa of the threshold judgments (each example scored by a cut set without it),
    for the calibrated style; optimistic when that style was chosen on the same examples."""
    nested_n: Optional[Count] = None
    """Metrics: the judge's examples the nested cross-validation scored."""
    nested_kappa: Optional[Kappa] = None
    """The kappa of the whole procedure (style and threshold chosen inside each outer fold, on the other
    folds only; judgments on the held-out fold): the unbiased figure, and the one `min_kappa` reads."""
    nested_kappa_ci: Optional[list[Kappa]] = None
    nested_folds: Optional[Count] = None
    nested_choices: Optional[dict[str, Count]] = None
    """Prompt style -> the outer folds that chose it: how stable the choice of style is."""
    heldout: Optional[dict[str, Any]] = None
    """The judge on calibration-heldout.jsonl, decided as a run decides (the calibrated style and
    threshold): n, unscored, agreement, kappa, kappa_ci, confusion and, for metrics, the judge-only
    judge_n, judge_agreement, judge_kappa, judge_kappa_ci; null without held-out labels."""
    settings: Optional[dict[str, Any]] = None
    """Every runtime setting that changes a judgment: prompt, probability, samples and the judge's params."""


@dataclass(frozen=True)
class CalibrationItem:
    """One test item: one labelled example (node id `calibration.jsonl::<line>`)."""

    label: Label
    line: int
    index: int
    heldout: bool = False
    """A line of calibration-heldout.jsonl: judged only as a run judges, never used for choosing."""

    @property
    def name(self) -> str:
        return str(self.line)

    @property
    def row_id(self) -> str:
        return f"heldout:{self.line}" if self.heldout else str(self.line)

    @property
    def key(self) -> str:
        return self.label.metric_id if isinstance(self.label, MetricLabel) else self.label.eval

    @property
    def keywords(self) -> dict[str, Any]:
        return {self.key: True}


@dataclass
class CalibrationRecord:
    """What one labelled example produced: the label, the judge's judgment and why. `status` is
    set by `CalibrationKind.outcome`."""

    benchmark: str
    line: int
    key: str
    label: bool | int
    verdict: bool | int | None
    justification: str
    usage: dict[str, Usage] = field(default_factory=dict)
    status: Optional[Status] = None
    decided_by: Optional[str] = None
    """Metrics: "check" when the metric's checks decide the example, "judge" when they leave it to the judge."""
    verdicts: dict[str, Optional[bool]] = field(default_factory=dict)
    """Judge examples: each prompt style's judgment."""
    probabilities: dict[str, Optional[float]] = field(default_factory=dict)
    """Judge examples with probability scoring: each prompt style's P(present)."""
    heldout: bool = False
    """An example of calibration-heldout.jsonl (judged with the metric's own style only)."""

    def to_json(self) -> dict[str, Any]:
        return {"benchmark": self.benchmark, "kind": "calibration", "line": self.line, "key": self.key,
                "label": self.label, "verdict": self.verdict, "justification": self.justification,
                "status": self.status, "usage": {k: v.to_json() for k, v in self.usage.items()},
                "decided_by": self.decided_by, "verdicts": self.verdicts, "probabilities": self.probabilities,
                "heldout": self.heldout}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CalibrationRecord:
        return cls(data["benchmark"], data["line"], data["key"], data["label"], data["verdict"],
                   data["justification"], {k: Usage.from_json(v) for k, v in data["usage"].items()},
                   data.get("status"), data.get("decided_by"), dict(data.get("verdicts") or {}),
                   dict(data.get("probabilities") or {}), bool(data.get("heldout")))


def _label(path: Path, spec: BenchmarkSpec, model: type[MetricLabel] | type[EvalLabel], raw: str,
           line: int) -> MetricLabel | EvalLabel:
    """One line of calibration.jsonl, checked; InputError naming file, line and field."""
    data = parse_json(raw, path, row=line)
    try:
        label = model.model_validate(data)
    except ValidationError as exc:
        where, message = first_error(exc, data)
        raise InputError(path, message, row=line, field=where) from None
    if isinstance(label, MetricLabel) and spec.metric(label.metric_id) is None:
        raise InputError(path, f"unknown metric_id {label.metric_id!r}; benchmark.yaml defines "
                         f"{', '.join(m.id for m in spec.metrics)}", row=line, field="metric_id")
    return label


def load_labels(path: Path, spec: BenchmarkSpec, judged: Judged, *, heldout: bool = False) -> list[CalibrationItem]:
    """The labelled examples of calibration.jsonl (or, `heldout`, calibration-heldout.jsonl; labels of
    metrics or of evals, as the benchmark's kind judges); one InputError naming file, line and field
    of every bad line (the first MAX_SHOWN_ERRORS shown)."""
    model: type[MetricLabel] | type[EvalLabel] = MetricLabel if judged == "metrics" else EvalLabel
    if not path.exists() and not path.is_symlink():
        raise InputError(path, "file not found; write human-labelled examples there (see "
                         "docs/guides/judges.md, 'Judge calibration')")
    text = read_text(path)
    cases: list[CalibrationItem] = []
    problems: list[InputError] = []  # the first MAX_SHOWN_ERRORS lines' problems, shown at once
    count = 0
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            cases.append(CalibrationItem(_label(path, spec, model, raw, line), line, len(cases), heldout))
        except InputError as exc:
            count += 1
            if len(problems) < MAX_SHOWN_ERRORS:
                problems.append(exc)
    if problems:
        raise InputError.gather(problems, count)
    if not cases:
        raise InputError(path, "no labelled examples")
    return cases


def judge_examples(cases: Iterable[CalibrationItem], spec: BenchmarkSpec) -> dict[str, list[Example]]:
    """Metric id -> its labelled examples the metric's checks leave to the judge (contrast prompts show these)."""
    out: dict[str, list[Example]] = defaultdict(list)
    for case in cases:
        label = case.label
        metric = spec.metric(label.metric_id) if isinstance(label, MetricLabel) else None
        if isinstance(label, MetricLabel) and metric is not None and decide(metric, label.transcript) is None:
            out[metric.id].append(Example(case.line, label.transcript, label.present, label.note))
    return dict(out)


@dataclass(frozen=True)
class JudgeSetup:
    """What a run's judge prompts need beyond the metric, read from the calibration files once, before
    the first case is judged, and handed to every judged case: the examples `contrast` prompts show and
    calibration.json's thresholds for `probability` verdicts."""

    contrast: dict[str, list[Example]] = field(default_factory=dict)
    """Metric id -> the first labelled present and absent example the metric's checks leave to the judge."""
    thresholds: dict[str, float] = field(default_factory=dict)
    """Metric id -> the P(present) threshold calibrated for this judge and the metric's prompt style."""


def contrast_examples(bench_dir: Path, spec: BenchmarkSpec) -> dict[str, list[Example]]:
    """Metric id -> the examples a `contrast` prompt shows (none for the other styles): the first labelled
    present and absent example of calibration.jsonl that the metric's checks leave to the judge."""
    styles = spec.judge_styles()
    if "contrast" not in styles.values():
        return {}
    pools = judge_examples(load_labels(bench_dir / CALIBRATION_FILE, spec, "metrics"), spec)
    return {key: pick_contrast(pool) for key, pool in pools.items() if styles.get(key) == "contrast"}


def load_judge_setup(bench_dir: Path, spec: BenchmarkSpec, judges: list[Any]) -> JudgeSetup:
    """The judge setup of a run whose judge (or panel) is `judges` (`BenchmarkRun.evaluators`: empty
    when the benchmark names no judge, which preflight reports before any case runs)."""
    thresholds = (calibrated_thresholds(bench_dir, judge_name(judges), spec.judge_styles())
                  if spec.judge.probability and judges else {})
    return JudgeSetup(contrast_examples(bench_dir, spec), thresholds)
