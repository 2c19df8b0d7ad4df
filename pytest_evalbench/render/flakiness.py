"""What the summary shows about flaky cases and pass^k / pass@k (computed in scenarios/flaky.py,
read here from scores.json rows and results.json entries: no number is recomputed)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_evalbench.scenarios.models import ScoreRow

MAX_FLAKY = 200
"""Flaky cases listed at most (the scores.json rows carry every label)."""
SOURCE = "from the result files: every row on file, this session's and earlier ones"


@dataclass(frozen=True)
class FlakyCase:
    """One flaky case: scenario row × target, its label (`judge`, `agent`, `both`) and the numbers."""

    target: str
    id: str
    metric: str
    label: str
    detail: str

    def text(self) -> str:
        return f"flaky: {self.label} {self.target} {self.id} ({self.metric}): {self.detail}"


@dataclass(frozen=True)
class PassKRow:
    """pass^k and pass@k of one target × metric, as results.json has them (`pass_k`)."""

    target: str
    metric: str
    k: int
    n_cases: int
    n_excluded: int
    pass_hat_k: float | None
    pass_at_k: float | None

    def text(self) -> str:
        def num(v: float | None) -> str:
            return "n/a" if v is None else f"{v:.2f}"
        excluded = f"; {self.n_excluded} excluded (an unscored or missing sample)" if self.n_excluded else ""
        return (f"pass^{self.k} {num(self.pass_hat_k)}, pass@{self.k} {num(self.pass_at_k)} {self.target} "
                f"{self.metric}: over {self.n_cases} case{'s' if self.n_cases != 1 else ''}, "
                f"k = {self.k} samples per case{excluded}")


def flaky_cases(scores: Iterable[ScoreRow]) -> tuple[list[FlakyCase], int]:
    """The flaky cases of the scores.json rows (first `MAX_FLAKY`, in file order) and how many in all."""
    seen: set[tuple[str, str]] = set()
    shown: list[FlakyCase] = []
    for row in scores:
        if row.flaky is None or (row.target_model, row.id) in seen:
            continue
        seen.add((row.target_model, row.id))
        if len(shown) < MAX_FLAKY:
            shown.append(FlakyCase(row.target_model, row.id, row.metric_id, row.flaky, row.flaky_detail or ""))
    return shown, len(seen)


def pass_k_rows(results: Sequence[Mapping[str, Any]]) -> list[PassKRow]:
    """Every target × metric with a `pass_k` entry in results.json, in file order."""
    out: list[PassKRow] = []
    for entry in results:
        for metric, value in sorted((entry.get("pass_k") or {}).items()):
            out.append(PassKRow(str(entry.get("target_model")), metric, int(value["k"]), int(value["n_cases"]),
                                int(value["n_excluded"]), value.get("pass_hat_k"), value.get("pass_at_k")))
    return out


def reliability_lines(pass_k: list[PassKRow], flaky: list[FlakyCase], flaky_total: int) -> list[str]:
    """Summary lines: pass^k / pass@k per target × metric, then each flaky case (what every surface shows)."""
    lines = [f"pass^k / pass@k over cases ({SOURCE}):"] if pass_k else []
    lines += [r.text() for r in pass_k]
    if flaky_total:
        lines.append(f"flaky cases: {flaky_total} ({SOURCE}; judge: votes on one transcript disagree, "
                     f"agent: the samples' verdicts differ)")
        lines += [f.text() for f in flaky]
        if flaky_total > len(flaky):
            lines.append(f"... and {flaky_total - len(flaky)} more flaky cases (see `flaky` in scores.json)")
    return lines
