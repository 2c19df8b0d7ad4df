"""Property tests: pass/fail mapping, results.json recomputed from scores.json, row merging."""

from __future__ import annotations

import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from helpers import score_row
from hypothesis import given
from hypothesis import strategies as st

from pytest_evalbench.base.files import dump_json, versioned
from pytest_evalbench.kinds.scenarios.aggregate import aggregate
from pytest_evalbench.kinds.scenarios.models import ScoreRow, derive_pass
from pytest_evalbench.kinds.scenarios.store import dump_results


@given(st.one_of(st.none(), st.booleans()), st.sampled_from(["positive", "negative"]))
def test_pass_mapping(present: bool | None, metric_type: str) -> None:
    passed, score = derive_pass(present, metric_type)
    if present is None:
        assert (passed, score) == (None, None)
    else:
        assert passed == (present if metric_type == "positive" else not present)
        assert score == int(passed)


ROWS = st.lists(st.fixed_dictionaries({
    "id": st.sampled_from(["m01_s001_v01", "m01_s001_v02", "m02_s001_v01", "m03_s002_v01"]),
    "metric_type": st.sampled_from(["positive", "negative"]),
    "passed": st.one_of(st.none(), st.booleans()),
    "target_model": st.sampled_from(["a", "b", "c"]),
    "sample": st.integers(0, 2),
}), max_size=40)


def reference(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """results.json written out longhand from output-schema.md."""
    def rate(group: list[dict[str, Any]]) -> float | None:
        scored = [r["passed"] for r in group if r["passed"] is not None]
        return round(sum(scored) / len(scored), 4) if scored else None

    def by(group: list[dict[str, Any]], key: str) -> dict[str, Any]:
        out = {}
        for name in sorted({r[key] for r in group}):
            scored = [r["passed"] for r in group if r[key] == name and r["passed"] is not None]
            out[name] = {"pass_rate": round(sum(scored) / len(scored), 4) if scored else None,
                         "n_passed": sum(scored), "n_total": len(scored)}
        return out

    def pass_k(group: list[dict[str, Any]]) -> dict[str, Any]:
        """Per metric, with k (the most rows a case has) >= 2: over the cases with k scored rows, the
        share that passed every time (pass^k) and at least once (pass@k)."""
        out = {}
        for metric in sorted({r["metric_id"] for r in group}):
            cases: dict[str, list[bool | None]] = defaultdict(list)
            for r in group:
                if r["metric_id"] == metric:
                    cases[r["id"]].append(r["passed"])
            k = max(len(v) for v in cases.values())
            full = [v for v in cases.values() if len(v) == k and None not in v]
            if k >= 2:
                out[metric] = {"k": k, "n_cases": len(full), "n_excluded": len(cases) - len(full),
                               "pass_hat_k": round(sum(all(v) for v in full) / len(full), 4) if full else None,
                               "pass_at_k": round(sum(any(v) for v in full) / len(full), 4) if full else None}
        return out

    models: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        models[row["target_model"]].append(row)
    results = []
    for model, group in models.items():
        pos = [r for r in group if r["metric_type"] == "positive"]
        neg = [r for r in group if r["metric_type"] == "negative"]
        results.append({"target_model": model, "positive_pass_rate": rate(pos), "negative_pass_rate": rate(neg),
                        "n_positive": len(pos), "n_negative": len(neg), "n_total": len(group),
                        "by_metric": by(group, "metric_id"), "by_scenario": by(group, "id")})
        if any(r["sample"] for r in group) and pass_k(group):  # additive: only with more than one sample
            results[-1]["pass_k"] = pass_k(group)
    results.sort(key=lambda r: r["target_model"])
    results.sort(key=lambda r: -1 if r["positive_pass_rate"] is None else r["positive_pass_rate"], reverse=True)
    return results


def typed_by_target(rows: list[dict[str, Any]]) -> dict[str, list[ScoreRow]]:
    """The generated rows (metric id from the scenario id) as typed score rows per target."""
    for row in rows:
        row["metric_id"] = row["id"][:3]
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        grouped[row["target_model"]].append(row)
    return {target: [score_row(r) for r in group] for target, group in grouped.items()}


@given(ROWS)
def test_results_recomputed_from_scores_match(rows: list[dict[str, Any]]) -> None:
    typed = typed_by_target(rows)
    assert [r.model_dump(exclude_unset=True) for r in aggregate(typed)] == reference(rows)  # no calibration


@given(ROWS)
def test_results_file_streamed_is_what_the_models_dump(rows: list[dict[str, Any]]) -> None:
    """results.json written from compact rows with by_scenario streamed: byte for byte the file
    the full models make, and the in-memory rates equal theirs without by_scenario."""
    typed = typed_by_target(rows)
    compact = {target: [r.unit_row() for r in group] for target, group in typed.items()}
    full = aggregate(typed)
    rates = aggregate(compact, by_scenario=False)
    assert [r.model_dump(exclude={"by_scenario"}) for r in rates] == [r.model_dump(exclude={"by_scenario"}) for r in full]
    assert all(r.by_scenario == {} for r in rates)
    with tempfile.TemporaryDirectory() as tmp:
        dump_json(Path(tmp) / "expected.json", [versioned(r.model_dump(mode="json", exclude_unset=True)) for r in full])
        dump_results(Path(tmp) / "results.json", rates, compact)
        assert (Path(tmp) / "results.json").read_bytes() == (Path(tmp) / "expected.json").read_bytes()
