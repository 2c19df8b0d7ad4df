"""Judges: panels and self-consistency, and how far calibration lets a judge be trusted.

Several judges (`evaluator_models`) and/or several samples per judge (`judge: {samples: k}`) vote; the
judgment is the majority (the lower median for 1-5 scores) and the share of votes that agree with it is
reported. Every vote is an ordinary engine call, so it is cached and counted in cost like any other.
Vote `j` of a row judged for conversation sample `s` uses the cache sample `s + j * SAMPLE_STRIDE`
(j = 0 keeps `s`, so a single judge's cache entries are those of a run without a panel).

A metric (scenario benchmarks) or Explain eval (dataset benchmarks) is "judge unreliable" when its
calibration entry (calibration.json, written by `--evalbench-calibrate`) has a kappa that is undefined
or below `judge: {min_kappa}`, when it was calibrated for another judge or prompt style, or (with
`require_calibration: true`) when it has no entry. Its failures are still shown, but as xfailed items
and outside the gate's numbers, with the reason in the summary.
"""

from __future__ import annotations

import asyncio
import statistics
import warnings
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from pytest_evalbench.base.errors import EvalbenchWarning
from pytest_evalbench.base.files import unversioned
from pytest_evalbench.base.inputs import read_text
from pytest_evalbench.base.json_input import parse_json
from pytest_evalbench.base.numbers import Count, Kappa, Threshold, number_problem
from pytest_evalbench.formats.agreement import JudgeAccuracy
from pytest_evalbench.llm.types import Endpoint

SAMPLE_STRIDE = 1_000_000
V = TypeVar("V", bool, int)
A = TypeVar("A")


@dataclass(frozen=True)
class Vote(Generic[V]):
    """One judge's answer: its value (None when that judge's answer was unusable) and its text."""

    judge: str
    sample: int
    value: V | None
    text: str

    def to_json(self) -> dict[str, object]:
        return {"judge": self.judge, "sample": self.sample, "value": self.value, "text": self.text}


@dataclass(frozen=True)
class PanelJudgment(Generic[V]):
    value: V | None
    justification: str
    """The deciding justification (or why the panel could not decide)."""
    agreement: float | None
    """Share of usable votes equal to the judgment; None for a single vote or no judgment."""
    votes: list[Vote[V]]


def vote_sample(sample: int, index: int) -> int:
    """The cache sample of the `index`-th self-consistency vote on conversation sample `sample`."""
    return sample + index * SAMPLE_STRIDE


async def poll(judges: list[Endpoint], samples: int, sample: int,
               ask: Callable[[Endpoint, int], Awaitable[tuple[V | None, str]]]) -> list[Vote[V]]:
    """Ask every judge `samples` times, concurrently; votes in panel order."""
    plan = [(judge, vote_sample(sample, j)) for judge in judges for j in range(samples)]
    if len(plan) == 1:  # one judge, one vote (the usual case): no task and no gather per item
        answers = [await ask(*plan[0])]
    else:
        answers = list(await asyncio.gather(*[ask(judge, s) for judge, s in plan]))
    return [Vote(judge.model, s, value, text) for (judge, s), (value, text) in zip(plan, answers)]


def _agreement(votes: list[Vote[V]], value: V) -> float | None:
    usable = [v for v in votes if v.value is not None]
    if len(votes) < 2 or not usable:
        return None
    return round(sum(1 for v in usable if v.value == value) / len(usable), 4)


def _settled(votes: list[Vote[V]]) -> PanelJudgment[V] | None:
    """The judgment when there is nothing to aggregate: a lone vote as it is, or no usable vote (unscored)."""
    if len(votes) == 1:
        return PanelJudgment(votes[0].value, votes[0].text, None, votes)
    if all(v.value is None for v in votes):
        unusable = "; ".join(f"{v.judge}#{v.sample}: {v.text}" for v in votes)
        return PanelJudgment(None, f"unscored: no judge gave a usable answer ({unusable})", None, votes)
    return None


def majority(votes: list[Vote[bool]]) -> PanelJudgment[bool]:
    """The majority of the usable yes/no votes; a tie or no usable vote is unscored, with its reason."""
    settled = _settled(votes)
    if settled is not None:
        return settled
    usable = [v for v in votes if v.value is not None]
    counts = Counter(bool(v.value) for v in usable)
    if counts[True] == counts[False]:
        return PanelJudgment(None, f"unscored: the judges tied {counts[True]}-{counts[False]} "
                            f"(present-absent) over {len(usable)} usable votes", 0.5, votes)
    value = counts[True] > counts[False]
    first = next(v for v in usable if v.value == value)
    text = f"panel {counts[value]}/{len(usable)} {'present' if value else 'absent'}: {first.text}"
    return PanelJudgment(value, text, _agreement(votes, value), votes)


def median_vote(votes: list[Vote[int]]) -> PanelJudgment[int]:
    """The median of the usable 1-5 scores (the lower one of an even count: a tie never rounds up)."""
    settled = _settled(votes)
    if settled is not None:
        return settled
    usable = [v for v in votes if v.value is not None]
    value = int(statistics.median_low(int(v.value) for v in usable if v.value is not None))
    first = next(v for v in usable if v.value == value)
    scores = ", ".join(str(v.value) for v in usable)
    return PanelJudgment(value, f"panel median of [{scores}]: {first.text}", _agreement(votes, value), votes)


def agreement_lines(pairs: list[tuple[str, float | None]]) -> list[str]:
    """Terminal lines: per metric (or eval), the mean agreement of the judge panel over its rows."""
    groups: dict[str, list[float]] = {}
    for name, value in pairs:
        if value is not None:
            groups.setdefault(name, []).append(value)
    return [f"judge agreement {name}: {sum(v) / len(v):.2f} mean over {len(v)} row{'s' if len(v) != 1 else ''}"
            for name, v in sorted(groups.items())]


RESULT_FILE = "calibration.json"
"""What `--evalbench-calibrate` writes beside benchmark.yaml (calibration/) and later runs read here."""


def judge_name(judges: list[Any]) -> str:
    """The calibrated judge: one model, or a panel's models joined by '+'."""
    return "+".join(j.model for j in judges)


def calibration_entries(bench_dir: Path) -> list[dict[str, Any]]:
    """calibration.json's entries ([] when it does not exist). A file the JSON reader refuses (NaN,
    1e400, a key given twice, nesting past its limit) is one InputError naming file and field, never
    read as "never calibrated": that would clear a judge `min_kappa` has to check."""
    path = bench_dir / RESULT_FILE
    if not path.exists() and not path.is_symlink():
        return []
    data = parse_json(read_text(path), path)
    rows = data if isinstance(data, list) else []
    return [unversioned(path, row, number) for number, row in enumerate(rows, start=1) if isinstance(row, dict)]


def calibrated_number(entry: dict[str, Any], field: str, kind: Any) -> float | None:
    """calibration.json's `field` of `entry` when it is a `kind` (`formats.numbers`: a threshold
    strictly inside (0, 1), a kappa in [-1, 1]); None when it is absent, and None with one warning
    naming the file, entry and field when it is anything else (a committed file is input: a threshold
    of 1 would silently turn every judgment to absent, and NaN or 1e308 would break the arithmetic)."""
    value = entry.get(field)
    if value is None:
        return None
    problem = number_problem(kind, value)
    if problem is None:
        return float(value)
    key = entry.get("metric_id") or entry.get("eval")
    warnings.warn(EvalbenchWarning(f"{RESULT_FILE}: entry {str(key)[:100]!r}, field {field!r}: {problem}; "
                                   "not used"), stacklevel=2)
    return None


def calibrated_thresholds(bench_dir: Path, judge: str, styles: Mapping[str, str]) -> dict[str, float]:
    """Metric id -> calibration.json's P(present) threshold, for entries calibrated on this judge and
    the metric's prompt style (`styles`: metric id -> style)."""
    out: dict[str, float] = {}
    for entry in calibration_entries(bench_dir):
        metric_id = entry.get("metric_id")
        if (isinstance(metric_id, str) and entry.get("judge") == judge
                and entry.get("prompt", "examples") == styles.get(metric_id)):
            threshold = calibrated_number(entry, "threshold", Threshold)
            if threshold is not None:
                out[metric_id] = threshold
    return out


def unreliable_judges(bench_dir: Path, judge_config: Any, keys: list[str], judge: str,
                      styles: Mapping[str, str] | None = None) -> dict[str, str]:
    """Metric id / eval name -> why its judge is unreliable (empty without `min_kappa`); `styles`:
    metric id -> its prompt style, when not `judge.prompt`."""
    minimum = judge_config.min_kappa
    if minimum is None:
        return {}
    entries = {str(e.get("metric_id") or e.get("eval")): e for e in calibration_entries(bench_dir)}
    out: dict[str, str] = {}
    for key in keys:
        entry = entries.get(key)
        if entry is None:
            if judge_config.require_calibration:
                out[key] = f"never calibrated (require_calibration; run --evalbench-calibrate with {RESULT_FILE})"
            continue
        if entry.get("judge") != judge:
            if judge_config.require_calibration:
                out[key] = f"calibrated for another judge ({entry.get('judge')}, not {judge})"
            continue
        prompt = (styles or {}).get(key) or getattr(judge_config, "prompt", "examples")
        if entry.get("prompt", "examples") != prompt:
            if judge_config.require_calibration:
                out[key] = f"calibrated for another prompt style ({entry.get('prompt', 'examples')}, not {prompt})"
            continue
        why = _short_kappa(entry, minimum, probability=bool(getattr(judge_config, "probability", False)))
        if why is not None:
            out[key] = why
    return out


KAPPA_NAMES = {"kappa": "kappa", "judge_kappa": "judge-only kappa", "nested_kappa": "judge-only nested kappa",
               "threshold_kappa": "judge-only threshold kappa"}


def _short_kappa(entry: dict[str, Any], minimum: float, *, probability: bool) -> str | None:
    """Why an entry's judge falls short of `minimum`, or None. The figure read is the calibrated style's
    own (the judge's kappa on the rows its checks leave to it; with probability scoring and a threshold,
    the cross-validated kappa of the threshold judgments) and, when recorded, the nested kappa of the
    whole procedure (style and threshold chosen without the examples they score): the lower one, as
    each is optimistic where the other is not (the style's own figure when the style was chosen on
    the same labels, the procedure's when the run's style is not the one it chooses)."""
    own = ("threshold_kappa" if probability and entry.get("threshold") is not None
           else "judge_kappa" if entry.get("judge_n") is not None else "kappa")
    fields = [own] + (["nested_kappa"] if entry.get("nested_n") is not None else [])
    values = [(calibrated_number(entry, field, Kappa), field) for field in fields]
    value, field = min(values, key=lambda v: -2.0 if v[0] is None else v[0])
    if value is not None and value >= minimum:
        return None
    shown = "undefined" if value is None else f"{value:.2f}"
    n = entry.get({"kappa": "n", "nested_kappa": "nested_n"}.get(field, "judge_n"))
    n = n if isinstance(n, int) and not isinstance(n, bool) else "?"
    return f"{KAPPA_NAMES[field]} {shown} < min_kappa {minimum:.2f} (n={n}, {RESULT_FILE})"


def reliability_lines(unreliable: dict[str, str], failures: dict[str, int],
                      checked: dict[str, int] | None = None) -> list[str]:
    """Summary lines: each unreliable judge, why, and what happened to its failures, counted by who
    decided them: `failures` the judge's (xfailed), `checked` a deterministic check's (trusted, as usual)."""
    def count(n: int, what: str) -> str:
        return f"{n} {what} is" if n == 1 else f"{n} {what}s are"

    lines = []
    for key, why in sorted(unreliable.items()):
        line = (f"judge unreliable for {key}: {why}; its judge-decided rows are outside the gate: "
                f"{count(failures.get(key, 0), 'judge-decided failure')} reported as xfailed and cannot fail the build")
        by_check = (checked or {}).get(key, 0)
        if by_check:
            line += f"; {count(by_check, 'failure')} decided by a check, trusted and counted as usual"
        lines.append(line)
    return lines


def judged_unreliably(unreliable: dict[str, str], metric_id: str, decided_by: str | None) -> bool:
    """A scenario row's judgment came from a judge calibration found unreliable (a check is always trusted)."""
    return metric_id in unreliable and decided_by != "check"


def judge_accuracy(bench_dir: Path, judge: str) -> dict[str, JudgeAccuracy]:
    """Metric id -> the judge's sensitivity and specificity counts from calibration.json, for entries
    calibrated for this judge (an entry for another judge says nothing about this one)."""
    out: dict[str, JudgeAccuracy] = {}
    for entry in calibration_entries(bench_dir):
        if entry.get("metric_id") and entry.get("judge") == judge and isinstance(entry.get("confusion"), dict):
            problem = _confusion_problem(entry["confusion"])
            if problem is not None:
                warnings.warn(EvalbenchWarning(f"{RESULT_FILE}: entry {str(entry['metric_id'])[:100]!r}, field "
                                               f"'confusion.{problem}'; not used"), stacklevel=2)
                continue
            out[str(entry["metric_id"])] = JudgeAccuracy.from_confusion(entry["confusion"])
    return out


def _confusion_problem(confusion: dict[str, Any]) -> str | None:
    """`label.verdict': why` for the first count of a confusion matrix that is not a `Count`."""
    for label, row in confusion.items():
        for verdict, value in (row.items() if isinstance(row, dict) else ()):
            problem = number_problem(Count, value)
            if problem is not None:
                return f"{label}.{verdict}': {problem}"
    return None
