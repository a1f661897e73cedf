"""Initial schema: streams, incidents, positions, chunks, outbox, deliveries, silences,
feedback.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(JSONB(), "postgresql")
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "streams",
        sa.Column("key", sa.Text, primary_key=True),
        sa.Column("state", Json, nullable=False),
        sa.Column("status", sa.String(16)),
        sa.Column("stage", sa.String(32)),
        sa.Column("updated_at", sa.Double, nullable=False),
    )
    op.create_table(
        "incidents",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("stream", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("tier", sa.String(32), nullable=False),
        sa.Column("category", sa.String(64), nullable=False),
        sa.Column("stage", sa.String(32), nullable=False),
        sa.Column("namespace", sa.Text),
        sa.Column("pod", sa.Text),
        sa.Column("node", sa.Text),
        sa.Column("opened_at", sa.Double, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
        sa.Column("resolved_at", sa.Double),
        sa.Column("changed_at", sa.Double, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("body", Json, nullable=False),
    )
    for col in ("stream", "status", "tier", "category", "namespace"):
        op.create_index(f"ix_incidents_{col}", "incidents", [col])
    op.create_index("ix_incidents_opened_at_id", "incidents", ["opened_at", "id"])
    op.create_table(
        "source_positions",
        sa.Column("source", sa.String(64), primary_key=True),
        sa.Column("partition", sa.Text, primary_key=True),
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
    )
    op.create_table(
        "forward_chunks",
        sa.Column("chunk_id", sa.String(128), primary_key=True),
        sa.Column("seen_at", sa.Double, nullable=False),
    )
    op.create_index("ix_forward_chunks_seen_at", "forward_chunks", ["seen_at"])
    op.create_table(
        "outbox",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column(
            "incident_id",
            sa.String(64),
            sa.ForeignKey(
                "incidents.id", ondelete="CASCADE", name="fk_outbox_incident_id_incidents"
            ),
            nullable=False,
        ),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("expanded_at", sa.Double),
        sa.Column("snapshot", Json, nullable=False),
        sa.UniqueConstraint("incident_id", "version", name="uq_outbox_incident_id_version"),
    )
    op.create_index("ix_outbox_expanded_at_id", "outbox", ["expanded_at", "id"])
    op.create_table(
        "deliveries",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column(
            "event_id",
            Id,
            sa.ForeignKey("outbox.id", ondelete="CASCADE", name="fk_deliveries_event_id_outbox"),
            nullable=False,
        ),
        sa.Column("incident_id", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("receiver", sa.String(128), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_attempt_at", sa.Double, nullable=False),
        sa.Column("last_error", sa.Text),
        sa.Column("leased_by", sa.String(128)),
        sa.Column("lease_until", sa.Double),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("sent_at", sa.Double),
        sa.UniqueConstraint("event_id", "receiver", name="uq_deliveries_event_id_receiver"),
    )
    op.create_index(
        "ix_deliveries_receiver_status_next_attempt_at",
        "deliveries",
        ["receiver", "status", "next_attempt_at"],
    )
    op.create_index(
        "ix_deliveries_incident_id_receiver_status",
        "deliveries",
        ["incident_id", "receiver", "status"],
    )
    op.create_table(
        "silences",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("matchers", Json, nullable=False),
        sa.Column("starts_at", sa.Double, nullable=False),
        sa.Column("ends_at", sa.Double, nullable=False),
        sa.Column("created_by", sa.Text, nullable=False),
        sa.Column("comment", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
    )
    op.create_index("ix_silences_ends_at", "silences", ["ends_at"])
    op.create_table(
        "feedback",
        sa.Column("id", Id, primary_key=True, autoincrement=True),
        sa.Column(
            "incident_id",
            sa.String(64),
            sa.ForeignKey(
                "incidents.id", ondelete="CASCADE", name="fk_feedback_incident_id_incidents"
            ),
            nullable=False,
        ),
        sa.Column("correct", sa.Boolean, nullable=False),
        sa.Column("category", sa.String(64)),
        sa.Column("comment", sa.Text),
        sa.Column("created_at", sa.Double, nullable=False),
    )
    op.create_index("ix_feedback_incident_id", "feedback", ["incident_id"])


def downgrade() -> None:
    for table in (
        "feedback",
        "silences",
        "deliveries",
        "outbox",
        "forward_chunks",
        "source_positions",
        "incidents",
        "streams",
    ):
        op.drop_table(table)
