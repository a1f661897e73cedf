"""Stream snapshots carry a version: a replica writes a snapshot only over the version it
loaded (optimistic concurrency for forward/HTTP ingest spread over several replicas).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("streams", sa.Column("version", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("streams") as batch:
        batch.drop_column("version")
