"""A database that comes back empty (every table dropped; on PostgreSQL the service's schema
dropped and created again) while ``vllm-sentinel serve`` runs: ``/readyz`` re-creates the
schema (the migrations run again) and answers ready without a restart, and the service
stores and pages new incidents again. Real subprocess, SQLite file and PostgreSQL."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from service.store.migrate import head_revision
from tests.api_support import fluentbit_records, json_array, kube
from tests.e2e_support import Db, Sentinel, free_port, service_config, wait_until, webhook
from tests.receiver import Receiver
from tests.test_store import REAL

pytestmark = pytest.mark.integration
KV = REAL / "kv-cache-too-small.cri.log"


@pytest.fixture(params=["sqlite", "postgresql"])
def database(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, Callable[[], None]]]:
    """(url, empty()): ``empty()`` drops every table the way the database would come back."""
    if request.param == "sqlite":
        path = tmp_path / "sentinel.db"

        def drop_all() -> None:
            conn = sqlite3.connect(path, timeout=30, isolation_level=None)
            try:
                conn.execute("PRAGMA foreign_keys=OFF")
                conn.execute("BEGIN IMMEDIATE")
                names = [
                    r[0]
                    for r in conn.execute(
                        "SELECT name FROM sqlite_master WHERE type = 'table' "
                        "AND name NOT LIKE 'sqlite_%'"
                    )
                ]
                for name in names:
                    conn.execute(f'DROP TABLE "{name}"')
                conn.execute("COMMIT")
            finally:
                conn.close()

        yield f"sqlite:///{path}", drop_all
        return
    from tests.test_store import fresh_pg_url, pg_unavailable

    reason = pg_unavailable()
    if reason:
        pytest.skip(reason)
    for url in fresh_pg_url():
        import psycopg

        schema = make_url(url).query["options"].split("=", 1)[1]
        plain = (
            make_url(url)
            .set(query={})
            .set(drivername="postgresql")
            .render_as_string(hide_password=False)
        )

        def recreate(schema: str = schema, plain: str = plain) -> None:
            with psycopg.connect(plain, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA {schema} CASCADE")
                conn.execute(f"CREATE SCHEMA {schema}")

        yield url, recreate


def ingest(svc: Sentinel, pod: str) -> None:
    r = svc.http.post(
        "/ingest",
        content=json_array(fluentbit_records(KV, kube("llm", pod))),
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 200, r.text


def test_readiness_recovers_when_the_database_comes_back_empty(
    database: tuple[str, Callable[[], None]], tmp_path: Path
) -> None:
    url, empty = database
    with Receiver() as rx:
        svc = Sentinel(
            tmp_path,
            "ready",
            service_config(
                store_url=url,
                api_port=free_port(),
                receivers=[webhook(rx.url)],
                notify={"group_wait_s": 0.0},
                use_model=False,
                fleet={"enabled": False},
                stall={"enabled": False},
            ),
        )
        db = Db(url)
        try:
            svc.start().wait_ready()
            ingest(svc, "before")
            assert wait_until(lambda: len(rx.accepted()) == 1, 20, "the first page")

            empty()
            t0 = time.monotonic()
            seen: list[Any] = []

            def ready() -> bool:
                r = svc.http.get("/readyz", timeout=5)
                seen.append(r.status_code)
                return r.status_code == 200

            wait_until(ready, 20, "readiness after the database came back empty", interval=0.2)
            took = time.monotonic() - t0
            body = svc.readiness()
            assert body["ready"] is True
            assert db.scalar("SELECT version_num FROM alembic_version") == head_revision()
            assert db.scalar("SELECT count(*) FROM incidents") == 0  # it came back empty
            print(
                f"ready again {took:.2f}s after the tables were dropped; probes: {seen}; "
                f"checks: {body['checks']}"
            )

            ingest(svc, "after")  # and it works again: stored and paged
            assert wait_until(lambda: len(rx.accepted()) == 2, 20, "the page after")
            (inc,) = svc.incidents()
            assert inc["pod"] == "after"
            assert rx.accepted()[-1].json()["incident"]["pod"] == "after"
        finally:
            svc.close()
            db.close()
            print(f"----- {svc.name} -----\n{svc.log_tail(3000)}")
