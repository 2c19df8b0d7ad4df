"""The finish pass of a large run does each piece of work once: earlier rows this session replaces
are not validated again (only what is kept is), and what is written is what was merged."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from test_records import scenario_record

from pytest_evalbench.errors import EvalbenchWarning
from pytest_evalbench.file_version import versioned
from pytest_evalbench.scenarios.store import write_results

ORDER = {"m01_s001_v01": 0, "m01_s001_v02": 1, "m01_s001_v03": 2}


def earlier_run(bench: Path, broken: str) -> None:
    """An earlier session's run files of three scenarios, the rows of `broken` unreadable by this version."""
    run = bench / "runs" / "tgt"
    run.mkdir(parents=True)
    conversations, scores = [], []
    for sid in ORDER:
        record = scenario_record(sid)
        conversation, score = versioned(record.conversation.to_json()), versioned(record.score.to_json())
        if sid == broken:
            conversation["transcript"], score["present"] = "not a list", "maybe"
        conversations.append(conversation)
        scores.append(score)
    (run / "conversations.json").write_text(json.dumps(conversations))
    (run / "scores.json").write_text(json.dumps(scores))


def written(bench: Path, sids: list[str]) -> tuple[list[str], list[dict[str, Any]]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        write_results(bench, [scenario_record(sid) for sid in sids], ORDER)
    rows = json.loads((bench / "runs" / "tgt" / "conversations.json").read_text())
    return [str(w.message) for w in caught if issubclass(w.category, EvalbenchWarning)], rows


def test_earlier_rows_this_session_replaces_are_not_validated(tmp_path: Path) -> None:
    earlier_run(tmp_path, broken="m01_s001_v02")
    caught, rows = written(tmp_path, ["m01_s001_v02"])
    assert caught == []  # the broken rows were replaced, never read as rows
    assert [r["id"] for r in rows] == list(ORDER)
    assert rows[1]["transcript"] == scenario_record("m01_s001_v02").conversation.to_json()["transcript"]


def test_earlier_rows_that_stay_are_still_validated(tmp_path: Path) -> None:
    earlier_run(tmp_path, broken="m01_s001_v03")
    caught, rows = written(tmp_path, ["m01_s001_v02"])
    assert len(caught) == 2 and all("1 row unreadable by this version" in c and "row 3" in c for c in caught)
    assert [r["id"] for r in rows] == ["m01_s001_v01", "m01_s001_v02"]  # the unreadable row is dropped
