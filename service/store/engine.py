"""Database engines: SQLite (WAL, busy timeout, foreign keys) or PostgreSQL (psycopg 3).

SQLite transactions are started explicitly: ``BEGIN IMMEDIATE`` for connections marked
``execution_options(write=True)`` (a writer takes the write lock up front instead of failing
to upgrade a read lock under contention), plain ``BEGIN`` otherwise.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.pool import StaticPool

BUSY_TIMEOUT_MS = 30_000


def normalise_url(url: str) -> str:
    """``postgres://`` and ``postgresql://`` use the psycopg 3 driver."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def is_postgres(engine_or_conn: Engine | Connection) -> bool:
    return engine_or_conn.dialect.name == "postgresql"


def is_memory_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == "sqlite" and engine.url.database in (None, "", ":memory:")


def make_engine(url: str, pool_size: int = 5) -> Engine:
    url = normalise_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(url, parsed.database in (None, "", ":memory:"))
    if parsed.get_backend_name() == "postgresql":
        return create_engine(
            url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True, future=True
        )
    raise ValueError(f"unsupported store url {parsed.render_as_string(hide_password=True)}")


def _sqlite_engine(url: str, memory: bool) -> Engine:
    kwargs: dict[str, Any] = {
        "connect_args": {"check_same_thread": False, "timeout": BUSY_TIMEOUT_MS / 1000}
    }
    if memory:
        kwargs["poolclass"] = StaticPool  # one shared in-memory database
    engine = create_engine(url, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        if not memory:
            _set_wal(cur)
            cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = conn.get_execution_options().get("write")
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def _set_wal(cur: Any) -> None:
    """Switch a file database to WAL. The switch needs the database to itself and ignores
    the busy timeout, so instances opening a new file together retry it."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            if cur.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
