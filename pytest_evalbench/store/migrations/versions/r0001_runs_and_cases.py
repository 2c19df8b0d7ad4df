"""The runs and their cases.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("benchmark", sa.Text, nullable=False),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("created", sa.String(32), nullable=False),
        sa.Column("commit", sa.Text, nullable=True),
        sa.Column("branch", sa.Text, nullable=True),
        sa.Column("base_branch", sa.Text, nullable=True),
        sa.Column("plugin_version", sa.String(40), nullable=False),
        sa.Column("targets", sa.JSON, nullable=False),
        sa.Column("judge", sa.Text, nullable=True),
        sa.Column("identities", sa.JSON, nullable=False),
        sa.Column("verdict", sa.String(40), nullable=False),
        sa.Column("exit_status", sa.Integer, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("cost", sa.Float, nullable=False),
        sa.Column("scope", sa.String(20), nullable=False),
        sa.Column("case_count", sa.Integer, nullable=False),
    )
    op.create_table(
        "cases",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("node_id", sa.Text, nullable=False),
        sa.Column("target", sa.Text, nullable=False),
        sa.Column("metric", sa.Text, nullable=False),
        sa.Column("unit", sa.Text, nullable=False),
        sa.Column("sample", sa.Integer, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("passed", sa.Boolean, nullable=True),
        sa.Column("present", sa.Boolean, nullable=True),
        sa.Column("probability", sa.Float, nullable=True),
        sa.Column("agreement", sa.Float, nullable=True),
        sa.Column("decided_by", sa.String(20), nullable=True),
        sa.Column("justification", sa.Text, nullable=False),
        sa.Column("transcript", sa.JSON, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("cases")
    op.drop_table("runs")
