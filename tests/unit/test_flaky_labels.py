"""Flaky cases and pass^k / pass@k against hand-computed values (scenarios/flaky.py)."""

from __future__ import annotations

from typing import Any

from helpers import score_row

from pytest_evalbench.kinds.scenarios.aggregate import case_noise, label_rows, pass_k, summarize_model


def sample(passed: bool | None, *votes: bool | None) -> dict[str, Any]:
    return {"passed": passed, "judges": [{"judge": "j", "sample": i, "value": v, "text": ""} for i, v in enumerate(votes)]
            or None}


def test_not_flaky_when_samples_agree_and_votes_agree() -> None:
    noise = case_noise([sample(True, True, True, True)] * 3)
    assert noise.label is None
    assert noise.detail == "agent: 3/3 samples passed; judge: 0 of 3 transcripts split"


def test_judge_noise_one_transcript_split_two_one() -> None:
    noise = case_noise([sample(True, True, True, False), sample(True, True, True, True), sample(True, True, True, True)])
    assert (noise.label, noise.detail) == ("judge", "agent: 3/3 samples passed; judge: 1 of 3 transcripts split 2-1")


def test_agent_noise_majorities_differ_without_split_votes() -> None:
    noise = case_noise([sample(True, True, True), sample(False, False, False), sample(True, True, True)])
    assert (noise.label, noise.detail) == ("agent", "agent: 2/3 samples passed; judge: 0 of 3 transcripts split")


def test_both_and_a_tie_is_a_split_that_leaves_the_sample_unscored() -> None:
    noise = case_noise([sample(True, True, True, False), sample(False, False, False, False),
                        sample(None, True, False)])
    assert noise.label == "both"
    assert noise.detail == "agent: 1/2 samples passed (1 unscored); judge: 2 of 3 transcripts split 2-1, 1-1"


def test_unusable_votes_are_ignored_and_one_usable_vote_cannot_split() -> None:
    noise = case_noise([sample(True, True, None, None), sample(True, True, True, None)])
    assert noise.label is None
    assert noise.detail == "agent: 2/2 samples passed; judge: 0 of 1 transcript split"


def test_single_judge_vote_agent_noise_only() -> None:
    assert case_noise([sample(True), sample(False)]) == case_noise([{"passed": True}, {"passed": False}])
    assert case_noise([{"passed": True}, {"passed": False}]).detail == "agent: 1/2 samples passed"


def test_label_rows_labels_every_sample_of_a_flaky_case_and_clears_stale_labels() -> None:
    rows = [{"id": "a", "sample": 0, "passed": True}, {"id": "a", "sample": 1, "passed": False},
            {"id": "b", "sample": 0, "passed": True, "flaky": "agent", "flaky_detail": "old"},
            {"id": "b", "sample": 1, "passed": True}]
    out = list(label_rows(rows))
    assert [r.get("flaky") for r in out] == ["agent", "agent", None, None]
    assert "flaky_detail" not in out[2]


def rows(target: str, metric: str, cases: dict[str, list[bool | None]]) -> list[Any]:
    return [score_row({"id": cid, "metric_id": metric, "target_model": target, "sample": i, "passed": p})
            for cid, outcomes in cases.items() for i, p in enumerate(outcomes)]


def test_pass_hat_k_and_pass_at_k_hand_computed() -> None:
    # m01: 4 cases of k=3; all pass / one pass / none / two pass -> pass^3 = 1/4, pass@3 = 3/4.
    # m02: k=2; one case with an unscored sample is excluded -> over 2 cases: pass^2 = 1/2, pass@2 = 1/2.
    data = rows("t", "m01", {"c1": [True, True, True], "c2": [False, True, False], "c3": [False, False, False],
                             "c4": [True, False, True]}) \
        + rows("t", "m02", {"d1": [True, True], "d2": [False, False], "d3": [True, None]})
    got = {m: v.model_dump() for m, v in pass_k(data).items()}
    assert got == {"m01": {"k": 3, "n_cases": 4, "n_excluded": 0, "pass_hat_k": 0.25, "pass_at_k": 0.75},
                   "m02": {"k": 2, "n_cases": 2, "n_excluded": 1, "pass_hat_k": 0.5, "pass_at_k": 0.5}}
    assert summarize_model("t", data).pass_k == pass_k(data)


def test_pass_k_absent_with_one_sample_per_case() -> None:
    data = rows("t", "m01", {"c1": [True], "c2": [False]})
    assert pass_k(data) == {}
    assert summarize_model("t", data).pass_k is None
    assert "pass_k" not in summarize_model("t", data).model_dump(exclude_none=True)
