"""Table definitions used by queries (the migrations in ``migrations/versions`` create them).

Times are epoch seconds (double precision). JSON columns are JSONB on PostgreSQL.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Double,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB

Json = JSON().with_variant(JSONB(), "postgresql")
# SQLite only auto-increments an INTEGER PRIMARY KEY
Id = BigInteger().with_variant(Integer(), "sqlite")

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

streams = Table(
    "streams",
    metadata,
    Column("key", Text, primary_key=True),
    Column("state", Json, nullable=False),  # StreamState.to_dict()
    Column("status", String(16)),
    Column("stage", String(32)),
    Column("updated_at", Double, nullable=False, index=True),  # (retention prune)
    # bumped by every write of the snapshot; writers compare-and-set it (see writes.py)
    Column("version", Integer, nullable=False, server_default="0"),
)

# What the pods of one workload share (WorkloadState.to_dict(): the facts of its last good
# start, its open failures per node), written with the stream snapshots
workloads = Table(
    "workloads",
    metadata,
    Column("key", Text, primary_key=True),  # namespace/workload/container
    Column("state", Json, nullable=False),
    Column("updated_at", Double, nullable=False, index=True),  # (retention prune)
    Column("version", Integer, nullable=False),  # compare-and-set, as for streams
)

# The novelty miner's templates (NoveltyDetector.to_dict()), one row per miner
novelty = Table(
    "novelty",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("state", Json, nullable=False),
    Column("updated_at", Double, nullable=False),
)

incidents = Table(
    "incidents",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("stream", Text, nullable=False, index=True),
    Column("status", String(16), nullable=False, index=True),
    Column("severity", String(16), nullable=False),
    Column("tier", String(32), nullable=False, index=True),
    Column("category", String(64), nullable=False, index=True),
    Column("stage", String(32), nullable=False),
    Column("namespace", Text, index=True),
    Column("pod", Text),
    Column("node", Text),
    Column("opened_at", Double, nullable=False),
    Column("updated_at", Double, nullable=False),
    Column("resolved_at", Double),
    Column("changed_at", Double, nullable=False),  # wall clock of the last notifiable change
    Column("version", Integer, nullable=False),  # bumped on every notifiable change
    Column("body", Json, nullable=False),  # Incident.to_dict()
    # the open fleet incident that groups this one (see service/store/fleets.py)
    Column("fleet_id", String(64), index=True),
    # what people did (the pipeline never writes these; every change is in ``audit`` too)
    Column("acked_at", Double),
    Column("acked_by", Text),
    Column("acked_via", String(16)),
    Column("assignee", Text),
    # lower-cased pod, namespace, node, stream, model, image, category, stage and root-cause
    # line: what ``GET /incidents?q=`` searches (written with every upsert)
    Column("search", Text),
    Index("ix_incidents_opened_at_id", "opened_at", "id"),
    Index("ix_incidents_status_resolved_at", "status", "resolved_at"),  # (retention prune)
)

source_positions = Table(
    "source_positions",
    metadata,
    Column("source", String(64), primary_key=True),
    Column("partition", Text, primary_key=True),
    Column("position", BigInteger, nullable=False),  # highest applied offset
    Column("updated_at", Double, nullable=False),
)

forward_chunks = Table(
    "forward_chunks",
    metadata,
    Column("chunk_id", String(128), primary_key=True),
    Column("seen_at", Double, nullable=False, index=True),
)

outbox = Table(
    "outbox",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column(
        "incident_id", String(64), ForeignKey("incidents.id", ondelete="CASCADE"), nullable=False
    ),
    Column("version", Integer, nullable=False),
    Column("kind", String(16), nullable=False),  # opened | updated | resolved
    Column("created_at", Double, nullable=False),
    Column("expanded_at", Double),  # deliveries created (NULL = waiting for the dispatcher)
    Column("snapshot", Json, nullable=False),  # Incident.summary() at the change
    UniqueConstraint("incident_id", "version"),
    Index("ix_outbox_expanded_at_id", "expanded_at", "id"),
)

deliveries = Table(
    "deliveries",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("event_id", Id, ForeignKey("outbox.id", ondelete="CASCADE"), nullable=False),
    Column("incident_id", String(64), nullable=False),
    Column("version", Integer, nullable=False),
    Column("receiver", String(128), nullable=False),
    Column("status", String(16), nullable=False),  # pending | sent | silenced | inhibited | dropped
    Column("attempts", Integer, nullable=False, default=0),
    Column("next_attempt_at", Double, nullable=False),
    Column("last_error", Text),
    Column("leased_by", String(128), index=True),
    Column("lease_until", Double),
    # the request went out at this time and its answer is not recorded yet: after a crash
    # (or a database lost meanwhile) the delivery is "in doubt" and is sent again with the
    # same idempotency key (see deliveries.py)
    Column("sending_at", Double),
    Column("created_at", Double, nullable=False),
    Column("sent_at", Double),
    UniqueConstraint("event_id", "receiver"),
    Index("ix_deliveries_receiver_status_next_attempt_at", "receiver", "status", "next_attempt_at"),
    Index("ix_deliveries_incident_id_receiver_status", "incident_id", "receiver", "status"),
)

silences = Table(
    "silences",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("matchers", Json, nullable=False),  # {field: [values]}
    Column("starts_at", Double, nullable=False),
    Column("ends_at", Double, nullable=False, index=True),
    Column("created_by", Text, nullable=False),
    Column("comment", Text, nullable=False),
    Column("created_at", Double, nullable=False),
)

feedback = Table(
    "feedback",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column(
        "incident_id",
        String(64),
        ForeignKey("incidents.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    Column("correct", Boolean, nullable=False),
    Column("category", String(64)),
    Column("comment", Text),
    Column("created_at", Double, nullable=False),
)

# Records whose classification raised: stored for inspection, their position still advanced
# (a poison record is never retried forever).
quarantine = Table(
    "quarantine",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("source", String(64), nullable=False),
    Column("stream", Text, nullable=False),
    Column("position", Text),
    Column("reason", String(64), nullable=False),
    Column("error", Text, nullable=False),
    Column("text", Text, nullable=False),  # the first QUARANTINE_TEXT_CAP characters
    Column("length", Integer, nullable=False),  # of the whole record text
    Column("created_at", Double, nullable=False, index=True),
)

# Who did what, append-only: every write a person makes (silences, resolve, feedback, ack,
# assign, notes). Never updated or deleted by the service (retention keeps it; GET /audit).
audit = Table(
    "audit",
    metadata,
    Column("id", Id, primary_key=True, autoincrement=True),
    Column("at", Double, nullable=False, index=True),
    Column("actor", Text, nullable=False),
    Column("via", String(16), nullable=False),  # user | token | proxy | slack | open ...
    Column("action", String(32), nullable=False),
    Column("target_kind", String(16), nullable=False),  # incident | silence
    Column("target_id", String(64), nullable=False),
    Column("detail", Json, nullable=False),
    Index("ix_audit_target_kind_target_id", "target_kind", "target_id"),
)
