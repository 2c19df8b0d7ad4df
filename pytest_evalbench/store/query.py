"""Reading runs back for people: a run in one line (`evalbench runs`), two runs compared case by case
(`evalbench compare`, with the gate's paired test on the cases both scored), and the pull-request
comment's Markdown (`evalbench comment`). Pure functions of `RunData`; the commands print them."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from pytest_evalbench.base.safe_text import markdown
from pytest_evalbench.formats.results import PassFailUnit
from pytest_evalbench.gate.paired import POOLED, Baseline, Comparison, compare_with_baseline, identity_changes
from pytest_evalbench.store.db import ItemData, RunData

MAX_FLIPS_SHOWN = 50
"""Flipped cases a comparison lists (the rest are counted)."""
MARKER = "<!-- evalbench-comment -->"
"""Hidden in the pull-request comment: a later `evalbench comment` finds and updates it."""


def run_line(run: RunData) -> str:
    """`12  2026-12-07T06:10:41Z  demo  main@abc1234  passed (exit 0)  120 cases  $0.0123`: id first."""
    where = f"{run.branch or '-'}@{run.commit or '-'}"
    return (f"{run.id}  {run.created}  {run.benchmark}  {where}  {run.verdict} (exit {run.exit_status})  "
            f"{run.case_count} case{'s' if run.case_count != 1 else ''}  ${run.cost:.4f}")


def run_title(run: RunData) -> str:
    return f"run {run.id} ({run.created}, {run.branch or 'no branch'}@{run.commit or 'no commit'})"


def units(run: RunData) -> list[PassFailUnit]:
    """The run's pass/fail units as the gate pairs them (cases without a target or metric are left out)."""
    return [PassFailUnit(c.target, c.unit, c.metric, c.sample, c.passed) for c in run.cases if c.target and c.metric]


@dataclass
class Rate:
    passed: int = 0
    scored: int = 0

    def text(self) -> str:
        return f"{self.passed / self.scored:.2f} ({self.passed}/{self.scored})" if self.scored else "- (0/0)"


def rates(run: RunData) -> dict[tuple[str, str], Rate]:
    """(target, metric) -> the run's own pass rate over its scored cases."""
    out: dict[tuple[str, str], Rate] = defaultdict(Rate)
    for case in run.cases:
        if case.target and case.metric and case.passed is not None:
            rate = out[(case.target, case.metric)]
            rate.scored += 1
            rate.passed += case.passed
    return dict(out)


@dataclass
class Flip:
    node_id: str
    before: str
    after: str


@dataclass
class RunComparison:
    """Run `old` against run `new`: both runs' rates, the paired tests on shared cases, the flips."""

    old: RunData
    new: RunData
    comparison: Comparison
    flips: list[Flip] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def regression(self) -> bool:
        """A drop that is significant after the multiplicity correction (the gate's `significant` rule)."""
        return bool(self.comparison.fails("significant"))

    def rows(self) -> list[tuple[str, str, str, str, str]]:
        """(target, metric, old rate, new rate, change with its interval) per target x metric of either run."""
        old, new = rates(self.old), rates(self.new)
        out = []
        for key in sorted(set(old) | set(new)):
            test = self.comparison.get(*key)
            if test is None:
                change = "not compared (no shared scored case)"
            else:
                mark = ", significant drop" if test.significant else ""
                change = (f"{test.change:+.2f} [{test.low:+.2f}, {test.high:+.2f}] on {test.n_shared} shared, "
                          f"p={test.p_adjusted:.3g}{mark}")
            out.append((key[0], key[1], old.get(key, Rate()).text(), new.get(key, Rate()).text(), change))
        return out

    def lines(self) -> list[str]:
        """The comparison as the terminal prints it (the caller makes it printable)."""
        out = [f"{self.old.benchmark}: {run_title(self.old)} -> {run_title(self.new)}"]
        rows = self.rows()
        header = ("target", "metric", f"run {self.old.id}", f"run {self.new.id}", "change (95% CI, paired)")
        widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(4)]
        for row in [header, *rows]:
            out.append("  ".join(str(v).ljust(w) for v, w in zip(row, widths)) + "  " + row[4])
        out += [f"note: {n}" for n in self.notes]
        out.append(f"flipped cases: {len(self.flips)}" + (" (status changed between the runs)" if self.flips else ""))
        out += [f"  {f.before} -> {f.after}  {f.node_id}" for f in self.flips[:MAX_FLIPS_SHOWN]]
        if len(self.flips) > MAX_FLIPS_SHOWN:
            out.append(f"  and {len(self.flips) - MAX_FLIPS_SHOWN} more")
        out.append("verdict: " + ("significant drop: " + "; ".join(self.comparison.fails("significant"))
                                  if self.regression else "no significant drop"))
        return out


def _by_key(cases: list[ItemData]) -> dict[str, ItemData]:
    return {c.key if c.target else c.node_id: c for c in cases}


def compare_runs(old: RunData, new: RunData, *, alpha: float = 0.05, correction: str = "holm") -> RunComparison:
    """The newer run against the older, paired on the cases both runs scored (the gate's test and its
    multiplicity correction); the cases whose status changed, fail->pass and pass->fail first."""
    baseline = Baseline(meta={}, targets={}, cases={u.key: bool(u.passed) for u in units(old) if u.passed is not None},
                        scores={})
    comparison = compare_with_baseline(baseline, units(new), correction=correction, alpha=alpha)
    comparison.tests = [t for t in comparison.tests if t.metric_id != POOLED]
    before, after = _by_key(old.cases), _by_key(new.cases)
    flips = [Flip(after[k].node_id, before[k].status, after[k].status) for k in sorted(set(before) & set(after))
             if before[k].status != after[k].status]
    flips.sort(key=lambda f: (f.after != "failed", f.node_id))
    notes = [f"{target}: {what}" for target, what in
             identity_changes(old.identities or None, new.identities or None).items()]
    only_old, only_new = len(set(before) - set(after)), len(set(after) - set(before))
    if only_old or only_new:
        notes.append(f"{only_old} case(s) only in run {old.id}, {only_new} only in run {new.id}: not paired")
    return RunComparison(old, new, comparison, flips, notes)


def comment_markdown(run: RunData, against: RunComparison | None, base: str | None) -> str:
    """The pull-request comment: the run's verdict and rates, and the comparison with the base branch's
    newest run. Every word from a run is Markdown-escaped (`base.safe_text.markdown`)."""
    md = markdown
    lines = [MARKER, f"### evalbench: {md(run.benchmark)}", "",
             f"**{md(run.verdict)}** (exit {run.exit_status}): {md(run.reason)}", "",
             f"run {run.id}, {md(run.branch or 'no branch')} @ {md(run.commit or 'no commit')}, "
             f"{run.case_count} cases, ${run.cost:.4f}", ""]
    if against is None:
        lines += [f"No run of the base branch {md(base or '(unknown)')} in the store to compare with.", ""]
        lines += ["| target | metric | rate |", "|---|---|---|"]
        lines += [f"| {md(t)} | {md(m)} | {r.text()} |" for (t, m), r in sorted(rates(run).items())]
    else:
        lines += [f"Compared with {md(run_title(against.old))} of {md(base or '')}:", "",
                  f"| target | metric | {md(base or 'base')} | this run | change (95% CI, paired) |", "|---|---|---|---|---|"]
        lines += [f"| {md(t)} | {md(m)} | {a} | {b} | {md(c)} |" for t, m, a, b, c in against.rows()]
        lines += ["", f"Flipped cases: {len(against.flips)}"]
        lines += [f"- {md(f.before)} → {md(f.after)}: {md(f.node_id)}" for f in against.flips[:MAX_FLIPS_SHOWN]]
        if against.regression:
            lines += ["", "**Significant drop** against the base branch."]
    return "\n".join(lines) + "\n"
