"""render/: the summary object and its pure renderers (no pytest run, no browser)."""

from __future__ import annotations

import html
import json
from pathlib import Path

from pytest_evalbench.formats.dataset_rows import AgentSummary
from pytest_evalbench.gate.decision import Failures, FlipKey, GateDecision, gate_verdict, node_ids_of
from pytest_evalbench.gate.rules import RuleResult
from pytest_evalbench.kinds.protocol import KindResults
from pytest_evalbench.llm.engine import EngineStats
from pytest_evalbench.llm.types import Usage
from pytest_evalbench.render.html import sparkline_svg
from pytest_evalbench.render.progress import Counts, progress_line
from pytest_evalbench.render.summary import append_history, build_summary, collapse_errors, cost_view, read_history
from pytest_evalbench.render.views import mean_interval


def test_collapse_errors_counts_identical_messages() -> None:
    errors = {f"n{i}": "evalbench no API key: set OPENAI_API_KEY" for i in range(500)} | {"x": "other"}
    assert collapse_errors(errors) == ["500 items: evalbench no API key: set OPENAI_API_KEY", "1 item: other"]


def test_error_groups_normalise_variable_parts() -> None:
    """One cause is one group: elapsed times, ports, request ids and addresses do not split it."""
    errors = {
        "a": "evalbench timeout: no reply from 127.0.0.1:41523 after 30.2s (request id req_8f3Kd92LqA)",
        "b": "evalbench timeout: no reply from 127.0.0.1:39001 after 29.9s (request id req_Zx81Pq0aMm)",
        "c": "crashed: <App object at 0x7f3a9c2b1d60> raised at 12 ms",
        "d": "crashed: <App object at 0x7f3a9c2b1e90> raised at 7 ms",
        "e": "evalbench server error: HTTP 500 trace 3f9a2c7e-1b2d-4e5f-8a9b-0c1d2e3f4a5b",
        "f": "evalbench server error: HTTP 500 trace 0a1b2c3d-4e5f-4a5b-9c8d-7e6f5a4b3c2d",
    }
    assert collapse_errors(errors) == [
        "2 items: crashed: <App object at 0x…> raised at <n>ms",
        "2 items: evalbench server error: HTTP 500 trace <id>",
        "2 items: evalbench timeout: no reply from 127.0.0.1:<port> after <n>s (request id req_<id>)"]
    assert collapse_errors({"x": "HTTP 500", "y": "HTTP 502"}) == ["1 item: HTTP 500", "1 item: HTTP 502"]


def test_progress_line_eta_and_end() -> None:
    line = progress_line(Counts(done=120, total=500, failed=3, in_flight=16, requests=260, cache_hits=4,
                                tokens=1_234_567, cost=0.41), elapsed=60)
    assert line == ("evalbench: 120/500 done (3 failed, 0 errors), 16 in flight, 260 requests + 4 cached, "
                    "1.2M tokens, $0.4100, ETA 3m10s")
    assert progress_line(Counts(done=5, total=5), elapsed=3661).endswith("took 1h01m")


def test_verdicts_say_why() -> None:
    """One short sentence a newcomer reads right; the rules are listed beside it, not in it."""
    rules = [RuleResult("min_negative_pass_rate", 0.6, "t", None, "held", 1.0),
             RuleResult("max_drop", 0.1, "t", "m01", "held", -0.25, 0.03)]
    thresholds = gate_verdict(GateDecision(mode="thresholds", rules=rules), 0, Failures(check=2, judge=1), {})
    assert (thresholds.verdict, thresholds.reason, thresholds.tolerated) == (
        "passed", "3 cases failed, the build gates on thresholds only", 3)
    doubtful = gate_verdict(GateDecision(), 0, Failures(unreliable=2), {})
    assert doubtful.reason == "no case failed; 2 failures of an unreliable judge do not count" and doubtful.tolerated == 2
    many = gate_verdict(GateDecision(mode="thresholds", rules=rules * 2), 0, 0, {})
    assert many.reason == "every case passed"
    cases_mode = gate_verdict(GateDecision(rules=rules[:1]), 0, 0, {})
    assert cases_mode.reason == "every case passed"
    none = gate_verdict(GateDecision(mode="thresholds"), 0, Failures(check=1), {})
    assert none.reason == "1 case failed, and no threshold rule is configured to fail the build"
    # rules configured but no row of the session reached the gate (e.g. every row's judge unreliable):
    # never "no threshold rule is configured"
    from pytest_evalbench.formats.spec import ThresholdRules
    from pytest_evalbench.gate.decision import GateInputs, GateSettings, evaluate_gate
    unreached = evaluate_gate(GateInputs(results=[], rules=ThresholdRules(min_negative_pass_rate=0.5)),
                              GateSettings(mode="thresholds"))
    assert "configured" not in gate_verdict(unreached, 0, Failures(check=1), {}).reason
    assert any("rests on a judge found unreliable" in note for note in unreached.notes)
    cases = gate_verdict(GateDecision(), 1, Failures(check=1), {})
    assert (cases.verdict, cases.reason) == ("failed", "1 case failed, and any failed case fails the build")
    assert gate_verdict(GateDecision(), 0, 0, {}).tolerated == 0
    incomplete = gate_verdict(GateDecision(incomplete=["500 items no API key"]), 7, 0, {})
    assert (incomplete.verdict, incomplete.reason) == (
        "incomplete", "incomplete numbers (INCOMPLETE above) neither pass nor fail")
    regression = gate_verdict(GateDecision(breaches=["tgt: positive_pass_rate 0.50 < 0.80"]), 6, 0, {})
    assert (regression.verdict, regression.reason) == ("regression", "1 threshold rule breached")
    assert gate_verdict(None, 4, 0, {}, "bad baseline").reason == "results could not be written (the ERROR line says why)"


def test_the_verdict_is_one_short_line_with_gate_said_once() -> None:
    """Whatever the outcome, the last line says the verdict and the exit status in under 100 characters;
    a longer reason is cut there and said in full in the section above."""
    from pytest_evalbench.render.terminal import verdict_line

    outcomes = [(GateDecision(mode="thresholds"), 0, Failures(check=2)), (GateDecision(), 1, Failures(judge=12)),
                (GateDecision(incomplete=["6 items connection error"]), 7, Failures()),
                (GateDecision(breaches=["a", "b"], regressions=["c"]), 6, Failures(check=3)),
                (GateDecision(by_cases=True), 1, Failures(check=1)), (GateDecision(), 0, Failures(unreliable=3))]
    for outcome, code, failed in outcomes:
        line = verdict_line(gate_verdict(outcome, code, failed, {}))
        assert len(line) < 100 and "…" not in line and f"(exit {code}): " in line and line.count("gate") <= 1, line
    held = [RuleResult("min_negative_pass_rate", 0.6, "t", None, "held", 1.0)]
    assert (verdict_line(gate_verdict(GateDecision(mode="thresholds", rules=held), 0, Failures(check=2), {}))
            == "evalbench: PASSED (exit 0): 2 cases failed, the build gates on thresholds only")
    long = verdict_line(gate_verdict(None, 4, 0, {}, "disk full: " + "x" * 200))
    assert len(long) < 100 and "ERROR line" in long


def test_flip_keys_map_to_node_ids() -> None:
    records = {"benchmarks/d/scenarios.json::m01_s001_v01[t-s1]":
               {"target_id": "t", "score": {"id": "m01_s001_v01", "sample": 1}}}
    assert node_ids_of(records) == {FlipKey("t", "m01_s001_v01", 1): "benchmarks/d/scenarios.json::m01_s001_v01[t-s1]"}


def test_cost_view_counts_cached_replays_and_names_unpriced() -> None:
    stats = EngineStats(requests=2, cache_hits=3, spent=0.5, unpriced={"mystery"})
    stats.usage["evaluate:judge"] = Usage(100, 10, 1.25)
    cost = cost_view(stats)
    assert (cost.spent, cost.total, cost.input_tokens, cost.output_tokens) == (0.5, 1.25, 100, 10)
    assert "cached replays included" in cost.note and "no price for mystery" in cost.note
    assert "prompt cache" not in cost.note


def test_the_cost_note_names_prompt_cache_reads_and_the_money_they_saved() -> None:
    stats = EngineStats()
    stats.usage["simulate:user"] = Usage(1000, 10, 0.5, cached_tokens=600, saved=0.12)
    stats.usage["evaluate:judge"] = Usage(2000, 10, 0.5, cached_tokens=1400, saved=0.2)
    cost = cost_view(stats)
    assert (cost.cached_tokens, cost.saved) == (2000, 0.32)
    assert "2,000 input tokens read from the provider's prompt cache, saving $0.3200" in cost.note


def test_mean_interval_is_clipped_to_the_scale() -> None:
    assert mean_interval([1.0, 5.0]) == {"mean": 3.0, "low": 1.0, "high": 5.0, "n": 2}
    assert mean_interval([]) == {"mean": None, "low": None, "high": None, "n": 0}
    one = mean_interval([4.0])
    assert (one["low"], one["high"]) == (4.0, 4.0)


def test_history_round_trip_skips_torn_lines(tmp_path: Path) -> None:
    agent = AgentSummary(agent_name="a", n_cases=2, n_scored=2, n_passed=1, n_unscored=0, pass_rate=0.5,
                         composite_mean=None, metric_means={})
    written = KindResults([agent.to_json()], agents=[agent], view="cases")
    summary = build_summary(kind="dataset", written=written,
                            gate=gate_verdict(GateDecision(), 0, 0, {}), meta={"benchmark": "b"}, stats=EngineStats(),
                            errors={}, recorded=2, failed=1, commit=None, files=[])
    path = tmp_path / "history.jsonl"
    append_history(path, summary)
    with path.open("a") as fh:
        fh.write('{"torn": ')
    append_history(path, summary)
    entries = read_history(path)
    assert [e["rates"] for e in entries] == [{"a": {"pass rate": 0.5}}] * 2
    assert json.loads(json.dumps(summary.to_json()))["dataset"]["agents"] == [agent.to_json()]
    assert entries[0]["commit"] is None  # not a git checkout


def test_sparkline_needs_two_points() -> None:
    assert "<svg" not in sparkline_svg([0.5])
    svg = sparkline_svg([1.0, None, 0.0])
    assert svg.startswith("<svg") and "http" not in svg.replace("http://www.w3.org/2000/svg", "")


def test_meta_warnings_in_words() -> None:
    from pytest_evalbench.gate.paired import meta_warnings

    baseline = {"benchmark": "demo", "judge_model": "j1", "targets": {"fake-gpt": "fake-gpt", "old": "m"}}
    current = {"benchmark": "demo", "judge_model": "j2", "targets": {"fake-gpt": "gpt-4o", "new": "n"}}
    assert meta_warnings(baseline, current) == [
        "judge_model differs from the baseline: j1 -> j2",
        "targets differ from the baseline: fake-gpt: fake-gpt -> gpt-4o; added new (n); removed old (m)"]


def test_an_inconclusive_rule_reads_the_same_on_every_surface(tmp_path: Path) -> None:
    from pytest_evalbench.formats.results import ModelResult, RateSummary
    from pytest_evalbench.formats.spec import ThresholdRules
    from pytest_evalbench.gate.decision import GateInputs, GateSettings, evaluate_gate
    from pytest_evalbench.render.html import render_html
    from pytest_evalbench.render.markdown import render_markdown
    from pytest_evalbench.render.terminal import summary_lines

    result = ModelResult(target_model="t", positive_pass_rate=0.5, negative_pass_rate=None, n_positive=10,
                         n_negative=0, n_total=10, by_metric={"m01": RateSummary(pass_rate=0.5, n_passed=5, n_total=10)},
                         by_scenario={})
    decision = evaluate_gate(GateInputs(results=[result], rules=ThresholdRules(min_positive_pass_rate=0.6)),
                             GateSettings(mode="thresholds"))
    text = "min_positive_pass_rate 0.60 t: 0.50 inconclusive (95% interval [0.24, 0.76] of 10 rows, detects drops >= 0.44)"
    assert [r.text() for r in decision.rules] == [text] and decision.exit_code(0) == 0
    summary = build_summary(kind="scenarios", written=KindResults([result.model_dump()], rates=[result]),
                            gate=gate_verdict(decision, 0, 0, {}), meta={"benchmark": "b"}, stats=EngineStats(),
                            errors={}, recorded=10, failed=0, commit=None, files=[])
    assert f"  INCONCLUSIVE: {text}" in summary_lines(summary, tmp_path, tmp_path)
    assert f"- {text}" in html.unescape(render_markdown(summary, None).replace("\\", ""))  # unescaped: the same words
    assert f'class="unscored">{html.escape(text)}</li>' in render_html(summary)
    path = tmp_path / "history.jsonl"
    append_history(path, summary)
    assert json.loads(path.read_text())["gate"]["rules"] == [text]
