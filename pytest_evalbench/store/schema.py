"""The store's tables as SQLAlchemy declarative models; the Alembic revisions in `migrations/versions/`
create exactly these (tests/unit/test_store.py compares them)."""

from __future__ import annotations

from typing import Any, Optional

from sqlalchemy import JSON, Boolean, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    """The store's tables. Text from outside (names, ids, branches, transcripts) is `Text`: no length a
    benchmark could exceed, on SQLite and PostgreSQL alike."""


class RunRow(Base):
    """One run: one pytest session with `--benchmark` (or one `evalbench merge` of its shards)."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    benchmark: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(String(40))
    created: Mapped[str] = mapped_column(String(32))
    """UTC, `2026-12-07T06:10:41Z`: sorts as text."""
    commit: Mapped[Optional[str]] = mapped_column(Text)
    branch: Mapped[Optional[str]] = mapped_column(Text)
    base_branch: Mapped[Optional[str]] = mapped_column(Text)
    plugin_version: Mapped[str] = mapped_column(String(40))
    targets: Mapped[dict[str, Any]] = mapped_column(JSON)
    """Target id -> model (None for an app target)."""
    judge: Mapped[Optional[str]] = mapped_column(Text)
    identities: Mapped[dict[str, Any]] = mapped_column(JSON)
    """Per target what shaped its verdicts (judge, simulated user, checks, plugin version)."""
    verdict: Mapped[str] = mapped_column(String(40))
    exit_status: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str] = mapped_column(Text)
    cost: Mapped[float] = mapped_column(Float)
    scope: Mapped[str] = mapped_column(String(20))
    case_count: Mapped[int] = mapped_column(Integer)

    cases: Mapped[list[ItemRow]] = relationship(back_populates="run", cascade="all, delete-orphan",
                                                order_by="ItemRow.id")

    __table_args__ = (Index("ix_runs_benchmark_created", "benchmark", "created"),)


class ItemRow(Base):
    """One case of a run: a pytest item's pass/fail unit (a scenario row x target x metric x sample, or a
    dataset case), with what decided it."""

    __tablename__ = "cases"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    node_id: Mapped[str] = mapped_column(Text)
    target: Mapped[str] = mapped_column(Text)
    metric: Mapped[str] = mapped_column(Text)
    unit: Mapped[str] = mapped_column(Text)
    """The row's id in its data file (a scenario id, a dataset case id)."""
    sample: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(20))
    """The documented status: passed, failed, unscored, error, not run."""
    passed: Mapped[Optional[bool]] = mapped_column(Boolean)
    """The pass/fail unit the gate pairs; None: unscored."""
    present: Mapped[Optional[bool]] = mapped_column(Boolean)
    """The verdict on the metric: present, absent, None (undecided; dataset cases)."""
    probability: Mapped[Optional[float]] = mapped_column(Float)
    """The judge's P(present), where it was scored."""
    agreement: Mapped[Optional[float]] = mapped_column(Float)
    """The share of a judge panel's (or the judge samples') votes equal to the verdict, where several voted."""
    decided_by: Mapped[Optional[str]] = mapped_column(String(20))
    justification: Mapped[str] = mapped_column(Text)
    transcript: Mapped[Optional[list[Any]]] = mapped_column(JSON)

    run: Mapped[RunRow] = relationship(back_populates="cases")

    __table_args__ = (Index("ix_cases_run_node", "run_id", "node_id"),)
