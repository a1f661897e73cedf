"""Named actors and what they do (issue #27 point 4, issue #28): every write is recorded under
the authenticated user in the append-only audit table; acknowledge, assign and notes; the
incident's timeline says who did what and when; ``?q=`` finds incidents by pod, model, image,
root-cause words. A real store, a real pipeline, real captures through the real ingest door."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from service.app import web_app
from service.classify.rulebook import RuleBook
from service.config import ApiSettings, ApiUser, Settings
from service.context import ServiceContext
from tests.api_support import (
    REAL,
    WRITE,
    WRITE_TOKEN,
    close_context,
    fluentbit_records,
    kube,
    make_context,
)

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdefgh"
VIEWER = "viewer-token-0123456789abcd"
AS_ALICE = {"Authorization": f"Bearer {ALICE}"}
AS_BOB = {"Authorization": f"Bearer {BOB}"}
AS_VIEWER = {"Authorization": f"Bearer {VIEWER}"}
USERS = [
    ApiUser(name="alice", token=ALICE, role="write"),
    ApiUser(name="bob", token=BOB, role="write"),
    ApiUser(name="viewer", token=VIEWER, role="read"),
]


@pytest.fixture(scope="module")
def ctx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceContext]:
    c = make_context(tmp_path_factory.mktemp("oncall") / "s.db", RuleBook())
    c.settings.api.users = list(USERS)
    c.settings.api.trusted_proxies = ApiSettings(trusted_proxies=["10.9.0.0/16"]).trusted_proxies
    yield c
    close_context(c)


@pytest.fixture(scope="module")
def client(ctx: ServiceContext) -> Iterator[TestClient]:
    with TestClient(web_app(ctx)) as c:
        for pod, log in (
            ("llama-kv-0", "kv-cache-too-small.cri.log"),
            ("qwen-dtype-1", "bad-dtype.cri.log"),
        ):
            r = c.post(
                "/ingest",
                json=fluentbit_records(REAL / log, kube("llm-prod", pod)),
                headers=WRITE,
            )
            assert r.status_code == 200, r.text
        yield c


def incident_of(client: TestClient, pod: str) -> dict[str, object]:
    items = client.get("/incidents", params={"pod": pod}).json()["items"]
    assert items, f"no incident for {pod}"
    return dict(items[0])


def test_each_user_writes_as_themselves_and_the_audit_says_who(client: TestClient) -> None:
    inc = incident_of(client, "llama-kv-0")
    iid = inc["id"]
    r = client.post(f"/incidents/{iid}/ack", headers=AS_ALICE)
    assert r.status_code == 200, r.text
    assert r.json()["acknowledged_by"] == "alice" and r.json()["acknowledged_at"] > 0
    assert client.post(f"/incidents/{iid}/ack", headers=AS_BOB).json()["acknowledged_by"] == (
        "alice"
    )  # acknowledged once: the second changes nothing
    r = client.post(f"/incidents/{iid}/assign", json={"assignee": "bob"}, headers=AS_ALICE)
    assert r.status_code == 200 and r.json()["assignee"] == "bob"
    r = client.post(
        f"/incidents/{iid}/notes", json={"text": "lowered max-model-len"}, headers=AS_BOB
    )
    assert r.status_code == 201
    assert [(n["actor"], n["detail"]["text"]) for n in r.json()["notes"]] == [
        ("bob", "lowered max-model-len")
    ]
    # the shared token still writes, as the actor "token"
    fb = client.post(f"/incidents/{iid}/feedback", json={"correct": True}, headers=WRITE)
    assert fb.status_code == 201
    audit = client.get("/audit", params={"target_id": iid}).json()
    assert [(a["actor"], a["via"], a["action"]) for a in reversed(audit)] == [
        ("alice", "user", "ack"),
        ("alice", "user", "assign"),
        ("bob", "user", "note"),
        ("token", "token", "feedback"),
    ]


def test_readers_and_strangers_cannot_write(client: TestClient) -> None:
    iid = incident_of(client, "qwen-dtype-1")["id"]
    for headers in (AS_VIEWER, {"Authorization": "Bearer not-a-token-at-all-xxxxxxx"}, {}):
        r = client.post(f"/incidents/{iid}/ack", headers=headers)
        assert r.status_code == 401, (headers, r.text)
    # a proxy's user header from an untrusted peer (the test client) is nobody
    r = client.post(f"/incidents/{iid}/ack", headers={"X-Forwarded-User": "mallory"})
    assert r.status_code == 401
    assert client.get(f"/incidents/{iid}").json()["acknowledged_by"] is None
    r = client.post(f"/incidents/{iid}/notes", json={"text": "  "}, headers=AS_ALICE)
    assert r.status_code == 422
    assert client.post("/incidents/nope/ack", headers=AS_ALICE).status_code == 404


def test_the_timeline_lists_who_did_what_in_order(client: TestClient) -> None:
    iid = incident_of(client, "llama-kv-0")["id"]
    silence = client.post(
        "/silences",
        json={
            "matchers": {"namespace": ["llm-prod"], "pod": ["llama-kv-0"]},
            "duration": "4h",
            "comment": "fixing it",
            "incident": iid,
        },
        headers=AS_BOB,
    )
    assert silence.status_code == 201 and silence.json()["created_by"] == "bob"
    done = client.post(f"/incidents/{iid}/resolve", json={"reason": "fixed"}, headers=AS_ALICE)
    assert done.status_code == 200
    line = [(e["by"], e["action"]) for e in done.json()["timeline"]]
    assert line[0] == ("vllm-sentinel", "opened")
    assert line[1:] == [
        ("alice", "acknowledged"),
        ("alice", "assigned"),
        ("bob", "note"),
        ("token", "feedback"),
        ("bob", "silenced"),
        ("alice", "resolved"),
    ]
    times = [e["at"] for e in done.json()["timeline"]]
    assert times == sorted(times)
    assert done.json()["extra"]["resolved_by"] == "alice"
    assert done.json()["stages"]  # the ladder's times moved here


def test_silences_are_edited_extended_and_expired_by_name(client: TestClient) -> None:
    r = client.post(
        "/silences",
        json={"matchers": {"namespace": ["llm-dev"]}, "duration": "1h", "comment": "drill"},
        headers=AS_ALICE,
    )
    sid, ends = r.json()["id"], r.json()["ends_at"]
    r = client.post(f"/silences/{sid}/extend", json={"duration": "2h"}, headers=AS_BOB)
    assert r.status_code == 200 and r.json()["ends_at"] == pytest.approx(ends + 7200)
    r = client.patch(f"/silences/{sid}", json={"comment": "longer drill"}, headers=AS_BOB)
    assert r.status_code == 200 and r.json()["comment"] == "longer drill"
    assert client.patch(
        f"/silences/{sid}", json={"comment": "x"}, headers=AS_VIEWER
    ).status_code == (401)
    assert client.delete(f"/silences/{sid}", headers=AS_ALICE).status_code == 204
    assert client.post(
        f"/silences/{sid}/extend", json={"duration": "1h"}, headers=AS_BOB
    ).status_code == (404)  # ended: make a new one
    audit = client.get("/audit", params={"target_kind": "silence", "target_id": sid}).json()
    assert [(a["actor"], a["action"]) for a in reversed(audit)] == [
        ("alice", "silence.create"),
        ("bob", "silence.extend"),
        ("bob", "silence.edit"),
        ("alice", "silence.expire"),
    ]
    assert audit[1]["detail"]["changed"]["comment"] == {"from": "drill", "to": "longer drill"}


def test_the_audit_table_is_append_only_and_free_text_names_are_gone(
    client: TestClient, ctx: ServiceContext
) -> None:
    r = client.post(
        "/silences",
        json={
            "matchers": {"namespace": ["x"]},
            "duration": "1h",
            "comment": "c",
            "created_by": "somebody-else",
        },
        headers=AS_ALICE,
    )
    assert r.status_code == 422  # the author is who signed in, never a typed name
    n = len(client.get("/audit", params={"limit": 500}).json())
    assert client.delete("/audit").status_code == 405
    assert client.post("/audit", json={}).status_code == 405
    assert len(client.get("/audit", params={"limit": 500}).json()) == n
    with ctx.store.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM audit")).scalar() == n


def test_a_trusted_proxy_names_the_user(tmp_path: Path) -> None:
    c = make_context(tmp_path / "p.db", RuleBook(), token=WRITE_TOKEN)
    c.settings.api.users = list(USERS)
    c.settings.api.trusted_proxies = ApiSettings(trusted_proxies=["127.0.0.0/8"]).trusted_proxies
    try:
        with TestClient(web_app(c), client=("127.0.0.1", 5000)) as tc:
            r = tc.post(
                "/ingest",
                json=fluentbit_records(REAL / "bad-dtype.cri.log", kube("ns", "p-0")),
                headers=WRITE,
            )
            assert r.status_code == 200
            iid = incident_of(tc, "p-0")["id"]
            r = tc.post(f"/incidents/{iid}/ack", headers={"X-Forwarded-User": "carol"})
            assert r.status_code == 200 and r.json()["acknowledged_by"] == "carol"
            # a user api.users lists as a reader stays a reader behind the proxy
            r = tc.post(
                f"/incidents/{iid}/notes",
                json={"text": "x"},
                headers={"X-Forwarded-User": "viewer"},
            )
            assert r.status_code == 401
            assert tc.get("/audit").json()[0]["via"] == "proxy"
    finally:
        close_context(c)


def test_user_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="unique"):
        ApiSettings(users=[USERS[0], ApiUser(name="alice", token=BOB)])
    with pytest.raises(ValueError, match="unique"):
        ApiSettings(token=ALICE, users=[USERS[0]])
    with pytest.raises(ValueError):
        ApiUser(name="x", token="   ")
    with pytest.raises(ValueError):
        ApiSettings(trusted_proxies=["not-a-network"])
    s = Settings(api={"users": [{"name": "a", "token": ALICE, "role": "read"}]})
    assert s.api.users[0].role == "read"


# ---- search --------------------------------------------------------------------------------
def test_q_finds_incidents_by_pod_model_category_and_root_cause_words(client: TestClient) -> None:
    def found(q: str) -> set[str]:
        items = client.get("/incidents", params={"q": q, "limit": 500}).json()["items"]
        return {str(i["pod"]) for i in items}

    assert found("llama-kv") == {"llama-kv-0"}
    assert found("LLAMA-KV-0") == {"llama-kv-0"}  # any case
    assert found("oom_kv_cache") == {"llama-kv-0"}
    assert found("tiny-llama-longctx") == {"llama-kv-0"}  # the model the log named
    assert found("max seq len") == {"llama-kv-0"}  # words of the root-cause line
    assert found("qwen") == {"qwen-dtype-1"}
    assert found("llm-prod") == {"llama-kv-0", "qwen-dtype-1"}
    assert found("qwen oom_kv_cache") == set()  # every word must occur
    assert found("100%_") == set()  # LIKE's wildcards are plain characters
    # with the other filters
    assert (
        client.get("/incidents", params={"q": "llm-prod", "pod": "qwen-dtype-1"}).json()["count"]
        == 1
    )


def test_search_text_is_backfilled_by_the_migration(tmp_path: Path) -> None:
    """Incidents stored before 0007 are found too (the migration fills ``search``)."""
    from alembic import command

    from service.store import Store
    from service.store.migrate import _config

    db = tmp_path / "old.db"
    c = make_context(db, RuleBook())
    try:
        with TestClient(web_app(c)) as tc:
            r = tc.post(
                "/ingest",
                json=fluentbit_records(REAL / "bad-dtype.cri.log", kube("ns", "old-pod-7")),
                headers=WRITE,
            )
            assert r.status_code == 200
    finally:
        close_context(c)
    s = Store(f"sqlite:///{db}")
    cfg = _config()
    with s.engine.connect() as conn, conn.begin():
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0006")
    with s.engine.connect() as conn:
        assert "search" not in {
            r[1] for r in conn.execute(text("PRAGMA table_info(incidents)")).all()
        }
    s.migrate()
    items, _ = s.list_incidents(q="old-pod-7")
    assert [i["pod"] for i in items] == ["old-pod-7"]
    s.close()


def test_time_is_recorded(client: TestClient) -> None:
    before = time.time()
    iid = incident_of(client, "qwen-dtype-1")["id"]
    r = client.post(f"/incidents/{iid}/notes", json={"text": "looking"}, headers=AS_ALICE)
    note = r.json()["notes"][-1]
    assert before <= note["at"] <= time.time()
