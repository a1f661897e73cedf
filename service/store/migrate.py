"""Versioned schema migrations (Alembic, run in-process at start).

Safe when several instances start at once: on PostgreSQL the upgrade runs in one
transaction holding a transaction-scoped advisory lock (DDL is transactional there, so a
second instance waits, then finds the schema at head); on SQLite the transaction starts
with ``BEGIN IMMEDIATE``, which serialises writers on the database file.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text

from service.store.engine import is_postgres

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
ADVISORY_LOCK_KEY = 0x5E471E1  # "sentinel" schema lock


def _config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def head_revision() -> str | None:
    return ScriptDirectory.from_config(_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest revision (no-op when it is there already)."""
    cfg = _config()
    with engine.connect().execution_options(write=True) as conn, conn.begin():
        if is_postgres(conn):
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": ADVISORY_LOCK_KEY})
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
