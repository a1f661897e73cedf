"""Dialect-specific INSERT (ON CONFLICT) for SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection


def insert(conn: Connection, table: Table) -> Any:
    """``INSERT`` supporting ``on_conflict_do_update`` / ``on_conflict_do_nothing``."""
    if conn.dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


def skip_locked(conn: Connection) -> dict[str, Any]:
    """``with_for_update`` arguments: ``FOR UPDATE SKIP LOCKED`` on PostgreSQL; SQLite has
    no row locks (its ``BEGIN IMMEDIATE`` write transactions are serialised)."""
    return {"skip_locked": True} if conn.dialect.name == "postgresql" else {}
