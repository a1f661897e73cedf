"""Versioned schema migrations (Alembic, run in-process at start).

Safe when several instances start at once: on PostgreSQL the upgrade runs in one
transaction holding a transaction-scoped advisory lock (DDL is transactional there, so a
second instance waits, then finds the schema at head); on SQLite the transaction starts
with ``BEGIN IMMEDIATE``, which serialises writers on the database file.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, text

from service.store.engine import is_postgres
from service.store.schema import metadata

log = logging.getLogger("vllm_sentinel.store")
MIGRATIONS = Path(__file__).resolve().parent / "migrations"
ADVISORY_LOCK_KEY = 0x5E471E1  # "sentinel" schema lock
SCHEMA_CHECK_S = 5.0  # a missing schema is looked for (and re-created) at most this often


def _config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def head_revision() -> str | None:
    return ScriptDirectory.from_config(_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


class SchemaDamaged(RuntimeError):
    """Some of the service's tables are missing and others are not: not repaired by itself
    (restore the database, or drop what is left so the schema is created afresh)."""


def missing_tables(engine: Engine) -> list[str]:
    """The service's tables that the database does not have (one catalog query)."""
    with engine.connect() as conn:
        have = set(inspect(conn).get_table_names())
    return sorted(set(metadata.tables) - have)


def repair(engine: Engine) -> list[str]:
    """A database that came back empty (dropped and re-created, restored from nothing) gets
    the schema again: every table missing → ``alembic_version`` cleared and the migrations
    run from the start, under the same lock as :func:`upgrade` (instances repairing at once
    do it once). Returns the tables that were missing ([] when none was);
    :class:`SchemaDamaged` when only some are."""
    cfg = _config()
    with engine.connect().execution_options(write=True) as conn, conn.begin():
        if is_postgres(conn):
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": ADVISORY_LOCK_KEY})
        have = set(inspect(conn).get_table_names())
        missing = sorted(set(metadata.tables) - have)
        if not missing:
            return []
        if len(missing) < len(metadata.tables):
            raise SchemaDamaged(f"tables {missing} are missing while the others exist")
        if "alembic_version" in have:
            conn.execute(text("DELETE FROM alembic_version"))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
        return missing


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest revision (no-op when it is there already)."""
    cfg = _config()
    with engine.connect().execution_options(write=True) as conn, conn.begin():
        if is_postgres(conn):
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": ADVISORY_LOCK_KEY})
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


class SchemaRepair:
    """A database that lost the schema gets it again (:func:`repair`), looked for at most
    every ``SCHEMA_CHECK_S`` unless forced; the repair queues on the store's write lock."""

    def __init__(self, engine: Engine, write_lock: AbstractContextManager[Any]) -> None:
        self.engine = engine
        self._write_lock = write_lock
        self._lock = threading.Lock()
        self._checked = float("-inf")

    def ping(self) -> list[str]:
        """Every table there, else repaired now: the tables re-created ([] normally).
        RuntimeError when tables are still missing."""
        if not missing_tables(self.engine):
            return []
        repaired = self.ensure(force=True)
        still = missing_tables(self.engine)
        if still:
            raise RuntimeError(f"store tables missing: {', '.join(still)}")
        return repaired

    def ensure(self, force: bool = False) -> list[str]:
        """The tables re-created ([] when none was missing, or looked for too recently)."""
        with self._lock:
            if not force and time.monotonic() - self._checked < SCHEMA_CHECK_S:
                return []
            self._checked = time.monotonic()
            if not missing_tables(self.engine):
                return []
            with self._write_lock:
                repaired = repair(self.engine)
            if repaired:
                log.warning(
                    "store: the database had lost the schema (%s); re-created it at "
                    "the newest revision",
                    ", ".join(repaired),
                )
            return repaired
