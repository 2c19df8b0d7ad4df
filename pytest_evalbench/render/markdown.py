"""CI-native Markdown summary (GitHub's `$GITHUB_STEP_SUMMARY`, or `--evalbench-markdown=PATH`)."""

from __future__ import annotations

from pathlib import Path

from .summary import RunSummary

ICONS = {"passed": "✅", "failed": "❌", "regression": "❌", "incomplete": "⚠️"}


def _rate(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def _change(value: float | None) -> str:
    return "–" if value is None else f"{value:+.2f}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(summary: RunSummary, html_path: str | None) -> str:
    """Gate verdict, per-target/metric table with change vs baseline, flipped cases, report path."""
    gate = summary.gate
    icon = ICONS.get(gate.verdict)
    title = f"evalbench `{summary.benchmark}`: {gate.verdict} (exit {gate.exit_code})"
    out = [f"## {icon + ' ' if icon else ''}{title}", "", _cell(gate.reason), ""]
    has_baseline = any(r.change is not None or r.baseline is not None for r in summary.rates)
    if summary.rates:
        head = ["target", "metric", "rate", "95% CI", "k/n"]
        head += ["baseline", "change", "change 95% CI"] if has_baseline else []
        out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for r in summary.rates:
            label = r.provenance_label()
            cells = [r.target, r.metric + (f" {r.name}" if r.name and r.name != r.metric else ""),
                     _rate(r.rate) + (f" ({label})" if label else ""),
                     f"[{r.low:.2f}, {r.high:.2f}]", f"{r.k}/{r.n}"]
            if has_baseline:
                ci = ("–" if r.change_low is None or r.change_high is None
                      else f"[{r.change_low:+.2f}, {r.change_high:+.2f}]")
                cells += [_rate(r.baseline), _change(r.change) + (" ❗" if r.significant_drop else ""), ci]
            out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        out.append("")
    problems = ([f"threshold breach: {b}" for b in gate.breaches] + [f"regression: {r}" for r in gate.regressions]
                + [f"incomplete: {i}" for i in gate.incomplete] + summary.errors)
    if problems:
        out += [f"- {_cell(p)}" for p in problems] + [""]
    if gate.flips:
        out += [f"**Flipped pass → fail since the baseline** ({len(gate.flips)}): rerun with",
                "", "```", summary.commands.get("flipped", ""), "```", ""]
    for key, what in (("failed", "Rerun the failed and errored cases with"),
                      ("record", "Record the missing or corrupt cache entries with")):
        if key in summary.commands:
            out += [f"{what}:", "", "```", summary.commands[key], "```", ""]
    out.append(f"Cost: {_cell(summary.cost.note)}")
    if html_path:
        out += ["", f"HTML report: `{html_path}`"]
    return "\n".join(out) + "\n"


def write_markdown(path: Path, text: str, append: bool) -> None:
    """Append (GitHub's step summary collects several steps) or replace the file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w", encoding="utf-8") as fh:
        fh.write(text)
