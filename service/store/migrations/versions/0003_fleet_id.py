"""Fleet membership: an incident names the fleet incident that groups it (and pages for it).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("incidents", sa.Column("fleet_id", sa.String(64)))
    op.create_index("ix_incidents_fleet_id", "incidents", ["fleet_id"])


def downgrade() -> None:
    op.drop_index("ix_incidents_fleet_id", "incidents")
    with op.batch_alter_table("incidents") as batch:
        batch.drop_column("fleet_id")
