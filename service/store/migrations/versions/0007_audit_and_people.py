"""People and search: the append-only ``audit`` table (who did what, when), who acknowledged
an incident and who it is assigned to (columns the pipeline never writes), and the lower-cased
``search`` text of every incident (``GET /incidents?q=``), filled in for the incidents already
stored.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

from service.store.search import search_text

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(JSONB(), "postgresql")
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
BACKFILL_BATCH = 500


def upgrade() -> None:
    op.create_table(
        "audit",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column("at", sa.Double, nullable=False),
        sa.Column("actor", sa.Text, nullable=False),
        sa.Column("via", sa.String(16), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("target_kind", sa.String(16), nullable=False),
        sa.Column("target_id", sa.String(64), nullable=False),
        sa.Column("detail", Json, nullable=False),
    )
    op.create_index("ix_audit_at", "audit", ["at"])
    op.create_index("ix_audit_target_kind_target_id", "audit", ["target_kind", "target_id"])
    with op.batch_alter_table("incidents") as batch:
        batch.add_column(sa.Column("acked_at", sa.Double))
        batch.add_column(sa.Column("acked_by", sa.Text))
        batch.add_column(sa.Column("acked_via", sa.String(16)))
        batch.add_column(sa.Column("assignee", sa.Text))
        batch.add_column(sa.Column("search", sa.Text))
    _backfill_search()


def _backfill_search() -> None:
    conn = op.get_bind()
    t = sa.table("incidents", sa.column("id", sa.String), sa.column("body", Json))
    s = sa.table("incidents", sa.column("id", sa.String), sa.column("search", sa.Text))
    last = ""
    while True:
        rows = conn.execute(
            sa.select(t.c.id, t.c.body).where(t.c.id > last).order_by(t.c.id).limit(BACKFILL_BATCH)
        ).all()
        if not rows:
            return
        for row in rows:  # (a body is never NULL)
            conn.execute(sa.update(s).where(s.c.id == row.id).values(search=search_text(row.body)))
        last = rows[-1].id


def downgrade() -> None:
    with op.batch_alter_table("incidents") as batch:
        for name in ("search", "assignee", "acked_via", "acked_by", "acked_at"):
            batch.drop_column(name)
    op.drop_index("ix_audit_target_kind_target_id", "audit")
    op.drop_index("ix_audit_at", "audit")
    op.drop_table("audit")
