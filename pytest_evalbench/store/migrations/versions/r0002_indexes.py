"""Indexes for the reads: a benchmark's runs newest first, a run's cases by node id.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_runs_benchmark_created", "runs", ["benchmark", "created"])
    op.create_index("ix_cases_run_node", "cases", ["run_id", "node_id"])


def downgrade() -> None:
    op.drop_index("ix_cases_run_node", table_name="cases")
    op.drop_index("ix_runs_benchmark_created", table_name="runs")
