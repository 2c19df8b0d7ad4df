"""CI-native Markdown summary (GitHub's `$GITHUB_STEP_SUMMARY`, or `--evalbench-markdown=PATH`)."""

from __future__ import annotations

import re
from pathlib import Path

from pytest_evalbench.base.files import atomic_write_text
from pytest_evalbench.base.safe_files import writing
from pytest_evalbench.base.safe_text import control_visible, markdown, redact
from pytest_evalbench.render.summary import RunSummary

ICONS = {"passed": "✅", "failed": "❌", "regression": "❌", "incomplete": "⚠️", "tolerated": "⚠️"}
"""`tolerated`: the build passed with failed cases (never a bare green check beside them)."""


def _rate(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _change(value: float | None) -> str:
    return "–" if value is None else f"{value:+.2f}"


def _cell(text: str) -> str:
    """Every text from a run (names, reasons, model output) reaches the Markdown through here."""
    return markdown(text).replace("|", "\\|")


def _row(hostile: list[str], ours: list[str]) -> str:
    """A table row: names and reasons escaped (`_cell`), the numbers this module formatted kept as they are."""
    return "| " + " | ".join([*(_cell(c) for c in hostile), *ours]) + " |"


def _code(text: str) -> str:
    """Text inside a code span (node ids, commands): nothing renders there, but it must stay one span."""
    return control_visible(redact(text)).replace("`", "").replace("|", "\\|").replace("\n", " ")


def _span(text: str) -> str:
    """`text` as one inline code span outside tables (a title): fenced by one backtick more than its
    longest run of backticks, so a name holding backticks cannot close the span and render the rest."""
    text = control_visible(redact(text)).replace("\n", " ")
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _fenced(lines: list[str]) -> list[str]:
    """Lines inside a ``` block: a backtick becomes `'` so no line can close the block early."""
    return ["```", *(control_visible(redact(line)).replace("`", "'") for line in lines), "```"]


MAX_CASES = 2000
"""Cases that did not pass listed in the Markdown summary at most (the report lists as many transcripts)."""


def _rates(summary: RunSummary) -> list[str]:
    has_baseline = any(r.change is not None or r.baseline is not None for r in summary.rates)
    head = ["target", "metric", "rate (k/n)", "95% CI"]
    head += ["baseline", "change", "change 95% CI"] if has_baseline else []
    above, below = summary.rate_notes()
    out = [*(_cell(line) for line in above), *([""] if above else [])]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in summary.rates:
        cells = [r.interval_text()]
        if has_baseline:
            ci = ("–" if r.change_low is None or r.change_high is None
                  else f"[{r.change_low:+.2f}, {r.change_high:+.2f}]")
            cells += [_rate(r.baseline), _change(r.change) + (" ❗" if r.significant_drop else ""), ci]
        # rate_text carries session stamps read from .sessions.json: escaped like every other text
        out.append(_row([r.target, r.metric + (f" {r.name}" if r.name and r.name != r.metric else ""),
                         r.rate_text()], cells))
    return [*out, "", *(_cell(line) for line in below), *([""] if below else [])]


def _comparisons(summary: RunSummary) -> list[str]:
    """Comparative pairs side by side: per pair and score, the mean difference, its interval,
    win/tie/loss and the sign test's p."""
    data = summary.dataset
    if data is None or not data.comparisons:
        return []
    out = ["**Comparative pairs** (agent minus other, paired by scenario)", "",
           "| agent | other | scenarios | score | mean difference | 95% CI | win/tie/loss | p |",
           "|---|---|---|---|---|---|---|---|"]
    for agent, comp in data.comparisons:
        for name, stat in [("composite", comp.composite), *comp.metrics.items()]:
            ci = "–" if stat.ci95 is None else f"[{stat.ci95[0]:+.2f}, {stat.ci95[1]:+.2f}]"
            out.append(_row([agent, comp.other, str(comp.n_scenarios), name],
                            [_change(stat.mean_diff), ci, f"{stat.wins}/{stat.ties}/{stat.losses}", f"{stat.p_value:.3f}"]))
    return [*out, ""]


def _cases(summary: RunSummary) -> list[str]:
    if not summary.cases:
        return []
    problems = summary.problem_cases()
    out = [f"**{_cell(summary.status_line())}**", ""]
    if problems:
        out += ["<details><summary>cases that did not pass</summary>", "", "| status | case | why |", "|---|---|---|"]
        out += [f"| {c.status} | `{_code(c.nodeid)}` | {_cell(c.reason)} |" for c in problems[:MAX_CASES]]
        if len(problems) > MAX_CASES:
            out.append(f"| … | {len(problems) - MAX_CASES} more | see the report |")
        out += ["", "</details>", ""]
    return out


def render_markdown(summary: RunSummary, html_path: str | None) -> str:
    """Gate verdict and rules, per-target/metric table with change vs baseline, case statuses,
    comparative pairs, flipped cases, report path."""
    gate = summary.gate
    icon = ICONS.get("tolerated" if gate.tolerated else gate.verdict)
    title = f"evalbench {_span(summary.benchmark)}: {gate.verdict} (exit {gate.exit_code})"
    out = [f"## {icon + ' ' if icon else ''}{title}", "", _cell(gate.reason), ""]
    unread = [n for n in gate.decision.notes if n not in gate.rule_lines]  # rules no row of this session reached
    if gate.decision.rules or unread:
        out += ["Gate rules:", ""] + [f"- {_cell(r)}" for r in [*gate.rule_lines, *unread]] + [""]
    if summary.rates:
        out += _rates(summary)
    reliability = summary.reliability_lines()
    if reliability:
        out += ["Reliability over samples:", ""] + [f"- {_cell(line)}" for line in reliability] + [""]
    if summary.kind_table:
        out += [*_fenced(summary.kind_table), ""]
    out += _comparisons(summary)
    out += _cases(summary)
    problems = ([f"regression: {r}" for r in gate.decision.regressions] + [f"incomplete: {i}" for i in gate.decision.incomplete]
                + [f"error: {e}" for e in summary.errors] + [f"note: {n}" for n in summary.notes])
    if problems:
        out += [f"- {_cell(p)}" for p in problems] + [""]
    if gate.flips:
        out += [f"**Flipped pass → fail since the baseline** ({len(gate.flips)}): rerun with",
                "", *_fenced([summary.commands.get("flipped", "")]), ""]
    for key, what in (("failed", "Rerun the failed and errored cases with"),
                      ("record", "Record the missing or corrupt cache entries with")):
        if key in summary.commands:
            out += [f"{what}:", "", *_fenced([summary.commands[key]]), ""]
    out.append(f"Cost: {_cell(summary.cost.note)}")
    if html_path:
        out += ["", f"HTML report: {_span(html_path)}"]
    return "\n".join(out) + "\n"


def write_markdown(path: Path, text: str, append: bool) -> None:
    """Append (GitHub's step summary collects several steps) or replace the file (atomically: a
    reader never sees half a report)."""
    if not append:
        atomic_write_text(path, text, None)
        return
    with writing(path):  # a full disk names the file (`files.WriteFailed`)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            fh.write(text)
