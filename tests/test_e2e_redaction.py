"""End to end (#20, failure 1; #27: every secret shape of tests/secret_shapes.py, each in
its own pod's failing log and labels, through /ingest, OTLP and Forward, with SQLite and
PostgreSQL, found in no receiver's body, store row, API reply, dashboard page, /metrics or
the service's log): the real service (``vllm-sentinel serve``) listening beyond
loopback, fed a real failing log with secrets planted in vLLM's ``non-default args`` and in a
``?token=hf_...`` URL (tests/secrets_support.py) the way Fluent Bit's http output sends it,
paging a real receiver as a webhook, Slack, PagerDuty and Alertmanager: no planted secret in
any delivered body, any store row, ``GET /incidents`` or the dashboard; the redactions are
counted in /metrics; reads need the token because the API listens beyond loopback."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e_support import (
    Db,
    Sentinel,
    free_port,
    iso_ns,
    kubernetes_map,
    service_config,
    wait_until,
    webhook,
)
from tests.receiver import Receiver
from tests.secret_shapes import Planted, plant
from tests.secret_shapes import leaked as shapes_leaked
from tests.secrets_support import dump_tables, leaked, secret_lines

pytestmark = pytest.mark.slow

NS, POD = "llm-prod", "secret-0"


def records() -> list[dict[str, object]]:
    lines = secret_lines()
    end = time.time()
    return [
        {
            "date": end - (len(lines) - i) * 0.001,
            "time": iso_ns(end - (len(lines) - i) * 0.001),
            "stream": "stdout",
            "_p": "F",
            "log": line,
            "kubernetes": kubernetes_map(NS, POD, "gpu-node-1"),
        }
        for i, line in enumerate(lines)
    ]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as rx:
        yield rx


def test_no_planted_secret_leaves_the_real_service(tmp_path: Path, receiver: Receiver) -> None:
    token = "e2e-redaction-token-0123456789"
    port = free_port()
    db = f"sqlite:///{tmp_path / 'sentinel.db'}"
    receivers = [
        webhook(receiver.url, "oncall"),
        {"name": "chat", "type": "slack", "url": receiver.url + "/slack"},
        {"name": "pd", "type": "pagerduty", "url": receiver.url + "/pd", "routing_key": "rk-0"},
        {"name": "am", "type": "alertmanager", "url": receiver.url + "/am"},
    ]
    cfg = service_config(store_url=db, api_port=port, token=token, receivers=receivers)
    cfg["api"]["host"] = "0.0.0.0"  # beyond loopback: reads need a token too
    svc = Sentinel(tmp_path, "redaction", cfg)
    try:
        svc.start().wait_ready()
        auth = svc.headers()
        r = svc.http.post(
            "/ingest",
            content=json.dumps(records()).encode(),
            headers={**auth, "Content-Type": "application/json"},
        )
        assert r.status_code == 200, r.text

        # reads: refused without the token (no read_token set, not loopback)
        assert svc.http.get("/incidents").status_code == 401
        items = wait_until(
            lambda: svc.http.get("/incidents", headers=auth).json()["items"], 20, "the incident"
        )
        assert [i["category"] for i in items] == ["model_unavailable"]
        inc_id = items[0]["id"]
        detail = svc.http.get(f"/incidents/{inc_id}", headers=auth)
        page = svc.http.get(f"/ui/incidents/{inc_id}", headers=auth)
        assert detail.status_code == 200 and page.status_code == 200
        assert "<REDACTED>" in detail.text

        wait_until(lambda: len(receiver.accepted()) >= 4, 30, "a page to each of 4 receivers")
        paths = sorted(req.path for req in receiver.accepted())
        assert paths == ["/hook", "/hook/am/api/v2/alerts", "/hook/pd", "/hook/slack"], paths

        served = [json.dumps(items), detail.text, page.text]
        served.append(svc.http.get(f"/streams/{NS}/{POD}/vllm", headers=auth).text)
        bodies = [req.body.decode("utf-8", "replace") for req in receiver.requests]
        assert leaked("\n".join(served)) == []
        assert leaked("\n".join(bodies)) == []
        (hook,) = [req for req in receiver.accepted() if req.path == "/hook"]
        assert "token=<REDACTED>" in hook.body.decode()  # the line is there, its secret not
        # the args line: the api_key list and the hf_token; the root-cause line: the URL
        # token (each counted once, by the first pattern that found it)
        assert svc.metric("sentinel_redactions_total", pattern="secret_named_key") == 3
        assert svc.metric("sentinel_redactions_total") == 3
    finally:
        svc.close()
    assert leaked(dump_tables(db)) == []
    assert leaked(svc.log_tail(1 << 20)) == []  # nor the service's own log


# ---- every shape, every door, every output (#27) --------------------------------------------
LABEL_KEY = "api-token"
FWD_SECRET_TAG = "kube.var.log.containers"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'sentinel.db'}"
        return
    from tests.test_store import fresh_pg_url, pg_unavailable

    reason = pg_unavailable()
    if reason:
        pytest.skip(reason)
    yield from fresh_pg_url()


def shape_lines(fragment: str) -> list[str]:
    """The real failing log with ``fragment`` in its args line and its root-cause line."""
    out = []
    for line in SOURCE_LINES:
        if "non-default args:" in line or line.startswith(
            "huggingface_hub.errors.LocalEntryNotFoundError"
        ):
            line = f"{line} {fragment}"
        out.append(line)
    return out


SOURCE_LINES = (
    (Path(__file__).resolve().parent / "fixtures" / "real")
    .joinpath("model-unavailable-offline.log")
    .read_text()
    .splitlines()
)


def kube_of(i: int, label_secret: str, sk: str) -> dict[str, Any]:
    k = kubernetes_map(f"shape-{i}", f"vllm-{i}", "gpu-node-1")
    k["labels"] = {**k["labels"], LABEL_KEY: label_secret, "note": f"owner key {sk}"}
    return k


def ingest_body(i: int, lines: list[str], kube: dict[str, Any]) -> bytes:
    end = time.time()
    return json.dumps(
        [
            {
                "date": end - (len(lines) - n) * 0.001,
                "time": iso_ns(end - (len(lines) - n) * 0.001),
                "stream": "stdout",
                "_p": "F",
                "log": line,
                "kubernetes": kube,
            }
            for n, line in enumerate(lines)
        ]
    ).encode()


def otlp_body(i: int, lines: list[str], label_secret: str, sk: str) -> bytes:
    def attr(k: str, v: str) -> dict[str, Any]:
        return {"key": k, "value": {"stringValue": v}}

    end = time.time_ns()
    resource = [
        attr("k8s.namespace.name", f"shape-{i}"),
        attr("k8s.pod.name", f"vllm-{i}"),
        attr("k8s.container.name", "vllm"),
        attr("k8s.node.name", "gpu-node-1"),
        attr(f"k8s.pod.labels.{LABEL_KEY}", label_secret),
        attr("k8s.pod.labels.note", f"owner key {sk}"),
    ]
    logs = [
        {
            "timeUnixNano": str(end - (len(lines) - n) * 1_000_000),
            "body": {"stringValue": line},
            "attributes": [attr("log.iostream", "stdout")],
        }
        for n, line in enumerate(lines)
    ]
    body = {
        "resourceLogs": [
            {"resource": {"attributes": resource}, "scopeLogs": [{"logRecords": logs}]}
        ]
    }
    return json.dumps(body).encode()


def send_forward(port: int, i: int, lines: list[str], kube: dict[str, Any]) -> None:
    """One Forward-mode message with a chunk; waits for its ack."""
    import msgpack

    now = time.time()
    entries = [
        [now - (len(lines) - n) * 0.001, {"log": line, "stream": "stdout", "kubernetes": kube}]
        for n, line in enumerate(lines)
    ]
    chunk = f"shape-{i}"
    message = msgpack.packb([FWD_SECRET_TAG, entries, {"chunk": chunk}], use_bin_type=True)
    unpacker = msgpack.Unpacker(raw=False)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(message)
        while True:
            data = sock.recv(65536)
            assert data, "connection closed without an ack"
            unpacker.feed(data)
            for answer in unpacker:
                assert answer == {"ack": chunk}
                return


def test_every_secret_shape_through_every_door_reaches_no_output(
    tmp_path: Path, receiver: Receiver, store_url: str
) -> None:
    planted = plant(27)
    label_secrets = [f"label-secret-{i}-{p.secrets[0][:6]}Q9" for i, p in enumerate(planted)]
    sk = next(p for p in planted if p.shape == "openai_bare").secrets[0]
    everything = [*planted, Planted("labels", "", (*label_secrets,))]
    token = "e2e-shapes-token-kQ8vX2mP9rL4tW7zY1nB3c"
    port, fwd = free_port(), free_port()
    fast = {"rate_limit_per_minute": 60_000}
    receivers = [
        webhook(receiver.url, "oncall", **fast),
        {"name": "chat", "type": "slack", "url": receiver.url + "/slack", **fast},
        {
            "name": "pd",
            "type": "pagerduty",
            "url": receiver.url + "/pd",
            "routing_key": "rk-0",
            **fast,
        },
        {"name": "am", "type": "alertmanager", "url": receiver.url + "/am", **fast},
    ]
    cfg = service_config(
        store_url=store_url, api_port=port, forward_port=fwd, token=token, receivers=receivers
    )
    svc = Sentinel(tmp_path, "shapes", cfg)
    doors = {"ingest": 0, "otlp": 0, "forward": 0}
    try:
        svc.start().wait_ready()
        auth = {**svc.headers(), "Content-Type": "application/json"}
        for i, p in enumerate(planted):
            lines = shape_lines(p.fragment)
            kube = kube_of(i, label_secrets[i], sk)
            door = ("ingest", "otlp", "forward")[i % 3]
            doors[door] += 1
            if door == "ingest":
                r = svc.http.post("/ingest", content=ingest_body(i, lines, kube), headers=auth)
                assert r.status_code == 200, r.text
            elif door == "otlp":
                r = svc.http.post(
                    "/v1/logs", content=otlp_body(i, lines, label_secrets[i], sk), headers=auth
                )
                assert r.status_code == 200, r.text
            else:
                send_forward(fwd, i, lines, kube)
        n = len(planted)
        items = wait_until(
            lambda: (
                (
                    x := svc.http.get("/incidents", params={"limit": 500}, headers=auth).json()[
                        "items"
                    ]
                )
                and len(x) >= n
                and x
            ),
            120,
            f"{n} incidents",
        )
        assert len(items) == n and {i["category"] for i in items} == {"model_unavailable"}
        db = Db(store_url)
        try:
            wait_until(db.settled, 180, "every page delivered")
        finally:
            db.close()
        assert len(receiver.accepted()) >= 4 * n
        served = [json.dumps(items), svc.http.get("/ui/incidents", headers=auth).text]
        for inc in items:
            served.append(svc.http.get(f"/incidents/{inc['id']}", headers=auth).text)
            served.append(svc.http.get(f"/ui/incidents/{inc['id']}", headers=auth).text)
        for i in range(n):
            served.append(svc.http.get(f"/streams/shape-{i}/vllm-{i}/vllm", headers=auth).text)
        served.append(svc.http.get("/metrics").text)
        assert "<REDACTED>" in "\n".join(served)
        bodies = "\n".join(req.body.decode("utf-8", "replace") for req in receiver.requests)
        outputs = {
            "receivers": bodies,
            "api_and_dashboard": "\n".join(served),
            "store": dump_tables(store_url),
        }
        assert {k: shapes_leaked(v, everything) for k, v in outputs.items()} == {
            k: [] for k in outputs
        }
        assert svc.metric("sentinel_redactions_total") >= n
    finally:
        svc.close()
    assert shapes_leaked(svc.log_tail(1 << 22), everything) == []
    assert all(doors.values())
