"""The finish pass of a large run does each piece of work once: earlier rows this session replaces
are not validated again (only what is kept is), and the summary reads the conversations (a pass
over a large file) once for both transcripts and demographics."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from helpers import demographic_groups
from test_records import scenario_record

from pytest_evalbench.base.errors import EvalbenchWarning
from pytest_evalbench.base.files import versioned
from pytest_evalbench.gate.decision import GateDecision, gate_verdict
from pytest_evalbench.kinds.protocol import KindResults
from pytest_evalbench.kinds.scenarios.store import write_results
from pytest_evalbench.llm.engine import EngineStats
from pytest_evalbench.render.rates import Demographics
from pytest_evalbench.render.summary import build_summary

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


class OnePass:
    """Rows that can be iterated once (as the conversations of a large run, read from disk, cost a pass each)."""

    def __init__(self, rows: list[Any]) -> None:
        self.rows, self.used = rows, False

    def __iter__(self) -> Iterator[Any]:
        assert not self.used, "iterated twice"
        self.used = True
        return iter(self.rows)


def test_the_summary_reads_the_conversations_once_for_transcripts_and_demographics(tmp_path: Path) -> None:
    ages = ["teen", "adult", "teen", "adult"]
    records = [scenario_record(f"m01_s00{i}_v01", demographic={"age": age}) for i, age in enumerate(ages, 1)]
    for record, passed in zip(records, (True, False, True, True)):
        record.score.present = record.score.passed = passed
    scores = [r.score for r in records]
    conversations = [r.conversation for r in records]
    noted = Demographics()
    assert list(noted.tap(conversations)) == conversations
    expected = demographic_groups(scores, noted)
    assert [(v, est.k, est.n) for v, est in expected[0].values] == [("adult", 1, 2), ("teen", 2, 2)]
    written = KindResults(results=[], scores=scores, conversations=OnePass(conversations))
    summary = build_summary(kind="scenarios", written=written, gate=gate_verdict(GateDecision(), 0, 1, {}),
                            meta={"benchmark": "b"}, stats=EngineStats(), errors={}, recorded=4, failed=1,
                            commit=None, files=[])
    assert summary.scenario is not None
    assert summary.scenario.demographics == expected
    assert summary.scenario.transcripts_total == 4 and len(summary.scenario.transcripts) == 4


def test_run_files_are_json_dumps_text_of_the_rows(tmp_path: Path) -> None:
    """Conversations are spooled as their final text: the files are still json.dumps's text of the rows."""
    records = [scenario_record(sid, demographic={"note": "é\n\"x\""}) for sid in ORDER]
    write_results(tmp_path, records, ORDER)
    run = tmp_path / "runs" / "tgt"
    for name, rows in (("conversations.json", [versioned(r.conversation.to_json()) for r in records]),
                       ("scores.json", [versioned(r.score.to_json()) for r in records])):
        assert (run / name).read_text(encoding="utf-8") == json.dumps(rows, indent=2, ensure_ascii=False) + "\n"


class Counted:
    """Rows that count their passes (each a read of the run's scores.json from disk)."""

    def __init__(self, rows: list[Any]) -> None:
        self.rows, self.passes = rows, 0

    def __iter__(self) -> Iterator[Any]:
        self.passes += 1
        return iter(self.rows)


def test_the_summary_reads_the_scores_twice_for_rates_transcripts_and_demographics(tmp_path: Path) -> None:
    """Rates, transcripts and demographics share the transcripts' two passes over the scores: the
    same views as each making its own passes (four)."""
    from helpers import scenario_rates

    ages = ["teen", "adult", "teen", "adult"]
    records = [scenario_record(f"m01_s00{i}_v01", demographic={"age": age}) for i, age in enumerate(ages, 1)]
    for record, passed in zip(records, (True, False, None, True)):
        record.score.present = record.score.passed = passed
    scores = Counted([r.score for r in records])
    written = KindResults(results=[], scores=scores, conversations=OnePass([r.conversation for r in records]))
    summary = build_summary(kind="scenarios", written=written, gate=gate_verdict(GateDecision(), 0, 1, {}),
                            meta={"benchmark": "b"}, stats=EngineStats(), errors={}, recorded=4, failed=1,
                            commit=None, files=[])
    assert scores.passes == 2
    noted = Demographics()
    list(noted.tap([r.conversation for r in records]))
    assert summary.scenario is not None
    assert summary.scenario.demographics == demographic_groups(scores.rows, noted)
    assert summary.rates == scenario_rates(KindResults(results=[], scores=scores.rows), None)
    assert [v.judgments for v in summary.scenario.transcripts] == [[r.score] for r in records]
    assert [(r.metric, r.k, r.n, r.unscored) for r in summary.rates][-1] == ("m01", 2, 3, 1)


def test_results_json_is_computed_without_reading_the_written_scores_back(tmp_path: Path, monkeypatch: Any) -> None:
    """The targets this session writes give results.json their units as scores.json is written; a
    target it did not touch (another tool's run, impactbench's spelling) is still read from disk,
    and the outcome is what reading every file back gives: same units, same results.json bytes."""
    from pytest_evalbench.kinds.scenarios.aggregate import aggregate
    from pytest_evalbench.kinds.scenarios.store import RunScores, dump_results

    earlier_run(tmp_path, broken="")  # three rows on disk; this session replaces one of them
    other = tmp_path / "runs" / "other"
    other.mkdir()
    foreign = {k: v for k, v in scenario_record("m01_s001_v03").score.to_json().items()
               if k not in ("score", "passed", "conv_id", "sample", "target_model")}
    (other / "scores.json").write_text(json.dumps([{**foreign, "_sample": 0}]))
    read: list[str] = []
    real_open = os.open

    def opened(path: Any, flags: int, *args: Any, **kwargs: Any) -> Any:
        name = Path(path)
        if name.name == "scores.json" and not flags & (os.O_WRONLY | os.O_RDWR):
            read.append(f"{name.parent.name}/{name.name}")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", opened)
    record = scenario_record("m01_s001_v02")
    record.score.present = record.score.passed = False
    _, _, _, outcomes = write_results(tmp_path, [record], ORDER)
    # other's is read to see whether it holds stale rows, and for results.json; tgt's once, for the
    # rows it keeps: written, it is never read back
    assert read == ["other/scores.json", "tgt/scores.json", "other/scores.json"]
    monkeypatch.undo()
    assert outcomes == RunScores(tmp_path).unit_rows() and len(outcomes["other"]) == 1
    assert [(r.id, r.passed) for r in outcomes["tgt"]] == [("m01_s001_v01", True), ("m01_s001_v02", False),
                                                           ("m01_s001_v03", True)]
    dump_results(tmp_path / "expected.json", aggregate(outcomes, by_scenario=False), RunScores(tmp_path).unit_rows())
    assert (tmp_path / "results.json").read_bytes() == (tmp_path / "expected.json").read_bytes()


def test_records_given_as_json_are_written_without_validating_them(tmp_path: Path, monkeypatch: Any) -> None:
    """This session's spooled records reach the store as JSON (they were valid when spooled): no
    model is validated or dumped for them, and the files are those the typed records write."""
    from pytest_evalbench.kinds.scenarios.models import ConversationRow, ScoreRow

    records = [scenario_record(sid, panel=True) for sid in ORDER]
    write_results(tmp_path / "typed", records, ORDER)
    data = [json.loads(json.dumps(r.to_json())) for r in records]

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a spooled record was validated or dumped again")

    for model in (ConversationRow, ScoreRow):
        monkeypatch.setattr(model, "model_validate", refused)
        monkeypatch.setattr(model, "to_json", refused)
    write_results(tmp_path / "json", data, ORDER)
    for name in ("conversations.json", "scores.json", "cost.json", ".usage.json"):
        assert (tmp_path / "json" / "runs" / "tgt" / name).read_bytes() == \
            (tmp_path / "typed" / "runs" / "tgt" / name).read_bytes()
    assert (tmp_path / "json" / "results.json").read_bytes() == (tmp_path / "typed" / "results.json").read_bytes()


def test_target_runs_this_finish_wrote_are_read_back_without_normalising(tmp_path: Path, monkeypatch: Any) -> None:
    """The reports' passes over the files this finish wrote validate their rows as written (they were
    normalised and valid then), and get what the usual normalising read gives; a row changed since
    (impactbench's `_sample` spelling here) sends the rest of its file the usual way."""
    import pytest_evalbench.kinds.scenarios.run_rows as run_rows
    from pytest_evalbench.kinds.scenarios.store import RunConversations, RunScores

    earlier_run(tmp_path, broken="")
    _, _, scores, _ = write_results(tmp_path, [scenario_record("m01_s001_v02", region="EU")], ORDER)
    assert scores.fresh == {"tgt"}
    usual = list(RunScores(tmp_path)), list(RunConversations(tmp_path))
    real = run_rows.normalise_score, run_rows.normalise_conversation

    def refused(*args: Any) -> Any:
        raise AssertionError("a row this finish wrote was normalised again")

    monkeypatch.setattr(run_rows, "normalise_score", refused)
    monkeypatch.setattr(run_rows, "normalise_conversation", refused)
    fresh = list(RunScores(tmp_path, fresh=scores.fresh)), list(RunConversations(tmp_path, fresh=scores.fresh))
    assert fresh == usual and [r.id for r in fresh[0]] == list(ORDER)
    monkeypatch.setattr(run_rows, "normalise_score", real[0])
    monkeypatch.setattr(run_rows, "normalise_conversation", real[1])
    path = tmp_path / "runs" / "tgt" / "scores.json"
    rows = json.loads(path.read_text())
    rows[1]["_sample"] = rows[1].pop("sample")  # as another tool spells it: normalised, still usable
    path.write_text(json.dumps(rows))
    assert list(RunScores(tmp_path, fresh=scores.fresh)) == list(RunScores(tmp_path)) == usual[0]


def test_the_report_validates_only_the_conversations_it_shows(tmp_path: Path, monkeypatch: Any) -> None:
    """The pass over every conversation of a target run this finish wrote reads key and demographic as
    written; a shown conversation is validated (and is the model the usual read gives), and the
    summary is the one the usual read builds."""
    from pytest_evalbench.kinds.scenarios.models import ConversationRow
    from pytest_evalbench.kinds.scenarios.run_rows import WrittenConversation
    from pytest_evalbench.kinds.scenarios.store import RunConversations, RunScores
    from pytest_evalbench.render.views import transcripts

    ages = ["teen", "adult", "teen"]
    records = [scenario_record(sid, demographic={"age": age}) for sid, age in zip(ORDER, ages)]
    records[1].score.present = records[1].score.passed = False
    _, _, scores, _ = write_results(tmp_path, records, ORDER)
    conversations = RunConversations(tmp_path, fresh=scores.fresh)
    assert all(isinstance(c, WrittenConversation) for c in conversations.as_written())
    validated: list[Any] = []
    real = ConversationRow.model_validate.__func__  # type: ignore[attr-defined]

    def counted(cls: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        validated.append(value["id"])
        return real(cls, value, *args, **kwargs)

    monkeypatch.setattr(ConversationRow, "model_validate", classmethod(counted))
    shown, total = transcripts(RunScores(tmp_path), conversations.as_written(), limit=1)
    assert validated == ["m01_s001_v02"] and total == 3  # the failed one, shown first
    assert [v.conversation for v in shown] == [c for c in RunConversations(tmp_path) if c.id == "m01_s001_v02"]

    def summary(conversations: Any) -> Any:
        written = KindResults(results=[], scores=RunScores(tmp_path), conversations=conversations)
        return build_summary(kind="scenarios", written=written, gate=gate_verdict(GateDecision(), 0, 1, {}),
                             meta={"benchmark": "b"}, stats=EngineStats(), errors={}, recorded=3, failed=1,
                             commit=None, files=[]).scenario

    assert summary(conversations) == summary(list(RunConversations(tmp_path)))


def test_one_audited_conversation_is_counted_as_a_number() -> None:
    """Counter.update on an empty counter stores the values as given: one flagged conversation once
    printed `True ended before the planned turns`."""
    from pytest_evalbench.kinds.scenarios.kind import RecordTally
    from pytest_evalbench.kinds.scenarios.runner import audit_line

    record = scenario_record("m01_s001_v01").to_json()
    record["conversation"]["user_audit"] = {"ended_early": True, "stated_objective": [], "broke_character": [2]}
    tally = RecordTally({})
    assert list(tally.counted([record])) == [record]
    assert tally.audit_counts() == {"ended_early": 1, "stated_objective": 0, "broke_character": 1}
    assert [type(n) for n in tally.audit_counts().values()] == [int, int, int]
    line = audit_line(tally.audit_counts(), 1)
    assert line is not None and "1 ended before the planned turns, 0 stated" in line


def test_the_judgments_pass_validates_only_the_shown_conversations_rows(tmp_path: Path,
                                                                         monkeypatch: Any) -> None:
    """Without a demographic to count, the summary's second pass over a run's scores (the judgments of
    the transcripts it shows, 2,000 at most) validates only those conversations' rows; the views are
    the same as from every row."""
    from pytest_evalbench.kinds.scenarios.models import ScoreRow
    from pytest_evalbench.kinds.scenarios.run_rows import RunConversations, RunScores

    records = [scenario_record(sid, demographic={}) for sid in ORDER]
    records[1].score.present = records[1].score.passed = False
    write_results(tmp_path, records, ORDER)
    validated: list[str] = []
    real = ScoreRow.model_validate.__func__  # type: ignore[attr-defined]

    def counted(cls: type[ScoreRow], data: Any, **kwargs: Any) -> ScoreRow:
        validated.append(data["id"])
        return real(cls, data, **kwargs)

    monkeypatch.setattr(ScoreRow, "model_validate", classmethod(counted))
    rows = list(RunScores(tmp_path, fresh={"tgt"}).of_conversations({("m01_s001_v02__tgt", 0)}))
    assert [r.id for r in rows] == validated == ["m01_s001_v02"]
    assert rows[0].passed is False

    def summary(scores: Any, conversations: Any) -> Any:
        return build_summary(kind="scenarios", written=KindResults(results=[], scores=scores, conversations=conversations),
                             gate=gate_verdict(GateDecision(), 0, 1, {}), meta={"benchmark": "b"}, stats=EngineStats(),
                             errors={}, recorded=3, failed=1, commit=None, files=[])

    from pytest_evalbench.render import views

    monkeypatch.setattr(views.transcripts, "__defaults__", (1, None, None))  # one transcript shown: the failed one
    validated.clear()
    from_disk = summary(RunScores(tmp_path, fresh={"tgt"}), RunConversations(tmp_path, fresh={"tgt"}))
    assert validated == [*ORDER, "m01_s001_v02"]  # the statuses' pass reads every row, the judgments' pass one
    in_memory = summary(Counted([r.score for r in records]), [r.conversation for r in records])
    assert from_disk.scenario is not None and in_memory.scenario is not None
    assert [v.judgments for v in from_disk.scenario.transcripts] == [v.judgments for v in in_memory.scenario.transcripts]
    assert from_disk.rates == in_memory.rates


def test_an_earlier_runs_conversations_are_not_read_when_every_row_is_replaced(tmp_path: Path, monkeypatch: Any) -> None:
    """A session that re-ran every configured row keeps no earlier conversation or usage row: those
    files are not parsed, yet what is written is what merging them would write; a session that
    leaves one row out reads them and keeps that row as it was."""
    import pytest_evalbench.kinds.scenarios.store as store

    def runs(bench: Path) -> dict[str, str]:
        return {p.name: p.read_text() for p in sorted((bench / "runs" / "tgt").iterdir())}

    merged, skipped = tmp_path / "merged", tmp_path / "skipped"
    for bench in (merged, skipped):
        earlier_run(bench, broken="")
    write_results(merged, [scenario_record(sid) for sid in ORDER], ORDER)  # samples unknown: the files are read
    read: list[str] = []
    monkeypatch.setattr(store, "read_file_rows", lambda *a, **k: read.append("conversations") or [])
    monkeypatch.setattr(store, "read_usage", lambda *a, **k: read.append("usage") or {})
    write_results(skipped, [scenario_record(sid) for sid in ORDER], ORDER, samples=1)
    assert read == [] and runs(skipped) == runs(merged)
    monkeypatch.undo()

    partial = tmp_path / "partial"
    earlier_run(partial, broken="")
    before = json.loads((partial / "runs" / "tgt" / "conversations.json").read_text())
    write_results(partial, [scenario_record(sid) for sid in list(ORDER)[:2]], ORDER, samples=1)
    after = json.loads((partial / "runs" / "tgt" / "conversations.json").read_text())
    assert [r["id"] for r in after] == list(ORDER) and after[2] == before[2]
