"""Labels people give a judge's judgment in `evalbench view`: the body `POST /api/labels` accepts, the line it
appends to benchmarks/NAME/calibration.jsonl (the format `kinds/labels.py` reads, so the next
`--evalbench-calibrate` uses it unchanged), and the order in which the view offers cases for labelling.

A label is a claim about the behaviour, not about the verdict: `present` says whether the metric's
behaviour is in the transcript, whatever the judge said, exactly as a hand-written calibration line does.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional, Union

import orjson
from pydantic import StrictBool, StrictInt, StringConstraints, ValidationError

from pytest_evalbench.base.errors import ConfigError, InputError
from pytest_evalbench.base.files import open_append, read_bounded, results_lock
from pytest_evalbench.base.json_input import parse_json
from pytest_evalbench.base.numbers import Threshold
from pytest_evalbench.formats import Strict
from pytest_evalbench.formats.spec import first_error, load_spec
from pytest_evalbench.kinds.judges import calibrated_number, calibration_entries
from pytest_evalbench.kinds.labels import CALIBRATION_FILE, MetricLabel

MAX_LABEL_BODY = 64 * 1024
"""The largest request body `POST /api/labels` reads: a label is ids, a boolean and a note."""
MAX_NOTE = 4000
"""The longest note a label may carry (it becomes the justification a `contrast` prompt shows)."""
LABEL_LOCK_TIMEOUT = 30.0
"""Seconds a label waits for the benchmark's result-file lock (a run's finish holds it briefly)."""
DEFAULT_THRESHOLD = 0.5
"""The threshold P(present) is measured against for a metric calibration.json gives none."""
NEAR_THRESHOLD = 0.15
"""How far from the calibrated threshold P(present) may lie for a verdict to count as a close call."""

Id = Annotated[str, StringConstraints(min_length=1, max_length=1000)]


class LabelRequest(Strict):
    """The JSON body of `POST /api/labels`: a person's label of one case's metric in one stored run."""

    run: Union[StrictInt, Id]
    case: Id
    """The case's pytest node id."""
    metric: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    present: StrictBool
    note: Annotated[str, StringConstraints(max_length=MAX_NOTE)] = ""


def parse_label_request(body: bytes) -> LabelRequest:
    """The body read as a `LabelRequest`; ValueError with one line naming the field otherwise."""
    try:
        data = parse_json(body.decode("utf-8"), Path("request body"))
    except UnicodeDecodeError:
        raise ValueError("the body is not UTF-8") from None
    except InputError as exc:
        raise ValueError(exc.message) from None
    if not isinstance(data, dict):
        raise ValueError('the body must be a JSON object {"run", "case", "metric", "present", "note"}')
    try:
        return LabelRequest.model_validate(data)
    except ValidationError as exc:
        where, message = first_error(exc, data)
        raise ValueError(f"{where}: {message}" if where else message) from None


def append_label(bench_dir: Path, metric_id: str, transcript: Sequence[Mapping[str, Any]], present: bool,
                 note: str = "") -> int:
    """Append one labelled example to `bench_dir`/calibration.jsonl and return its line number (the
    calibration item's node id is `calibration.jsonl::<line>`).

    The line is checked as `--evalbench-calibrate` will read it (the metric is benchmark.yaml's, the
    transcript has a reply to judge): ValueError says what is wrong and nothing is written. The append
    holds the benchmark's result-file lock and is cut back if it fails part way, so concurrent labels and
    a run's finish never interleave or leave half a line."""
    spec = load_spec(bench_dir)
    if spec.metric(metric_id) is None:
        raise ValueError(f"metric {metric_id!r} is not one of benchmark.yaml's ({', '.join(m.id for m in spec.metrics)})")
    try:
        label = MetricLabel.model_validate({"metric_id": metric_id, "transcript": list(transcript), "present": present,
                                            "note": note or None})
    except ValidationError as exc:
        where, message = first_error(exc, {"transcript": transcript})
        raise ValueError(f"the case's transcript cannot be a labelled example: {where}: {message}") from None
    line = orjson.dumps(label.model_dump(mode="json", exclude_none=True)) + b"\n"
    path = bench_dir / CALIBRATION_FILE
    with results_lock(bench_dir, LABEL_LOCK_TIMEOUT), open_append(path, bench_dir) as handle:
        handle.seek(0)
        before = handle.read()
        if before and not before.endswith(b"\n"):
            line = b"\n" + line
        handle.write(line)
    return before.count(b"\n") + line.count(b"\n")


def labelled_lines(bench_dir: Path) -> int:
    """How many labelled examples calibration.jsonl holds (its non-blank lines; 0 without the file)."""
    path = bench_dir / CALIBRATION_FILE
    if not path.is_file():
        return 0
    return sum(1 for raw in read_bounded(path).splitlines() if raw.strip())


@dataclass(frozen=True)
class Candidate:
    """What the view knows of one judged case when it orders cases for labelling."""

    metric_id: str
    probability: Optional[float] = None
    """The judge's P(present), when measured."""
    agreement: Optional[float] = None
    """The share of the panel's (or the judge samples') votes equal to the verdict."""
    flaky: bool = False
    decided_by: Optional[str] = None


def labelling_reasons(case: Candidate, thresholds: Mapping[str, float]) -> list[str]:
    """Why this case is worth a person's label, most telling first: the judge's P(present) lies near the
    metric's calibrated threshold, the judges disagreed, the case is flaky. Empty for a case a check
    decided (there is no judge to correct). The view lists the cases with more reasons first, then the
    closest calls (`query.case_page` orders them so in SQL)."""
    if case.decided_by == "check":
        return []
    reasons = []
    threshold = thresholds.get(case.metric_id, DEFAULT_THRESHOLD)
    if case.probability is not None and abs(case.probability - threshold) <= NEAR_THRESHOLD:
        reasons.append(f"P(present) {case.probability:.2f} near the threshold {threshold:.2f}")
    if case.agreement is not None and case.agreement < 1:
        reasons.append(f"judges split ({case.agreement:.0%} agree)")
    if case.flaky:
        reasons.append("flaky")
    return reasons


def read_thresholds(bench_dir: Path) -> dict[str, float]:
    """Metric id -> the P(present) threshold calibration.json holds for it (none without the file or on a
    file that cannot be read: ordering for labelling then falls back to 0.5)."""
    try:
        entries = calibration_entries(bench_dir)
    except (InputError, ConfigError, OSError):
        return {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a bad threshold is the run's warning to give, not the view's
        found = {str(e["metric_id"]): calibrated_number(e, "threshold", Threshold) for e in entries if e.get("metric_id")}
    return {key: value for key, value in found.items() if value is not None}


def label_problem(exc: BaseException) -> str:
    """One line for a label that could not be written (the benchmark is missing or its files are bad)."""
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__

