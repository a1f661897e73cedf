"""Workloads and novelty templates saved with the stream snapshots: what the pods of one
workload share (the facts of its last good start, its open failures per node, so a
replacement pod continues its predecessor's incident after a restart of the service or on
another replica) and the novelty miner's templates.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "workloads",
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("state", Json, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
    )
    op.create_index("ix_workloads_updated_at", "workloads", ["updated_at"])
    op.create_table(
        "novelty",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("state", Json, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("novelty")
    op.drop_index("ix_workloads_updated_at", "workloads")
    op.drop_table("workloads")
