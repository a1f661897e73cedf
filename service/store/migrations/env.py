"""Alembic environment: always online, on the connection handed over by the Store."""

from __future__ import annotations

from alembic import context

from service.store.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - only the Store runs migrations
    raise RuntimeError("run migrations through service.store.Store.migrate()")

context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
