"""What a run tells people in the terminal: summary lines, plain-ASCII aligned tables (the rates summary and
the baseline comparison), the commands to paste, and the `last_run.json` status file.

A printed command must run as printed: it carries every option that decides which items exist and how
they run (`--benchmark`, targets and models given on the command line, the endpoint, the provider, the
cache mode and directory, the shard, calibration), its node ids are relative to the directory pytest was
started in, and it is quoted for a POSIX shell. Credentials in an endpoint URL are never printed (the
command then names the endpoint without them).
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from pytest_evalbench.base.files import FORMAT_VERSION, VERSION_KEY, atomic_write_text, finite_json, versioned
from pytest_evalbench.base.safe_files import WriteFailed, overwrite_reserved, reserved
from pytest_evalbench.base.safe_text import redact
from pytest_evalbench.kinds.run import RunSettings
from pytest_evalbench.render.views import ERROR, NOT_DRAWN, UNSCORED, error_group

if TYPE_CHECKING:  # read only at the end of a run; `write_run_running` runs at its start
    from pytest_evalbench.gate.decision import GateDecision, GateVerdict
    from pytest_evalbench.gate.paired import Comparison
    from pytest_evalbench.render.summary import CaseStatus, RunSummary

LAST_RUN = "last_run.json"
MAX_LISTED = 10
MAX_CASES_LISTED = 50
"""Cases that did not pass listed by name in the terminal (all of them are in report.html and the Markdown)."""


def _where(files: list[tuple[str, str]], bench_dir: Path, base: Path) -> str:
    """One line for every result file: paths under `bench_dir` shown under `base`, others as given."""
    inside, outside = [], []
    for _, path in files:
        p = Path(path)
        try:
            inside.append(p.relative_to(bench_dir).as_posix() + ("/" if p.is_dir() else ""))
        except ValueError:
            outside.append(path)
    parts = ([f"{base}/{{{', '.join(inside)}}}"] if len(inside) > 1 else [f"{base}/{inside[0]}"] if inside else [])
    return "results: " + ", ".join(parts + outside)


def rate_lines(summary: RunSummary) -> list[str]:
    """The rates table of the rates this session measured: per target and metric the 95% interval
    and the rate as every surface shows it (`RateRow.rate_text`); dataset runs add the means and
    comparative pairs of each agent it measured. Carried-over rates are listed apart (`summary_lines`)."""
    lines: list[str] = list(summary.kind_table)
    measured = [r for r in summary.rates if r.measured]
    if measured:
        above, below = summary.rate_notes()
        lines += above
        lines += align([["target", "metric", "95% CI", "rate (k/n)"]]
                       + [[r.target, r.metric, r.interval_text(), r.rate_text()] for r in measured])
        lines += below
    data = summary.dataset
    if data is not None:
        from pytest_evalbench.kinds.dataset.summary import comparison_lines

        current = {r.target for r in measured}
        for agent in (a for a in data.agents if a.agent_name in current):
            means = [e for e in data.evals if e["agent"] == agent.agent_name]
            shown = ", ".join(f"{e['eval'].removesuffix('Explain')} "
                              + (f"{e['mean']:.2f}" if e["mean"] is not None else f"unscored ({e['unscored']})")
                              for e in means)
            comp = "-" if agent.composite_mean is None else f"{agent.composite_mean:.2f}"
            lines.append(f"{agent.agent_name}: composite mean {comp}" + (f"; {shown}" if shown else ""))
        for name, comparison in data.comparisons:
            lines += comparison_lines(name, comparison)
    return lines


def case_lines(summary: RunSummary, limit: int = MAX_CASES_LISTED) -> list[str]:
    """`cases: 1 passed, 2 failed, ...`; each failed, judge-unreliable or not-run case with why;
    then each error group (`ERROR 6 items: <message>`, variable parts normalised) with its cases:
    an error or unscored reason is printed once, not once per case."""
    if not summary.cases and not summary.errors:
        return []
    problems = summary.problem_cases()
    grouped = [c for c in problems if c.status in (ERROR, UNSCORED)]
    listed = [c for c in problems if c.status not in (ERROR, UNSCORED)]
    lines = [summary.status_line()] if summary.cases else []
    lines += [f"  {c.status}: {c.nodeid}" + (f": {c.reason}" if c.reason else "") for c in listed[:limit]]
    if len(listed) > limit:
        lines.append(f"  and {len(listed) - limit} more (every case is listed in the report and the Markdown summary)")
    by_group: dict[str, list[CaseStatus]] = {}
    for case in grouped:
        by_group.setdefault(error_group(case.reason), []).append(case)
    for line in summary.errors:
        lines.append(f"ERROR {line}")
        members = by_group.pop(line.split(": ", 1)[-1], [])
        lines += [f"  {c.status}: {c.nodeid}" for c in members[:limit]]
        if len(members) > limit:
            lines.append(f"  and {len(members) - limit} more")
    return lines


def summary_lines(summary: RunSummary, bench_dir: Path, base: Path) -> list[str]:
    """The evalbench section of the terminal summary, the rules the gate read at its end; the verdict
    itself is the session's last line (`verdict_line`), after pytest's own counts.

    `base` is `bench_dir` as the user should see it (relative to the working directory)."""
    gate = summary.gate
    lines = [f"benchmark {summary.benchmark}: {summary.recorded} item{'s' if summary.recorded != 1 else ''} "
             f"recorded, {summary.failed_text()}, {summary.errored} errored"]
    lines += case_lines(summary)
    lines += summary.notes
    lines += rate_lines(summary)
    lines += summary.reliability_lines()
    comparison = gate.decision.comparison
    lines += comparison_table(comparison, warnings=False) if comparison is not None else []  # warned below
    carried = [r for r in summary.rates if not r.measured]
    if carried:  # shown for what they are: the gate read none of them
        lines.append(f"not measured in this session ({len(carried)} rate{'s' if len(carried) != 1 else ''}, not gated):")
        lines += [f"  {r.target} {r.metric}: {r.observed_text()}, {r.provenance_label()}" for r in carried]
    lines += [f"warning: {w}" for w in (summary.scenario.warnings if summary.scenario else [])]
    lines.append(gate_mode_line(gate.decision))
    lines += [f"  per-case: {v}" for v in gate.decision.verdicts]
    lines += [f"  rule: {r.text()}" for r in gate.decision.rules if r.status == "held"]  # the others follow, by kind
    lines += [f"  NOT EVALUATED: {n}" for n in gate.decision.notes]
    lines += [f"  INCONCLUSIVE: {r.text()}" for r in gate.decision.rules  # with fail_inconclusive: a breach, below
              if r.status == "inconclusive" and not gate.decision.fail_inconclusive]
    lines += [f"  THRESHOLD BREACH: {b}" for b in gate.decision.breaches]
    lines += [f"  REGRESSION vs baseline: {r}" for r in gate.decision.regressions]
    lines += [f"  INCOMPLETE: {i}" for i in gate.decision.incomplete]
    if gate.flips:
        lines.append(f"flipped pass->fail since the baseline ({len(gate.flips)}); rerun them with:")
        lines.append("  " + summary.commands.get("flipped", ""))
    for key, what in (("failed", "rerun the failed and errored cases with:"),
                      ("record", "record the missing or corrupt cache entries with:")):
        if key in summary.commands:
            lines += [what, "  " + summary.commands[key]]
    cost = summary.cost
    batched = f", {cost.batched} calls in provider batches" if cost.batched else ""
    lines.append(f"llm: {cost.requests} requests{batched}, {cost.cache_hits} cache hits, {cost.retries} retries; "
                 f"{cost.note}")
    for key, usage in cost.phases.items():
        lines.append(f"  {key:<18} {usage['input_tokens']:>9} in {usage['output_tokens']:>8} out  ${usage['cost']:.4f}")
    if summary.files:
        lines.append(_where(summary.files, bench_dir, base))
    if len(verdict_line(gate)) > len(gate_line(gate)):  # cut short there: said in full here
        lines.append(f"why: {gate.reason}")
    return lines


MAX_VERDICT = 99
"""The verdict line's length at most: one line a newcomer reads at a glance."""


def gate_line(gate: GateVerdict) -> str:
    """`evalbench: PASSED (exit 0): 2 cases failed, the build gates on thresholds only` as it is."""
    return f"evalbench: {gate.verdict.upper()} (exit {gate.exit_code}): {gate.reason}"


def verdict_line(gate: GateVerdict) -> str:
    """The last line a session prints (after pytest's own counts): the verdict, the exit status and
    why in one short line; a longer reason is cut here and said in full in the section above."""
    line = gate_line(gate)
    return line if len(line) <= MAX_VERDICT else line[:MAX_VERDICT - 10].rstrip() + "… (above)"


def gate_mode_line(decision: GateDecision) -> str:
    """What fails the build in this session, said once above the rules it lists."""
    if decision.by_cases:
        return "gate: too few rows for the threshold rules (gate.min_rows), so this selection's cases decide"
    if decision.mode == "thresholds":
        return "gate (mode thresholds): failed cases are reported; a breached rule or an incomplete run fails the build"
    return "gate (mode cases): any failed case fails the build, as do a breached rule and an incomplete run"


def transcript_text(record: dict[str, Any]) -> str:
    """The whole conversation of a record that has one (shown under a failure with `-v`)."""
    transcript = (record.get("conversation") or {}).get("transcript") or []
    if not transcript:
        return ""
    return "full transcript:\n" + "\n".join(f"  {m.get('role', '').upper()}: {m.get('content', '')}" for m in transcript)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def write_run_running(path: Path, benchmark: str, root: Path | None = None) -> None:
    """Written at session start: a run that dies before its end leaves "running" (never through a
    link out of `root`, the benchmark directory)."""
    status = {"benchmark": benchmark, "started_at": _now(), "status": "running", VERSION_KEY: FORMAT_VERSION}
    # padded: the final state can overwrite these bytes when a full disk refuses a new file
    atomic_write_text(path, reserved(finite_json(status, path, indent=2) + "\n"), root or path.parent)


def sequential_savings(not_drawn: int, drawn: int, llm: dict[str, Any]) -> dict[str, int]:
    """Samples sequential sampling drew and did not draw, and the calls it saved: the samples not
    drawn at the calls (requests and cache hits) this run made per sample it drew."""
    calls = int(llm.get("requests", 0)) + int(llm.get("cache_hits", 0))
    return {"drawn": drawn, "not_drawn": not_drawn,
            "calls_saved": round(not_drawn * calls / drawn) if drawn else 0}


def write_run_status(path: Path, session: Any, decision: Any) -> None:
    """The final record of the session: complete, incomplete (and why, per item), error (the
    finish step failed) or "not run" (no item ran: collection error or nothing selected)."""
    tally = session.tally
    not_scored = tally.unaccounted()
    status = {
        "benchmark": session.settings.benchmark,
        "finished_at": _now(),
        "status": ("error" if session.finish_error else "not run") if decision is None
        else "incomplete" if decision.incomplete else "complete",
        "incomplete": decision.incomplete if decision is not None else [],
        "errors": dict(sorted(session.errors.items())),
        "selected": len(tally.selected),
        "scored": len([nodeid for nodeid in tally.selected if nodeid not in not_scored]),
        "not_scored": not_scored,
        "rows_recorded": len(session.records),
        "scope": session.scope() if hasattr(session, "scope") else None,
        "dropped": list(session.dropped),
        "threshold_breaches": decision.breaches if decision is not None else [],
        "regressions": decision.regressions if decision is not None else [],
        "judge": list(getattr(session, "judge_lines", [])),
        "llm": session.stats.to_json(),
    }
    not_drawn = sum(1 for s in tally.scored.values() if s == NOT_DRAWN)
    if not_drawn:
        status["scored"] = int(status["scored"]) - not_drawn
        status["sequential"] = sequential_savings(not_drawn, int(status["scored"]), status["llm"])
    if session.finish_error:
        status["error"] = session.finish_error
    try:
        atomic_write_text(path, redact(finite_json(versioned(status), path, indent=2)) + "\n", session.bench_dir)
    except WriteFailed as exc:  # a full disk: the final word goes over the bytes "running" reserved
        error = session.finish_error or str(exc)
        final = {"benchmark": session.settings.benchmark, "finished_at": _now(), "status": "error", "error": error}
        overwrite_reserved(path, redact(finite_json(versioned(final), path, indent=2)) + "\n", session.bench_dir)
        if not session.finish_error:
            raise  # it was to say more: the caller ends the run incomplete, naming the file


def align(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths).rstrip())
    return lines


def comparison_table(comparison: Comparison, *, warnings: bool = True) -> list[str]:
    """What decided, per paired test: baseline and current on the shared cases, the change, the
    flips, the test, its raw and adjusted p, the smallest drop it detects with 80% power (`none`: no
    drop these pairs could make significant). `!` marks a drop significant after correction."""
    from pytest_evalbench.gate.paired import SCORE_RANGE

    rows: list[list[str]] = [["target", "metric", "test", "n", "baseline", "now", "change", "flips -/+",
                              "p", "p adj", "detects", ""]]
    for t in comparison.tests:
        scale = SCORE_RANGE if t.kind == "scores" else 1.0
        rows.append([t.target, t.metric_id, t.method, str(t.n_shared), f"{t.baseline_mean:.3f}",
                     f"{t.current_mean:.3f}", f"{t.change * scale:+.3f}",
                     "-" if t.kind == "scores" else f"{t.b}/{t.c}", f"{t.p_value:.3g}", f"{t.p_adjusted:.3g}",
                     "-" if t.kind == "scores" else "none" if t.detectable is None else f"{t.detectable:.2f}",
                     "!" if t.significant else ""])
    name = {"holm": "Holm", "bh": "Benjamini-Hochberg"}.get(comparison.correction, comparison.correction)
    lines = ["baseline comparison (paired on shared cases; one-sided tests for a drop):"]
    lines += align(rows) if comparison.tests else ["  (no paired comparisons)"]
    lines.append(f"! = drop significant at alpha {comparison.alpha:g} after {name} correction over "
                 f"{len(comparison.tests)} test{'s' if len(comparison.tests) != 1 else ''}")
    if any(t.kind == "scores" for t in comparison.tests):
        lines.append("scores: mean change on the 1..5 scale; drop:X and max_drop compare X with that change / 4")
    lines += [f"not compared: {n.metric} not compared ({n.why}) [{n.target}]" for n in comparison.not_compared]
    lines += [f"warning: {w}" for w in comparison.meta_warnings] if warnings else []
    return lines


RECORDABLE = frozenset({"cache miss", "corrupt cache entry"})
"""Item error kinds a run with `--evalbench-cache=on` repairs."""


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def run_options(settings: RunSettings, cache_mode: str | None = None) -> list[str]:
    """The options that make a pasted command select and run items as this session did."""
    argv = [f"--benchmark={settings.benchmark}"]
    argv += [f"--evalbench-target={t}" for t in settings.targets]
    if settings.user_model:
        argv.append(f"--evalbench-user-model={settings.user_model}")
    if settings.judge_model:
        argv.append(f"--evalbench-judge-model={settings.judge_model}")
    if settings.base_url:
        argv.append(f"--evalbench-base-url={_without_credentials(settings.base_url)}")
    if settings.provider:
        argv.append(f"--evalbench-provider={settings.provider}")
    mode = cache_mode or settings.cache_mode
    if mode != "on":
        argv.append(f"--evalbench-cache={mode}")
    if settings.cache_dir is not None:
        argv.append(f"--evalbench-cache-dir={settings.cache_dir}")
    if settings.shard:
        argv.append(f"--evalbench-shard={settings.shard[0]}/{settings.shard[1]}")
    if settings.calibrate:
        argv.append("--evalbench-calibrate")
    return argv


def relative_node_id(node_id: str, root: Path, cwd: Path) -> str:
    """A node id (relative to pytest's rootdir) as an argument given in `cwd`."""
    path, sep, rest = node_id.partition("::")
    if not sep or os.path.isabs(path):
        return node_id
    rel = os.path.relpath(root / path, cwd)
    return (Path(rel).as_posix() if rel != "." else path) + sep + rest


def pytest_command(options: list[str], args: Iterable[str] = ()) -> str:
    """`pytest OPTIONS ARGS`, quoted for a POSIX shell."""
    return shlex.join(["pytest", *options, *args])


def session_commands(settings: RunSettings, *, flips: list[str], failed: bool, errors: Iterable[str],
                     root: Path, cwd: Path) -> dict[str, str]:
    """The commands a session's summary prints: `flipped` (the cases that passed in the baseline
    and fail now), `failed` (every failed or errored item, through pytest's --lf) and `record`
    (items whose response was missing from, or corrupt in, the cache)."""
    options = run_options(settings)
    out = {}
    if flips:
        out["flipped"] = pytest_command(options, (relative_node_id(f, root, cwd) for f in flips))
    if failed:
        out["failed"] = pytest_command(options, ["--lf"])
    if RECORDABLE & set(errors):
        out["record"] = pytest_command(run_options(settings, cache_mode="on"), ["--lf"])
    return out
