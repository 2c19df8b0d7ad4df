"""Reading runs back for people. For the commands, pure functions of `RunData`: a run in one line
(`evalbench runs`), two runs compared case by case (`evalbench compare`, with the gate's paired test on
the cases both scored), and the pull-request comment's Markdown (`evalbench comment`). For the pages of
`evalbench view`, queries of the store's tables: the runs, a run's cases filtered and ordered (the cases
most worth a label first) one page at a time, two runs' cases paired, and each metric's rate over runs;
only light columns are read for a whole run, transcripts only for the page shown."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from sqlalchemy import String, and_, case, cast, distinct, func, literal, or_, select
from sqlalchemy.engine import Connection, Row

from pytest_evalbench.base.safe_text import markdown
from pytest_evalbench.formats.results import PassFailUnit
from pytest_evalbench.gate.paired import POOLED, Baseline, Comparison, compare_with_baseline, identity_changes
from pytest_evalbench.store import schema
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
    for item in run.cases:
        if item.target and item.metric and item.passed is not None:
            rate = out[(item.target, item.metric)]
            rate.scored += 1
            rate.passed += item.passed
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


# The pages of `evalbench view`

PAGE_SIZE = 50
"""Cases on one page of a run or a comparison: a 10,000-case run is 200 pages, each rendered alone."""
MAX_QUERY = 200
"""The longest search text a page accepts."""
RATE_RUNS = 20
"""How many of a benchmark's newest runs the rates-over-runs table shows."""
ORDERS = ("label", "node", "status")
"""A run page's orders: most worth labelling first (the default), by node id, failures first."""
_STATUS_ORDER = {"failed": 0, "error": 1, "unscored": 2, "not run": 3, "passed": 4}
_CASE = schema.cases.c


@dataclass(frozen=True)
class PageFilter:
    """A run page's filters, read from its query string (unknown values select nothing, never fail)."""

    metric: str = ""
    target: str = ""
    status: str = ""
    query: str = ""
    order: str = "label"


@dataclass
class RunPage:
    """One page of a run's cases, with what the page's filters and pager need."""

    cases: list[Row[Any]]
    reasons: dict[int, list[str]]
    """Case row id -> why it is worth labelling (empty when it is not)."""
    total: int
    page: int
    pages: int
    metrics: list[str] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Pair:
    """One case in two runs (either side None when only one run has it)."""

    key: tuple[str, str, str, int]
    a: Optional[Row[Any]]
    b: Optional[Row[Any]]

    @property
    def flipped(self) -> bool:
        """Both runs scored it and its pass/fail differs."""
        return (self.a is not None and self.b is not None and self.a.passed is not None and self.b.passed is not None
                and self.a.passed != self.b.passed)


@dataclass(frozen=True)
class RateCell:
    passed: int
    scored: int

    @property
    def rate(self) -> Optional[float]:
        return self.passed / self.scored if self.scored else None


def rate_table(conn: Connection, run_ids: Sequence[int]) -> dict[tuple[str, str], dict[int, RateCell]]:
    """(target, metric) -> run id -> its passed and scored cases, for these runs."""
    rows = conn.execute(
        select(_CASE.run_id, _CASE.target, _CASE.metric,
               func.sum(case((_CASE.passed.is_(True), 1), else_=0)), func.count(_CASE.passed))
        .where(_CASE.run_id.in_(list(run_ids))).group_by(_CASE.run_id, _CASE.target, _CASE.metric))
    out: dict[tuple[str, str], dict[int, RateCell]] = defaultdict(dict)
    for run_id, target, metric, passed, scored in rows:
        out[(target, metric)][run_id] = RateCell(int(passed or 0), int(scored or 0))
    return dict(sorted(out.items()))


def rates_over_runs(conn: Connection, all_runs: Sequence[Row[Any]]) -> dict[str, tuple[list[Row[Any]], dict[tuple[str, str],
                                                                                               dict[int, RateCell]]]]:
    """Benchmark -> (its newest `RATE_RUNS` runs, oldest first; their rate table)."""
    by_bench: dict[str, list[Row[Any]]] = defaultdict(list)
    for run in all_runs:
        if len(by_bench[run.benchmark]) < RATE_RUNS:
            by_bench[run.benchmark].append(run)
    return {bench: (list(reversed(chosen)), rate_table(conn, [r.id for r in chosen]))
            for bench, chosen in sorted(by_bench.items())}


def _filtered(run_id: int, flt: PageFilter) -> Any:
    conditions = [_CASE.run_id == run_id]
    if flt.metric:
        conditions.append(_CASE.metric == flt.metric)
    if flt.target:
        conditions.append(_CASE.target == flt.target)
    if flt.status:
        conditions.append(_CASE.status == flt.status)
    if flt.query:
        pattern = "%" + flt.query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        conditions.append(or_(_CASE.node_id.ilike(pattern, escape="\\"), _CASE.justification.ilike(pattern, escape="\\"),
                              cast(_CASE.transcript, String).ilike(pattern, escape="\\")))
    return and_(*conditions)


def _flaky_units(run_id: int) -> Any:
    """The run's (target, row, metric) whose samples' verdicts differ: flaky cases."""
    return (select(_CASE.target, _CASE.unit, _CASE.metric).where(_CASE.run_id == run_id, _CASE.passed.is_not(None))
            .group_by(_CASE.target, _CASE.unit, _CASE.metric).having(func.count(distinct(_CASE.passed)) > 1)
            .subquery())


def _label_order(run_id: int, thresholds: dict[str, float]) -> tuple[Any, list[Any], Any]:
    """The labelling order as SQL (the database sorts a 10,000-case run, not Python): the cases with more
    of `labelling.labelling_reasons` first, then P(present) nearest the threshold; returns the join for
    flaky units, the ORDER BY terms and the flaky flag's column."""
    from pytest_evalbench.store.labelling import DEFAULT_THRESHOLD, NEAR_THRESHOLD  # the view's: not `evalbench runs`'

    threshold = (case(dict(thresholds), value=_CASE.metric, else_=DEFAULT_THRESHOLD)
                 if thresholds else literal(DEFAULT_THRESHOLD))
    distance = func.abs(_CASE.probability - threshold)
    judged = or_(_CASE.decided_by.is_(None), _CASE.decided_by != "check")
    flaky = _flaky_units(run_id)
    is_flaky = case((and_(judged, flaky.c.unit.is_not(None)), 1), else_=0)
    near = case((and_(judged, _CASE.probability.is_not(None), distance <= NEAR_THRESHOLD), 1), else_=0)
    split = case((and_(judged, _CASE.agreement.is_not(None), _CASE.agreement < 1), 1), else_=0)
    join = (flaky, and_(flaky.c.target == _CASE.target, flaky.c.unit == _CASE.unit, flaky.c.metric == _CASE.metric))
    closeness = case((and_(judged, _CASE.probability.is_not(None)), distance), else_=1.0)
    return join, [(near + split + is_flaky).desc(), closeness, _CASE.node_id, _CASE.metric, _CASE.id], is_flaky


def case_page(conn: Connection, run_id: int, flt: PageFilter, page: int, thresholds: dict[str, float]) -> RunPage:
    """One page of the run's cases that pass `flt`, in its order: the database filters, counts, sorts and
    cuts the page, so only the page's rows (with their transcripts) are read."""
    from pytest_evalbench.store.labelling import Candidate, labelling_reasons

    where = _filtered(run_id, flt)
    total = conn.scalar(select(func.count()).select_from(schema.cases).where(where)) or 0
    pages = max(1, -(-total // PAGE_SIZE))
    page = min(max(1, page), pages)
    join, order, is_flaky = _label_order(run_id, thresholds)
    query = select(_CASE.id, is_flaky).outerjoin(*join).where(where)
    if flt.order == "node":
        order = [_CASE.node_id, _CASE.metric, _CASE.id]
    elif flt.order == "status":
        order = [case(_STATUS_ORDER, value=_CASE.status, else_=len(_STATUS_ORDER)), _CASE.node_id, _CASE.metric,
                 _CASE.id]
    # the page's ids first (the sort then carries ids, not transcripts), then their rows
    chosen = conn.execute(query.order_by(*order).offset((page - 1) * PAGE_SIZE).limit(PAGE_SIZE)).all()
    full = {c.id: c for c in conn.execute(select(schema.cases).where(_CASE.id.in_([r.id for r in chosen])))}
    rows = [(full[r.id], r[1]) for r in chosen]
    reasons = {row.id: labelling_reasons(Candidate(row.metric, row.probability, row.agreement, bool(flaky),
                                                    row.decided_by),
                                         thresholds) for row, flaky in rows}
    facets = conn.execute(select(_CASE.metric, _CASE.target, _CASE.status).where(_CASE.run_id == run_id)
                             .distinct()).all()
    return RunPage([row for row, _ in rows], reasons, total, page, pages,
                    sorted({f.metric for f in facets}), sorted({f.target for f in facets}),
                    sorted({f.status for f in facets}, key=lambda s: _STATUS_ORDER.get(s, 5)))


def find_case(conn: Connection, run_id: int, node_id: str, metric: str) -> Optional[Row[Any]]:
    """The run's case with this node id and metric (its first sample's row when several share them)."""
    return conn.execute(select(schema.cases).where(_CASE.run_id == run_id, _CASE.node_id == node_id,
                                                 _CASE.metric == metric).order_by(_CASE.id).limit(1)).first()


def compare_pairs(conn: Connection, a: int, b: int, page: int) -> tuple[list[Pair], int, int, int]:
    """One page of the two runs' cases paired by target, row, metric and sample, flipped ones first (then
    the other changed statuses, then the rest); with the number of pairs, of flipped pairs and of pages."""
    cols = (_CASE.id, _CASE.run_id, _CASE.target, _CASE.unit, _CASE.metric, _CASE.sample, _CASE.passed,
            _CASE.status)
    sides: dict[tuple[str, str, str, int], list[Any]] = defaultdict(lambda: [None, None])
    for row in conn.execute(select(*cols).where(_CASE.run_id.in_([a, b]))):
        sides[(row.target, row.unit, row.metric, row.sample)][0 if row.run_id == a else 1] = row

    def rank(item: tuple[tuple[str, str, str, int], list[Any]]) -> tuple[int, tuple[str, str, str, int]]:
        x, y = item[1]
        flipped = x is not None and y is not None and None not in (x.passed, y.passed) and x.passed != y.passed
        changed = x is None or y is None or x.status != y.status
        return (0 if flipped else 1 if changed else 2), item[0]

    ordered = sorted(sides.items(), key=rank)
    flips = sum(1 for item in ordered if rank(item)[0] == 0)
    pages = max(1, -(-len(ordered) // PAGE_SIZE))
    page = min(max(1, page), pages)
    chosen = ordered[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
    ids = [r.id for _, pair in chosen for r in pair if r is not None]
    full = {c.id: c for c in conn.execute(select(schema.cases).where(_CASE.id.in_(ids)))}
    pairs = [Pair(key, full.get(x.id) if x else None, full.get(y.id) if y else None) for key, (x, y) in chosen]
    return pairs, len(ordered), flips, pages
