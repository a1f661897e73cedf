"""The store's connection handling every part of :class:`~service.store.Store` shares: the
engine, the write and read transactions, migrations and schema repair."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from service import metrics
from service.store.engine import is_memory_sqlite, is_postgres, make_engine
from service.store.migrate import SchemaRepair, upgrade


class StoreBase:
    """Thread-safe; every method is one short transaction.

    ``incident_retention_days`` / ``stream_retention_days`` (0: keep forever) are applied
    by :meth:`prune` at most every ``retention_interval_s`` (see :mod:`retention`)."""

    def __init__(
        self,
        url: str,
        pool_size: int = 5,
        clock: Callable[[], float] = time.time,
        *,
        incident_retention_days: float = 0.0,
        stream_retention_days: float = 0.0,
        retention_interval_s: float = 600.0,
    ) -> None:
        self.url = url
        self.engine = make_engine(url, pool_size)
        self.clock = clock
        self.incident_retention_days = incident_retention_days
        self.stream_retention_days = stream_retention_days
        self.retention_interval_s = retention_interval_s
        self._retained_at = float("-inf")
        # SQLite has one writer at a time: queue this process's writers on a lock rather
        # than in SQLite's sleeping busy handler (other processes still use busy_timeout)
        self._write_lock: AbstractContextManager[Any] = (
            nullcontext() if self.is_postgres else threading.Lock()
        )
        # an in-memory SQLite database is one shared connection: readers queue too
        self._read_lock: AbstractContextManager[Any] = (
            self._write_lock if is_memory_sqlite(self.engine) else nullcontext()
        )
        self._schema = SchemaRepair(self.engine, self._write_lock)

    @property
    def is_postgres(self) -> bool:
        return is_postgres(self.engine)

    # ---- lifecycle -------------------------------------------------------------------
    def migrate(self) -> None:
        upgrade(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    def ping(self) -> list[str]:
        """Readiness: the database answers and has every table. A database that came back
        empty gets its schema again (:meth:`ensure_schema`); returns the tables re-created
        ([] normally). Raises when the database cannot be reached, or tables are still
        missing (:class:`~service.store.migrate.SchemaDamaged`, or re-created by another
        instance a moment ago and checked again at the next probe)."""
        return self._schema.ping()

    def ensure_schema(self, force: bool = False) -> list[str]:
        """Re-create the schema if the database lost it (every table missing: migrations run
        from the start). Returns the tables re-created. Looks at most every
        ``SCHEMA_CHECK_S`` unless ``force``."""
        return self._schema.ensure(force)

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        try:
            with (
                self._write_lock,
                self.engine.connect().execution_options(write=True) as conn,
                conn.begin(),
            ):
                yield conn
        except SQLAlchemyError:
            metrics.STORE_ERRORS.labels(op="write").inc()
            raise

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        try:
            with self._read_lock, self.engine.connect() as conn, conn.begin():
                yield conn
        except SQLAlchemyError:
            metrics.STORE_ERRORS.labels(op="read").inc()
            raise
