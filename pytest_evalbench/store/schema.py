"""The store's tables, as SQLAlchemy Core tables: the one definition of their columns, which recording a
run, reading it back and the view's queries all use (no ORM). The Alembic revisions in
`migrations/versions/` create exactly these (tests/unit/test_store.py compares them)."""

from __future__ import annotations

from sqlalchemy import JSON, Boolean, Column, Float, ForeignKey, Index, Integer, MetaData, String, Table, Text

metadata = MetaData()

runs = Table(
    "runs", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("benchmark", Text, nullable=False),
    Column("kind", String(40), nullable=False),
    Column("created", String(32), nullable=False),
    Column("commit", Text),
    Column("branch", Text),
    Column("base_branch", Text),
    Column("plugin_version", String(40), nullable=False),
    Column("targets", JSON, nullable=False),
    Column("judge", Text),
    Column("identities", JSON, nullable=False),
    Column("verdict", String(40), nullable=False),
    Column("exit_status", Integer, nullable=False),
    Column("reason", Text, nullable=False),
    Column("cost", Float, nullable=False),
    Column("scope", String(20), nullable=False),
    Column("case_count", Integer, nullable=False),
    Index("ix_runs_benchmark_created", "benchmark", "created"),
)
"""One run: one pytest session with `--benchmark` (or one `evalbench merge` of its shards). Text from
outside (names, ids, branches, transcripts) is `Text`: no length a benchmark could exceed, on SQLite
and PostgreSQL alike. `created` is UTC, `2026-12-07T06:10:41Z`: it sorts as text. `targets`: target id ->
model (None for an app target); `identities`: per target what shaped its verdicts (judge, simulated
user, checks, plugin version)."""

cases = Table(
    "cases", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("node_id", Text, nullable=False),
    Column("target", Text, nullable=False),
    Column("metric", Text, nullable=False),
    Column("unit", Text, nullable=False),
    Column("sample", Integer, nullable=False),
    Column("status", String(20), nullable=False),
    Column("passed", Boolean),
    Column("present", Boolean),
    Column("probability", Float),
    Column("agreement", Float),
    Column("decided_by", String(20)),
    Column("justification", Text, nullable=False),
    Column("transcript", JSON),
    Index("ix_cases_run_node", "run_id", "node_id"),
)
"""One case of a run: a pytest item's pass/fail unit (a scenario row x target x metric x sample, or a
dataset case), with what decided it. `unit` is the row's id in its data file (a scenario id, a dataset
case id); `status` the documented status (passed, failed, unscored, error, not run); `passed` the
pass/fail unit the gate pairs (None: unscored); `present` the verdict on the metric (None: undecided);
`probability` the judge's P(present), where it was scored; `agreement` the share of a judge panel's (or
the judge samples') votes equal to the verdict, where several voted."""
