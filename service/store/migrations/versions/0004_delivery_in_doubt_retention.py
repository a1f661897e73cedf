"""Deliveries remember that their request went out (``sending_at``: a crash or a lost
database between the request and recording its answer leaves the delivery *in doubt*, so
it is sent again with the same idempotency key rather than at random); indexes for the
retention prune (resolved incidents by age, streams by last write).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("deliveries", sa.Column("sending_at", sa.Double))
    op.create_index("ix_deliveries_leased_by", "deliveries", ["leased_by"])
    op.create_index("ix_incidents_status_resolved_at", "incidents", ["status", "resolved_at"])
    op.create_index("ix_streams_updated_at", "streams", ["updated_at"])


def downgrade() -> None:
    op.drop_index("ix_streams_updated_at", "streams")
    op.drop_index("ix_incidents_status_resolved_at", "incidents")
    op.drop_index("ix_deliveries_leased_by", "deliveries")
    with op.batch_alter_table("deliveries") as batch:
        batch.drop_column("sending_at")
