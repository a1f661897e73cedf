"""Exactly one notification per change across kill -9 and database outages, with real
processes: ``vllm-sentinel serve`` as a subprocess (SQLite file or PostgreSQL reached through
a TCP proxy the test can cut), a real HTTP receiver (webhook + PagerDuty paths), and a writer
committing incidents into the same database meanwhile (as another replica's pipeline does).

While the load runs the service is killed with SIGKILL twice (once while the receiver holds
one of its requests, once at a random moment) and restarted at once with the same config;
on PostgreSQL its database also goes away for three seconds right after the receiver got a
request (the answer cannot be recorded). Then: every change delivered to both receivers
(nothing lost), no message id accepted twice except the one request that was on the wire
when the process died (resent with the same ``Idempotency-Key`` and marked
``X-Sentinel-Redelivery``: the only case no sender can decide alone), and the claims of the
killed process go out as soon as it is back (not after its lease ran out).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from service.store import Store
from tests.delivery_support import (
    HookReceiver,
    complete,
    duplicates,
    incident_body,
    last_versions,
    message_key,
    write_change,
)
from tests.e2e_support import Db, Sentinel, free_port, service_config, wait_until, webhook
from tests.receiver import Request
from tests.tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration

N_INCIDENTS = 160
OPEN_RATE = 25.0  # incidents opened per second
RESOLVE_AFTER_S = 1.0
OUTAGE_S = 3.0


PATHS = {"oncall": "/hook", "pd": "/pd"}


def doubtful(db: Db) -> set[tuple[str, str]]:
    """(receiver path, incident) of deliveries whose request went out and whose answer was
    not recorded: what was on the wire when the process died."""
    return {
        (PATHS[r["receiver"]], r["incident_id"])
        for r in db.rows(
            "SELECT receiver, incident_id FROM deliveries "
            "WHERE status = 'pending' AND sending_at IS NOT NULL"
        )
    }


@pytest.fixture
def rx() -> Iterator[HookReceiver]:
    with HookReceiver() as r:
        yield r


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """{direct: url for the test, service: url for the service, proxy: TcpProxy | None}"""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'sentinel.db'}"
        yield {"direct": url, "service": url, "proxy": None, "name": "sqlite"}
        return
    from tests.test_store import fresh_pg_url, pg_unavailable

    reason = pg_unavailable()
    if reason:
        pytest.skip(reason)
    for direct in fresh_pg_url():
        u = make_url(direct)
        with TcpProxy(u.host or "127.0.0.1", u.port or 5432) as proxy:
            tag = f"sentinel_e2e_{os.getpid()}_{proxy.port}"
            service = (
                u.set(host="127.0.0.1", port=proxy.port)
                .update_query_dict({"application_name": tag})
                .render_as_string(hide_password=False)
            )
            yield {"direct": direct, "service": service, "proxy": proxy, "name": "postgresql"}


def test_kill9_and_database_outage_under_load_page_each_change_once(
    backend: dict[str, Any], rx: HookReceiver, tmp_path: Path
) -> None:
    direct = Store(backend["direct"])
    direct.migrate()
    db = Db(backend["direct"])
    proxy: TcpProxy | None = backend["proxy"]
    pd = {
        "name": "pd",
        "type": "pagerduty",
        "url": rx.url.replace("/hook", "/pd"),
        "routing_key": "R0UTING",
        "rate_limit_per_minute": 6000,
    }
    hook = webhook(rx.url, rate_limit_per_minute=6000)
    hook.pop("timeout_s")  # the default (5 s): leases of ~45 s, as in production
    svc = Sentinel(
        tmp_path,
        "dup",
        service_config(
            store_url=backend["service"],
            api_port=free_port(),
            receivers=[hook, pd],
            notify={"group_wait_s": 0.2},
            use_model=False,
            fleet={"enabled": False},
            stall={"enabled": False},
        ),
    )
    figures: dict[str, Any] = {"backend": backend["name"]}
    in_flight: list[tuple[str, str]] = []  # message keys on the wire when the process died
    in_doubt: set[tuple[str, str]] = set()  # (path, incident) on the wire at a kill
    actions = {"kill": threading.Event(), "cut": threading.Event()}
    total = 2 * 2 * N_INCIDENTS  # at most: (opened + resolved) x 2 receivers

    def on_request(req: Request) -> None:
        n = len(rx.accepted())
        if not actions["kill"].is_set() and n >= total // 8:
            # kill -9 while this request is on the wire: the receiver has it, the sender
            # never learns the answer
            in_flight.append(message_key(req))
            os.kill(svc.pid, signal.SIGKILL)
            svc.proc.wait(10)
            actions["kill"].set()
        elif (
            proxy is not None
            and actions["kill"].is_set()
            and not actions["cut"].is_set()
            and n >= total // 3
        ):
            # the receiver got it, then the database goes away before the answer is recorded
            proxy.cut(OUTAGE_S)
            figures["cut_key"] = message_key(req)
            actions["cut"].set()

    stop_writing = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            t0 = time.time()
            due: list[tuple[float, int]] = []
            for i in range(N_INCIDENTS):
                now = time.time()
                write_change(direct, incident_body(i, at=now), "opened")
                due.append((now + RESOLVE_AFTER_S, i))
                while due and due[0][0] <= time.time():
                    _, j = due.pop(0)
                    write_change(direct, incident_body(j, status="resolved"), "resolved")
                if stop_writing.is_set():
                    return
                time.sleep(max(0.0, t0 + (i + 1) / OPEN_RATE - time.time()))
            for at, j in due:
                time.sleep(max(0.0, at - time.time()))
                write_change(direct, incident_body(j, status="resolved"), "resolved")
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    rx.on_request = on_request
    svc.start().wait_ready()
    thread = threading.Thread(target=writer, daemon=True)
    try:
        thread.start()
        # 1. kill -9 with a request on the wire; restart at once (as kubelet does)
        assert actions["kill"].wait(60), "the kill never came"
        claimed = [
            r["id"]
            for r in db.rows(
                "SELECT id FROM deliveries WHERE status = 'pending' AND leased_by IS NOT NULL"
            )
        ]
        figures["claims_of_dead_process"] = len(claimed)
        in_doubt |= doubtful(db)
        t0 = time.monotonic()
        svc.start().wait_ready()
        figures["restart_to_ready_s"] = round(time.monotonic() - t0, 2)

        def claims_sent() -> bool:
            if not claimed:
                return True
            rows = db.rows(
                "SELECT status FROM deliveries WHERE id IN ("
                + ",".join(str(i) for i in claimed)
                + ")"
            )
            return all(r["status"] != "pending" for r in rows)

        wait_until(claims_sent, 120, "the dead process's claims to be delivered", interval=0.05)
        figures["restart_to_dead_claims_delivered_s"] = round(time.monotonic() - t0, 2)
        # 2. (PostgreSQL) the database goes away right after a request was accepted
        if proxy is not None:
            assert actions["cut"].wait(60), "the outage never came"
        # 3. kill -9 at a random moment under load; restart
        wait_until(lambda: len(rx.accepted()) >= total // 2, 60, "half of the messages")
        svc.kill()
        in_doubt |= doubtful(db)
        svc.start().wait_ready()
        thread.join(120)
        assert not thread.is_alive() and not errors, errors
        t_settle = time.monotonic()
        wait_until(
            lambda: db.settled() and db.leased() == 0,
            180,
            "every delivery to be sent",
            interval=0.2,
        )
        figures["settle_after_load_s"] = round(time.monotonic() - t_settle, 2)
        time.sleep(1.0)  # nothing more may arrive
    finally:
        stop_writing.set()
        rx.on_request = None
        svc.close()
        print(f"----- {svc.name} ({svc.log_path}) -----\n{svc.log_tail(3000)}")

    # nothing lost: every change delivered to both receivers, ending with the resolution
    rows = db.rows("SELECT status, count(*) AS n FROM deliveries GROUP BY status")
    statuses = {r["status"]: int(r["n"]) for r in rows}
    assert set(statuses) == {"sent"}, statuses
    versions = db.incident_versions()
    assert len(versions) == N_INCIDENTS
    last = last_versions(rx.requests)
    for path in ("/hook", "/pd"):
        for inc_id, version in versions.items():
            assert last.get((path, inc_id)) == (version, "resolved"), (path, inc_id)
    # nothing twice but the request on the wire when the process died
    dups = duplicates(rx.requests)
    figures.update(
        truncated_by_kill=sum(1 for r in rx.requests if not complete(r)),
        messages=len(rx.accepted()),
        events=int(db.scalar("SELECT count(*) FROM outbox")),
        duplicates=sum(n - 1 for n in dups.values()),
        in_doubt_at_kills=len(in_doubt),
        proxy_cuts=proxy.cuts if proxy else 0,
        refused_while_down=proxy.refused if proxy else 0,
    )
    print("FIGURES", figures)
    # (the request on the wire at the first kill was resent, or superseded by a newer
    # version of its incident: the final versions above were all delivered)
    for path, key in dups:  # only what was on the wire when a process died, flagged
        assert (path, key.rpartition(".v")[0]) in in_doubt, (path, key, in_doubt)
        resent = [r for r in rx.accepted() if message_key(r) == (path, key)][1:]
        assert all(r.header("X-Sentinel-Redelivery") == "true" for r in resent)
    assert figures["duplicates"] <= len(in_doubt)
    assert figures["restart_to_dead_claims_delivered_s"] < figures["restart_to_ready_s"] + 5
    db.close()
    direct.close()
