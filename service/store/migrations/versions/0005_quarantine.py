"""Quarantine: records whose classification raised, kept for inspection (their source
position is committed, so a poison record is never re-read forever).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "quarantine",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("source", sa.String(64), nullable=False),
        sa.Column("stream", sa.Text, nullable=False),
        sa.Column("position", sa.Text),
        sa.Column("reason", sa.String(64), nullable=False),
        sa.Column("error", sa.Text, nullable=False),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("length", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
    )
    op.create_index("ix_quarantine_created_at", "quarantine", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_quarantine_created_at", "quarantine")
    op.drop_table("quarantine")
