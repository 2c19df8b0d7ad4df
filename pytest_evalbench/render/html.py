"""Self-contained HTML report of one run: one file, no external URLs, charts as inline SVG.

One design for both kinds, rendered from the `RunSummary` (no number is computed here):
a header with the run's metadata and the gate's verdict; pass rates per target and metric with
intervals, baseline change and a trend over the recorded runs; then the kind's own sections
(scenarios: demographics per axis value and a filterable, searchable transcript list; dataset:
agents, per-eval means, per-case table, comparative pairs). The markup is server-rendered, so the
numbers are in the page even without JavaScript; a few lines of inline JS filter the lists.
Elements people or tests look for carry `data-testid`s (gate-verdict, rate-<target>-<metric>,
ci-<target>-<metric>, change-<target>-<metric>, trend-<target>-<metric>, demo-<target>-<metric>-
<axis>, conv-<conv_id>-s<sample>, case-<case_id>, eval-<agent>-<eval>).
"""

from __future__ import annotations

import html
from functools import cache
from importlib import resources
from typing import Any

from pytest_evalbench.base.safe_text import cut
from pytest_evalbench.formats.results import ToolCall
from pytest_evalbench.kinds.trajectory import describe
from pytest_evalbench.render.rates import DemographicGroup
from pytest_evalbench.render.summary import RunSummary
from pytest_evalbench.render.views import JUDGE_UNRELIABLE, DatasetView, TranscriptView

E = html.escape
"""Every text from a run (names, reasons, model output) reaches the page through this one function."""
OUTCOME_CHARS = 300
"""How much of a tool call's result a transcript in the report shows."""


def _num(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _signed(value: float | None) -> str:
    return "–" if value is None else f"{value:+.2f}"


def _cls(passed: bool | None) -> str:
    """CSS class of a verdict: pass, fail or unscored (None)."""
    return "unscored" if passed is None else "pass" if passed else "fail"


def _metric_word(passed: bool | None, not_applicable: bool) -> str:
    if passed is None:
        return "not applicable" if not_applicable else "unscored"
    return "pass" if passed else "below"


def _status_cls(status: str) -> str:
    """CSS class of a documented case status."""
    return {"passed": "pass", "failed": "fail", JUDGE_UNRELIABLE: "unreliable"}.get(status, "unscored")


def _tid(*parts: Any) -> str:
    return E("-".join(str(p) for p in parts), quote=True)


# --------------------------------------------------------------------------- inline SVG charts


def bar_svg(rate: float | None, low: float | None, high: float | None, scale: float = 1.0, width: int = 160,
            negative: bool = False) -> str:
    """A horizontal bar for a value on [0, scale] with its interval as a whisker."""
    if rate is None:
        return f'<svg class="bar" width="{width}" height="14" role="img" aria-label="no data"></svg>'

    def x(v: float) -> float:
        return round(max(0.0, min(1.0, v / scale)) * width, 1)

    color = "#8b5cf6" if negative else "#3b82f6"
    parts = [f'<svg class="bar" width="{width}" height="14" role="img" aria-label="{_num(rate)}">',
             f'<rect x="0" y="2" width="{width}" height="10" rx="5" fill="#eef0f3"/>',
             f'<rect x="0" y="2" width="{x(rate)}" height="10" rx="5" fill="{color}"/>']
    if low is not None and high is not None:
        parts.append(f'<line x1="{x(low)}" y1="7" x2="{x(high)}" y2="7" stroke="#111827" stroke-width="2" '
                     f'opacity=".6"/>')
    parts.append("</svg>")
    return "".join(parts)


def sparkline_svg(values: list[float | None], width: int = 90, height: int = 20) -> str:
    """The trend of one rate over recorded runs (last point marked); gaps where a run had no value."""
    points = [(i, v) for i, v in enumerate(values) if v is not None]
    if len(points) < 2:
        return '<span class="muted">–</span>'
    step = width / max(1, len(values) - 1)

    def xy(i: int, v: float) -> str:
        return f"{round(i * step, 1)},{round(height - 2 - v * (height - 4), 1)}"

    path = " ".join(xy(i, v) for i, v in points)
    last_i, last_v = points[-1]
    cx, cy = xy(last_i, last_v).split(",")
    return (f'<svg class="spark" width="{width}" height="{height}" role="img" aria-label="trend over '
            f'{len(points)} runs"><polyline points="{path}" fill="none" stroke="#3b82f6" stroke-width="1.5"/>'
            f'<circle cx="{cx}" cy="{cy}" r="2.5" fill="#1d2330"/></svg>')


# --------------------------------------------------------------------------- sections


def _header(s: RunSummary) -> str:
    gate = s.gate
    models = "; ".join(f"{role}: {', '.join(names)}" for role, names in s.models.items()) or "–"
    facts = [("benchmark", f"{s.benchmark} ({s.kind})"), ("date", s.created), ("plugin", f"pytest-evalbench {s.plugin_version}"),
             ("commit", s.commit or "not a git checkout"), ("models", models), ("cost", s.cost.note),
             ("items", f"{s.recorded} recorded, {s.failed_text()}, {s.errored} errored")]
    rows = "".join(f'<div><dt>{E(k)}</dt><dd data-testid="meta-{E(k)}">{E(v)}</dd></div>' for k, v in facts)
    tolerated = " tolerated" if gate.tolerated else ""  # passed with failed cases: never a bare green
    return (f'<header><h1>{E(s.title)}</h1><dl class="facts">{rows}</dl>'
            f'<p class="verdict {E(gate.verdict)}{tolerated}"><span data-testid="gate-verdict">'
            f'{E(gate.verdict.upper())}</span> '
            f'(exit {gate.exit_code}): <span data-testid="gate-reason">{E(gate.reason)}</span></p></header>')


def _problems(s: RunSummary) -> str:
    gate = s.gate
    items = ([("regression", r) for r in gate.decision.regressions]
             + [("incomplete", i) for i in gate.decision.incomplete] + [("error", e) for e in s.errors]
             + [("warning", w) for w in (s.scenario.warnings if s.scenario else [])]
             + [("note", n) for n in s.notes])  # completeness, dropped rows, judge agreement and reliability
    flips = "".join(f"<li><code>{E(f.text())}</code></li>" for f in gate.flips)
    if not items and not flips:
        return ""
    body = "".join(f'<li><b>{E(k)}:</b> {E(v)}</li>' for k, v in items)
    if flips:
        body += f'<li><b>flipped pass → fail since the baseline ({len(gate.flips)}):</b><ul data-testid="flips">{flips}</ul></li>'
    return f'<section><h2>Problems</h2><ul class="warn">{body}</ul></section>'


def _rules(s: RunSummary) -> str:
    """Every rule the gate read: held, breached, inconclusive or not evaluated (and why), with its numbers."""
    rules = s.gate.decision.rules
    unread = [n for n in s.gate.decision.notes if n not in s.gate.rule_lines]  # rules no row of this session reached
    if not rules and not unread:
        return ""
    cls = {"held": "pass", "breached": "fail", "inconclusive": "unscored", "not evaluated": "unscored"}
    items = "".join(f'<li data-testid="rule-{i}" class="{cls[r.status]}">{E(r.text())}</li>' for i, r in enumerate(rules))
    items += "".join(f'<li class="unscored">{E(n)}</li>' for n in unread)
    return f'<section><h2>Gate rules</h2><ul data-testid="rules">{items}</ul></section>'


def _case_statuses(s: RunSummary) -> str:
    """This session's items per documented status, and each one that did not pass with why."""
    if not s.cases:
        return ""
    problems = s.problem_cases()
    rows = "".join(f'<tr data-testid="status-{_tid(c.nodeid)}"><td class="{_status_cls(c.status)}">{E(c.status)}</td>'
                   f'<td><code>{E(c.nodeid)}</code></td><td class="why">{E(c.reason)}</td></tr>' for c in problems)
    table = f'<table><tr><th>status</th><th>case</th><th>why</th></tr>{rows}</table>' if rows else ""
    return (f'<section><h2>Cases of this run</h2><p data-testid="case-counts">{E(s.status_line())}</p>{table}'
            f'<p class="muted">Statuses: passed, failed, unscored, judge unreliable (pytest: xfailed), error, not run '
            f'(README "Case statuses").</p></section>')


def _trend(history: list[dict[str, Any]], target: str, metric: str) -> list[float | None]:
    return [((h.get("rates") or {}).get(target) or {}).get(metric) for h in history]


def _rates(s: RunSummary) -> str:
    if s.kind_table:
        return f'<section><h2>Results</h2><pre data-testid="kind-table">{E(chr(10).join(s.kind_table))}</pre></section>'
    if not s.rates:
        return '<section><h2>Pass rates</h2><p class="muted">No scored case in this run.</p></section>'
    has_base = any(r.baseline is not None for r in s.rates)
    head = ["target", "metric", "rate", "", "95% interval"] + (["vs baseline"] if has_base else []) + ["trend"]
    rows = []
    for r in s.rates:
        label = E(r.metric) + (f'<div class="muted">{E(r.name)}{" (" + E(r.type) + ")" if r.type else ""}</div>'
                               if r.name else "")
        cells = [E(r.target), label,
                 f'<span class="num" data-testid="rate-{_tid(r.target, r.metric)}">{_num(r.rate)}</span>'
                 f'<div class="muted" data-testid="ratetext-{_tid(r.target, r.metric)}">{E(r.rate_text())}</div>',
                 bar_svg(r.rate, r.low, r.high, negative=r.type == "negative"),
                 f'<span data-testid="ci-{_tid(r.target, r.metric)}">{r.k}/{r.n}, {r.interval_text()}</span>']
        if has_base:
            if r.change is None:
                cells.append(f'<span class="muted">{"baseline " + _num(r.baseline) if r.baseline is not None else "new"}</span>')
            else:
                cls = "down" if r.significant_drop else ("up" if r.change > 0 else "muted")
                flips = "" if r.flips_down is None else f", {r.flips_down} pass→fail, {r.flips_up} fail→pass"
                cells.append(f'<span class="{cls}" data-testid="change-{_tid(r.target, r.metric)}">'
                             f'{_num(r.baseline)} → {_signed(r.change)} [{_signed(r.change_low)}, '
                             f'{_signed(r.change_high)}]{flips}{" significant drop" if r.significant_drop else ""}</span>')
        cells.append(f'<span data-testid="trend-{_tid(r.target, r.metric)}">'
                     f'{sparkline_svg(_trend(s.history, r.target, r.metric))}</span>')
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return (f'<section><h2>Pass rates</h2><table id="rates"><tr>{"".join(f"<th>{h}</th>" for h in head)}</tr>'
            f'{"".join(rows)}</table><p class="muted">Rates are observed over every row of the result files; '
            f'where the gate used other numbers (an unreliable judge\'s rows left out) both are shown, labelled. '
            f'Intervals are 95% Wilson score intervals; a change is '
            f'current minus baseline with its 95% interval (paired on shared cases). Trend: this rate over the '
            f'last {len(s.history)} recorded runs (history.jsonl).</p></section>')


def _demographics(groups: list[DemographicGroup]) -> str:
    if not groups:
        return ('<section><h2>Demographics</h2><p class="muted">No scenario in this run has demographic '
                'axes.</p></section>')
    blocks = []
    for g in groups:
        rows = "".join(
            f'<tr><td>{E(value)}</td>'
            f'<td class="num" data-testid="demo-{_tid(g.target, g.metric, g.axis, value)}">'
            f'{_num(v.rate)}</td><td>{bar_svg(v.rate, v.low, v.high)}</td>'
            f'<td>{v.k}/{v.n}, [{v.low:.2f}, {v.high:.2f}]</td></tr>' for value, v in g.values)
        flag = ""
        if g.flagged and g.gap is not None:
            gap = g.gap
            flag = (f'<span class="flag" data-testid="demo-flag-{_tid(g.target, g.metric, g.axis)}">'
                    f'groups differ beyond noise: {E(gap.best)} vs {E(gap.worst)}, difference '
                    f'[{gap.low:+.2f}, {gap.high:+.2f}]</span>')
        blocks.append(f'<div class="group" data-flagged="{str(g.flagged).lower()}"><h3>{E(g.target)} · '
                      f'{E(g.metric)} {E(g.metric_name or "")} · {E(g.axis)}{flag}</h3>'
                      f'<table><tr><th>{E(g.axis)}</th><th>rate</th><th></th><th>k/n, 95% interval</th></tr>'
                      f'{rows}</table></div>')
    return ('<section><h2>Demographics</h2><p class="muted">Pass rate per axis value. Flagged where the best '
            'and worst value differ beyond noise (the 95% interval of their difference excludes 0).</p>'
            + "".join(blocks) + "</section>")


def _select(fid: str, label: str, values: list[str]) -> str:
    opts = "".join(f'<option value="{E(v, quote=True)}">{E(v)}</option>' for v in values)
    return f'<label>{E(label)} <select id="{fid}"><option value="">all</option>{opts}</select></label>'


def _tool_calls(calls: list[ToolCall] | None) -> str:
    """A turn's tool calls, one line each: the call and (the start of) what it returned."""
    if not calls:
        return ""
    lines = "".join(f'<li>{E(describe(c))}{"" if c.outcome is None else " → " + E(cut(c.outcome, OUTCOME_CHARS))}</li>'
                    for c in calls)
    return f'<ul class="tools" aria-label="tool calls">{lines}</ul>'


def _transcripts(views: list[TranscriptView], total: int | None = None) -> str:
    convs = [v.conversation for v in views]
    metrics = sorted({c.metric_id for c in convs if c.metric_id})
    targets = sorted({c.target.id for c in convs if c.target.id})
    demos = sorted({f"{k}: {v}" for c in convs for k, v in c.demographic.items()})
    items = []
    for view in views:
        c, status = view.conversation, view.status
        demo = "; ".join(f"{k}: {v}" for k, v in c.demographic.items())
        judged = "".join(
            f'<div class="judgment"><span class="{_status_cls(js)}">{E(js)}</span> '
            f'{E(j.metric_id)} {E(j.metric_name or "")} ({E(j.metric_type)}): '
            f'behaviour {"present" if j.present else "absent" if j.present is not None else "unknown"}'
            f'{f" (first at assistant turn {j.turn})" if j.turn else ""}'
            f'<div class="why">{"why unscored" if js == "unscored" else j.decided_by or "judge"}: '
            f'{E(j.justification or "")}</div></div>' for j, js in zip(view.judgments, view.judgment_statuses()))
        if not view.judgments:
            judged = '<div class="judgment why">why unscored: no judgment recorded for this conversation</div>'

        if c.user_audit is not None and c.user_audit.flags:  # the simulated user's audit (`kinds.scenarios.runner.audit`)
            judged += f'<div class="judgment why">simulated user: {E("; ".join(c.user_audit.flags))}</div>'
        turns = "".join(f'<div class="turn {E(t.role)}"><span class="role">{E(t.role)}</span> '
                        f'{E(t.content)}{_tool_calls(t.tool_calls)}</div>' for t in c.transcript)
        demo_values = "|".join(f"{k}: {v}" for k, v in c.demographic.items())
        items.append(
            f'<details class="conv" data-testid="conv-{_tid(c.conv_id, "s" + str(c.sample))}" '
            f'data-status="{E(status)}" data-metric="{E(c.metric_id, quote=True)}" '
            f'data-target="{E(c.target.id, quote=True)}" data-demo="{E(demo_values, quote=True)}" '
            f'data-id="{E(c.id, quote=True)}" data-sample="{c.sample}">'
            f'<summary><span class="{_status_cls(status)}">'
            f'{E(status)}</span> {E(c.id)} · {E(c.target.id)} · sample {c.sample}'
            f'{" · " + E(demo) if demo else ""}</summary><p class="muted">{E(c.persona or "")} '
            f'{E(c.user_goal or "")}</p>{judged}{turns}</details>')
    filters = (f'<div class="filters"><label><input type="checkbox" id="f-failed"> failures only</label> '
               f'{_select("f-metric", "metric", metrics)} {_select("f-target", "target", targets)} '
               f'{_select("f-demo", "demographic", demos)} <input type="search" id="f-search" '
               f'placeholder="search transcripts and justifications" aria-label="search"> '
               f'<span class="muted" id="f-count">{len(convs)} shown</span></div>')
    cut = (f'<p class="muted">{len(convs)} of {total} conversations: failed and unscored ones first; every '
           'conversation is in runs/&lt;target&gt;/conversations.json</p>' if total is not None and total > len(convs)
           else "")
    return f'<section><h2>Transcripts</h2>{cut}{filters}<div id="convs">{"".join(items)}</div></section>'


def _agents(d: DatasetView, s: RunSummary) -> str:
    rate_text = {r.target: r.rate_text() for r in s.rates}
    rows = "".join(
        f'<tr><td>{E(a.agent_name)}</td><td class="num" data-testid="agent-rate-{_tid(a.agent_name)}">'
        f'{_num(a.pass_rate)}</td><td data-testid="agent-ratetext-{_tid(a.agent_name)}">'
        f'{E(rate_text.get(a.agent_name, ""))}</td><td>{a.n_passed}/{a.n_scored} scored, '
        f'{a.n_unscored} unscored</td><td class="num">{_num(a.composite_mean)}</td></tr>'
        for a in d.agents)
    evals = "".join(
        f'<tr><td>{E(e["agent"])}</td><td>{E(e["eval"])}</td><td class="num" data-testid="eval-{_tid(e["agent"], e["eval"])}">'
        f'{_num(e["mean"]) if e["n"] else "unscored (" + str(e.get("unscored", 0)) + ")"}</td>'
        f'<td>{bar_svg(e["mean"], e["low"], e["high"], scale=5.0)}</td>'
        f'<td>n={e["n"]}, [{_num(e["low"])}, {_num(e["high"])}]'
        f'{", " + str(e["unscored"]) + " unscored" if e.get("unscored") else ""}</td></tr>' for e in d.evals)
    return (f'<section><h2>Agents</h2><p class="muted" data-testid="agents-provenance">As in agent_summary.json: '
            f'every case on disk, whichever session measured it (the pass rates above say which this session '
            f'measured).</p><table><tr><th>agent</th><th>pass rate</th><th>rate (k/n)</th><th>cases</th>'
            f'<th>composite mean</th></tr>{rows}</table></section>'
            f'<section><h2>Mean score per eval (1–5)</h2><table><tr><th>agent</th><th>eval</th><th>mean</th><th></th>'
            f'<th>95% interval</th></tr>{evals}</table></section>')


def _cases(d: DatasetView) -> str:
    rows = []
    for c in d.cases:
        metrics = "".join(
            f'<tr><td>{E(m.eval)}</td><td class="num">{"–" if m.score is None else m.score}</td>'
            f'<td>{_num(m.threshold)}</td><td class="{_cls(m.passed)}">'
            f'{_metric_word(m.passed, m.not_applicable)}</td>'
            f'<td class="why">{E(m.explanation or "")}</td></tr>' for m in c.metrics)
        tool = c.tool_check
        tool_text = ("–" if not tool else
                     f'{"ok" if tool.ok else "mismatch"} ({tool.matched}/{tool.expected}): {tool.summary}')
        reasons = "; ".join(c.reasons) or "–"
        status = d.status(c)
        rows.append(
            f'<details class="conv case" data-testid="case-{_tid(c.case_id)}" data-status="{E(status)}" '
            f'data-target="{E(c.agent_name, quote=True)}" data-metric="" data-demo="">'
            f'<summary><span class="{_status_cls(status)}">'
            f'{E(status)}</span> {E(c.case_id)} · {E(c.agent_name)} · composite {_num(c.composite)} '
            f'(pass mark {_num(c.pass_mark)}, {E(c.threshold_profile or "")})'
            f'{" · scenario " + E(c.scenario_id) if c.scenario_id else ""}</summary>'
            f'<p><b>{"why unscored" if status == "unscored" else "hard fails / reasons"}:</b> {E(reasons)}</p>'
            f'<p><b>tool check:</b> {E(tool_text)}</p>'
            f'<table><tr><th>eval</th><th>score</th><th>threshold</th><th></th><th>explanation</th></tr>{metrics}'
            f'</table></details>')
    agents = sorted({c.agent_name for c in d.cases})
    filters = (f'<div class="filters"><label><input type="checkbox" id="f-failed"> failures only</label> '
               f'{_select("f-target", "agent", agents)} <input type="search" id="f-search" '
               f'placeholder="search cases and explanations" aria-label="search"> '
               f'<span class="muted" id="f-count">{len(d.cases)} shown</span></div>')
    return f'<section><h2>Cases</h2>{filters}<div id="convs">{"".join(rows)}</div></section>'


def _comparisons(d: DatasetView) -> str:
    """Comparative pairs side by side: per pair of agents and score, the mean difference (agent
    minus other, paired by scenario), its 95% interval, win/tie/loss and the sign test's p."""
    if not d.comparisons:
        return ""
    rows = []
    for agent, comp in d.comparisons:
        scores = [("composite", comp.composite), *comp.metrics.items()]
        for i, (name, stat) in enumerate(scores):
            ci = "–" if stat.ci95 is None else f"[{stat.ci95[0]:+.2f}, {stat.ci95[1]:+.2f}]"
            cls = "" if stat.mean_diff is None else ("up" if stat.mean_diff > 0 else "down" if stat.mean_diff < 0 else "muted")
            pair = (f'<td rowspan="{len(scores)}">{E(agent)}</td><td rowspan="{len(scores)}">{E(comp.other)}</td>'
                    f'<td rowspan="{len(scores)}">{comp.n_scenarios}</td>') if i == 0 else ""
            rows.append(f'<tr data-testid="pair-{_tid(agent, comp.other, name)}">{pair}<td>{E(name)}</td>'
                        f'<td class="num {cls}">{_signed(stat.mean_diff)}</td><td>{ci}</td>'
                        f'<td>{stat.wins}/{stat.ties}/{stat.losses}</td><td>{stat.p_value:.3f}</td></tr>')
    return (f'<section><h2>Comparative pairs (cases sharing a scenario)</h2><table data-testid="comparisons">'
            f'<tr><th>agent</th><th>other</th><th>scenarios</th><th>score</th><th>mean difference</th>'
            f'<th>95% interval</th><th>win/tie/loss</th><th>sign test p</th></tr>{"".join(rows)}</table>'
            f'<p class="muted">Differences are agent minus other on the scenarios both have scored.</p></section>')


def _reliability(s: RunSummary) -> str:
    """pass^k / pass@k and the flaky cases (flaky: judge / agent / both, with the numbers)."""
    items = "".join(f"<li>{E(line)}</li>" for line in s.reliability_lines())
    return f'<section><h2>Reliability over samples</h2><ul data-testid="reliability">{items}</ul></section>' if items else ""


def _files(s: RunSummary) -> str:
    items = "".join(f"<li>{E(what)}: <code>{E(path)}</code></li>" for what, path in s.files)
    return f'<section><h2>Files</h2><ul>{items}</ul></section>' if items else ""


@cache
def _asset(name: str) -> str:
    """The page's stylesheet or script, shipped as package data beside this module (pyproject package-data)."""
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def render_html(summary: RunSummary) -> str:
    """The report page of one run."""
    body = [_header(summary), "<main>", _problems(summary), _rules(summary), _rates(summary), _reliability(summary),
            _case_statuses(summary)]
    if summary.scenario is not None:
        body += [_demographics(summary.scenario.demographics),
                 _transcripts(summary.scenario.transcripts, summary.scenario.transcripts_total)]
    if summary.dataset is not None:
        body += [_agents(summary.dataset, summary), _comparisons(summary.dataset), _cases(summary.dataset)]
    body += [_files(summary), "</main>"]
    css, js = _asset("report.css"), _asset("report.js")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            f'content="width=device-width, initial-scale=1"><title>{E(summary.title)}</title><style>{css}</style>'
            f'</head><body>{"".join(body)}<script>{js}</script></body></html>\n')

