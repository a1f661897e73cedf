"""A stable instance identity, and proof that no other live process uses it.

Delivery leases are owned by an instance id. The id survives restarts (it is derived from
the host name and the configuration, or set with ``instance_id``), so a restarted process
recognises the leases its previous run held and releases them at once
(:func:`service.store.deliveries.release_own`) instead of leaving them to expire.

Releasing is only safe when no *live* process holds the same id (two replicas configured
with one ``instance_id`` by mistake would otherwise release each other's claims mid-send).
:class:`InstanceLock` proves it: a session-level advisory lock on PostgreSQL (held on one
dedicated connection for the life of the process; a killed process's connection closes and
the lock goes with it), an exclusive ``flock`` on a small file beside a SQLite database.

In Kubernetes ``HOSTNAME`` is the pod name: a container restarted in place (kill -9, OOM
kill, failed liveness probe) keeps it, and so does a StatefulSet pod recreated under its
ordinal name. A pod replaced under a new name is a new instance; its predecessor's leases
are taken over by any instance once they expire.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import threading
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, text
from sqlalchemy.engine import Connection, make_url

from service.store.engine import is_memory_sqlite, is_postgres, normalise_url

log = logging.getLogger("vllm_sentinel.store")
MAX_ID = 128  # deliveries.leased_by


def host_name() -> str:
    return (os.environ.get("HOSTNAME") or socket.gethostname() or "localhost").strip()


def default_instance_id(store_url: str, api_host: str = "", api_port: int | str = "") -> str:
    """``<host name>-<8 hex digits>``: the digits hash the store (without credentials) and
    the API address, so two instances on one host (they cannot share an API port) differ,
    and the same instance gets the same id after a restart."""
    try:
        where = make_url(normalise_url(store_url)).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an odd URL still gets a stable id
        where = "?"
    digest = hashlib.sha256(f"{where}|{api_host}:{api_port}".encode()).hexdigest()[:8]
    return f"{host_name()[: MAX_ID - 9]}-{digest}"


class InstanceLock:
    """Exclusive use of ``instance_id`` among live processes sharing the database."""

    def __init__(self, engine: Engine, instance_id: str) -> None:
        self.engine = engine
        self.instance_id = instance_id
        self._lock = threading.Lock()
        self._conn: Connection | None = None
        self._fd: int | None = None
        self.held = False

    def acquire(self) -> bool:
        """Take the lock if free (never waits); True while this process holds it. Called
        again after a database outage, it re-takes a lock the outage dropped."""
        with self._lock:
            if is_postgres(self.engine):
                self.held = self._acquire_pg()
            elif is_memory_sqlite(self.engine):
                self.held = True  # one process by construction
            else:
                self.held = self._acquire_file()
            return self.held

    def release(self) -> None:
        with self._lock:
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    # the session lock goes with the session: end it (not back to the pool)
                    self._conn.invalidate()
                with contextlib.suppress(Exception):
                    self._conn.close()
                self._conn = None
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._fd)  # the flock goes with the descriptor
                self._fd = None
            self.held = False

    # ---- PostgreSQL ------------------------------------------------------------------
    def _acquire_pg(self) -> bool:
        if self._conn is not None:
            try:  # still ours if the session is alive
                self._conn.execute(text("SELECT 1"))
                return True
            except Exception:  # noqa: BLE001 - the outage took the session (and the lock)
                with contextlib.suppress(Exception):
                    self._conn.invalidate()
                    self._conn.close()
                self._conn = None
        conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        try:
            got = bool(
                conn.execute(
                    text("SELECT pg_try_advisory_lock(hashtextextended(:k, 0))"),
                    {"k": f"sentinel-instance:{self.instance_id}"},
                ).scalar()
            )
        except Exception:
            conn.close()
            raise
        if got:
            self._conn = conn
        else:
            conn.close()
        return got

    # ---- SQLite file -----------------------------------------------------------------
    def _acquire_file(self) -> bool:
        if self._fd is not None:
            return True
        import fcntl

        path = lock_path(self.engine, self.instance_id)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._fd = fd
        return True


def lock_path(engine: Any, instance_id: str) -> Path:
    """``<database file>.instance-<hash>.lock``."""
    db = Path(engine.url.database or "sentinel.db")
    digest = hashlib.sha256(instance_id.encode()).hexdigest()[:16]
    return db.with_name(f"{db.name}.instance-{digest}.lock")
